"""``factory view``: the data logic (table rows, PNGs, the cache, side by side) and the
server over plain HTTP (the page, the API, and who it refuses)."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import assert_one_line_error
from PIL import Image
from typer.testing import CliRunner
from view_factories import OFFSET, RES, many_store, view_store

from dataview import DataViewServer
from dataview.server import PortInUseError
from factory.envs.pile import PileWorld
from factory.envs.scoring import scorer_for
from factory.errors import FactoryError
from factory.generators import make_generator
from factory.record import open_output
from factory.record.runner import run_episode
from factory.store import EpisodeMeta, EpisodeStore
from factory.store.provenance import is_seeded
from factory.view import LruCache, StoreView, encode_png, episode_rows
from factory.view.png import beside, pick, shrink, strip, tile
from pipelines.cli import app

TOKEN = "view-test-token"
REPO = Path(__file__).resolve().parents[1]


def _png(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("view") / "view.zarr"
    return path, view_store(path)


@pytest.fixture(scope="module")
def server(store: tuple[Path, dict[str, Any]]) -> Iterator[DataViewServer]:
    view = StoreView(store[0])
    srv = DataViewServer(view, port=0, token=TOKEN)
    srv.open()
    yield srv
    srv.close()
    view.close()


# -- images and the cache ---------------------------------------------------------------
def test_png_round_trips_exactly_and_frames_shrink_by_block_means() -> None:
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (7, 13, 3), dtype=np.uint8)
    np.testing.assert_array_equal(_png(encode_png(image)), image)
    with pytest.raises(FactoryError, match="uint8"):
        encode_png(image.astype(np.float32))
    frames = np.zeros((2, 4, 4, 3), np.uint8)
    frames[:, :2, :2] = 100  # top-left 2 x 2 block
    frames[:, 0, 0] = 104
    small = shrink(frames, 2)
    assert small.shape == (2, 2, 2, 3)
    assert small[0, 0, 0, 0] == 101 and small[0, 1, 1, 0] == 0  # (104 + 3 * 100) / 4
    assert shrink(frames, 4) is frames
    assert pick(10, 4).tolist() == [0, 3, 6, 9] and pick(3, 10).tolist() == [0, 1, 2]
    assert pick(5, 1).tolist() == [4]


def test_a_sprite_sheet_puts_frame_t_at_its_row_and_column() -> None:
    frames = np.arange(7, dtype=np.uint8)[:, None, None, None] * np.ones((7, 2, 3, 3), np.uint8)
    image, sheet = tile(frames, 3)
    assert image.shape == (3 * 2, 3 * 3, 3) and sheet.to_json() == {
        "frames": 7,
        "cols": 3,
        "height": 2,
        "width": 3,
    }
    for t in range(7):
        r, c = divmod(t, sheet.cols)
        assert (image[r * 2 : r * 2 + 2, c * 3 : c * 3 + 3] == t).all()
    assert (image[4:, 3:] == 0).all()  # the unused cells
    film = strip(frames[:3], gap=2)
    assert film.shape == (2, 3 * 3 + 2 * 2, 3) and (film[:, 3:5] == 255).all()
    tall = np.full((7, 4, 1, 3), 9, np.uint8)  # a second camera, taller and narrower
    pair = beside([frames, tall])
    assert pair.shape == (7, 4, 3 + 2 + 1, 3) and beside([frames]) is frames
    assert (pair[:, :2, :3] == frames).all() and (pair[:, 2:, :3] == 0).all()  # black below
    assert (pair[:, :, 3:5] == 255).all() and (pair[:, :, 5:] == 9).all()


def test_the_lru_cache_keeps_the_newest_within_its_budget_and_builds_once() -> None:
    cache = LruCache(10)
    cache.put("a", b"aaaa")
    cache.put("b", b"bbbb")
    assert cache.get("a") == b"aaaa"  # a is now the newest
    cache.put("c", b"cccc")  # 12 > 10 bytes: b (the oldest) goes
    assert cache.get("b") is None and cache.get("a") and cache.get("c") and cache.used == 8
    cache.put("huge", b"x" * 11)
    assert cache.get("huge") is None and len(cache) == 2
    builds: list[int] = []

    def slow() -> bytes:
        builds.append(1)
        time.sleep(0.2)
        return b"dd"

    threads = [threading.Thread(target=cache.get_or_build, args=("d", slow)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and cache.get("d") == b"dd" and cache.misses == 1 and cache.hits == 3


# -- the table ---------------------------------------------------------------------------
def test_rows_come_from_the_metadata_and_the_last_block_pose(
    store: tuple[Path, dict[str, Any]],
) -> None:
    path, made = store
    with EpisodeStore.open(path) as s:
        rows = episode_rows(s)
    assert [r.source for r in rows] == ["real", "world_model", "teleop"]
    assert [r.generator for r in rows] == ["play", "expert", "keyboard"]
    assert [r.model_id for r in rows] == [None, "tiny@x", None]
    assert [r.length for r in rows] == [12, 12, 5]
    assert [r.success for r in rows] == [False, True, None]
    assert [r.seed for r in rows] == [7, 7, None]
    assert [r.seeded for r in rows] == [False, True, False]
    score = made["score"]
    assert 0.3 < score[-1] < score[0] < 0.7  # the push moves the block off the goal
    assert rows[0].final_coverage == pytest.approx(float(score[-1]), abs=1e-5)  # the env's
    model_final = scorer_for("pusht")(made["generated"]["task_state"][-1:].astype(np.float64))[0]
    assert rows[1].final_coverage == pytest.approx(float(model_final[0]), abs=1e-6)
    assert rows[2].final_coverage == pytest.approx(float(score[4]), abs=1e-5)


def test_seeded_means_a_recorded_ground_truth_start() -> None:
    def meta(source: str, seed: int | None, **extra: object) -> EpisodeMeta:
        return EpisodeMeta(source=source, generator="expert", seed=seed, extra=dict(extra))

    config = [1.0, 2.0, 3.0, 4.0, 0.5]
    assert is_seeded(meta("world_model", 3, initial="seed", initial_config=config))
    assert is_seeded(meta("world_model", None, initial="config", initial_config=config))
    assert not is_seeded(meta("world_model", None, initial="seed", initial_config=config))
    assert not is_seeded(meta("world_model", 3, initial="seed"))  # no config recorded
    assert not is_seeded(meta("world_model", 3, initial="store", initial_config=config))
    assert not is_seeded(meta("real", 3, initial="seed", initial_config=config))


def test_the_table_of_1000_episodes_reads_no_image_and_comes_fast(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    many = many_store(tmp_path / "many.zarr", 1000)
    many.close()
    view = StoreView(tmp_path / "many.zarr")
    read: list[str] = []
    original = EpisodeStore._read_slice

    def spy(self: EpisodeStore, key: str, start: int, stop: int) -> np.ndarray:
        read.append(key)
        return original(self, key, start, stop)

    monkeypatch.setattr(EpisodeStore, "_read_slice", spy)
    srv = DataViewServer(view, port=0, token=TOKEN)
    srv.open()
    try:
        started = time.perf_counter()
        status, body = _get(srv, f"/api/episodes?token={TOKEN}")
        elapsed = time.perf_counter() - started
    finally:
        srv.close()
        view.close()
    rows = json.loads(body)["rows"]
    assert status == 200 and len(rows) == 1000 and elapsed < 2.0, elapsed
    assert "image" not in read and read == ["task_state"]  # one read of the block poses
    assert [r["seed"] for r in rows] == list(range(1000))
    coverage = np.array([r["final_coverage"] for r in rows])
    assert coverage[256] == pytest.approx(1.0, abs=1e-6) and coverage[0] == 0.0  # on, off
    poses = np.stack([np.arange(1000), np.full(1000, 256.0), np.full(1000, np.pi / 4)], 1)
    expected = scorer_for("pusht")(poses.astype(np.float32).astype(np.float64))[0]
    np.testing.assert_allclose(coverage, expected, atol=1e-6)


# -- episode media -----------------------------------------------------------------------
def test_thumbnails_filmstrips_and_frames_are_made_once_and_show_the_episode(
    store: tuple[Path, dict[str, Any]],
) -> None:
    path, made = store
    view = StoreView(path)
    try:
        real = made["real"]["image"]
        thumb = _png(view.thumb_png(0))
        np.testing.assert_array_equal(thumb, real[-1])  # 32 px: no shrinking
        film = _png(view.filmstrip_png(0))
        assert film.shape == (RES, 10 * RES + 9 * 2, 3)
        np.testing.assert_array_equal(film[:, :RES], real[0])
        np.testing.assert_array_equal(film[:, -RES:], real[-1])
        misses = view.images.misses
        view.thumb_png(0)
        view.filmstrip_png(0)
        assert view.images.misses == misses  # both cached by the first build
        detail = view.detail(0)
        sheet = detail["sheet"]
        assert sheet == {"frames": 12, "cols": 4, "height": RES, "width": RES}
        frames = _png(view.frames_png(0))
        for t in (0, 5, 11):
            r, c = divmod(t, sheet["cols"])
            cell = frames[r * RES : (r + 1) * RES, c * RES : (c + 1) * RES]
            np.testing.assert_array_equal(cell, real[t])
        assert detail["coverage"] == pytest.approx(made["score"].tolist(), abs=1e-5)
        assert detail["meta"]["generator"] == "play"
        with pytest.raises(FactoryError, match="no episode 3"):
            view.thumb_png(3)
    finally:
        view.close()


def test_a_two_camera_episode_shows_both_cameras_side_by_side(tmp_path: Path) -> None:
    """A pile store (top and side cameras): the thumbnail, the filmstrip and every cell of
    the sprite sheet hold the top view, a 2 px white gap, then the side view."""
    path, steps = tmp_path / "pile.zarr", 5
    world = PileWorld(resolution=RES)
    result = run_episode(world, make_generator("pile_play"), 3, steps, source="real")
    with open_output(path, world.spec, RES, append=False) as out:
        out.append_episode(result.data, result.meta)
    top, side = result.data["image"], result.data["image_side"]
    assert not np.array_equal(top, side)
    view = StoreView(path)
    try:
        assert view.summary()["cameras"] == ["image", "image_side"]
        thumb = _png(view.thumb_png(0))
        assert thumb.shape == (RES, 2 * RES + 2, 3) and (thumb[:, RES : RES + 2] == 255).all()
        np.testing.assert_array_equal(thumb[:, :RES], top[-1])
        np.testing.assert_array_equal(thumb[:, RES + 2 :], side[-1])
        film = _png(view.filmstrip_png(0))
        assert film.shape == (RES, steps * (2 * RES + 2) + (steps - 1) * 2, 3)
        np.testing.assert_array_equal(film[:, RES + 2 : 2 * RES + 2], side[0])
        detail = view.detail(0)
        assert detail["cameras"] == ["image", "image_side"]
        sheet = detail["sheet"]
        assert sheet == {"frames": steps, "cols": 3, "height": RES, "width": 2 * RES + 2}
        frames = _png(view.frames_png(0))
        for t in range(steps):
            r, c = divmod(t, sheet["cols"])
            cell = frames[r * RES : (r + 1) * RES, c * sheet["width"] : (c + 1) * sheet["width"]]
            np.testing.assert_array_equal(cell[:, :RES], top[t])
            np.testing.assert_array_equal(cell[:, RES + 2 :], side[t])
    finally:
        view.close()
        world.close()


def test_side_by_side_replays_the_generated_episode_in_the_ground_truth(
    store: tuple[Path, dict[str, Any]],
) -> None:
    path, made = store
    view = StoreView(path)
    try:
        pair = view.replay(1)
        real, generated = made["real"], made["generated"]
        np.testing.assert_array_equal(pair.model_frames, generated["image"])
        np.testing.assert_array_equal(pair.real_frames, real["image"])  # same start, actions
        np.testing.assert_allclose(pair.real_pose, real["task_state"], atol=1e-4)
        np.testing.assert_allclose(pair.position_err_px, np.linalg.norm(OFFSET), atol=1e-3)
        np.testing.assert_allclose(pair.angle_err_deg, 0.0, atol=1e-3)
        np.testing.assert_allclose(pair.real_coverage, made["score"], atol=1e-6)
        row = pair.row
        assert row["reset"] == "config" and row["steps"] == 12
        assert row["block_err_px"] == pytest.approx(float(pair.position_err_px[-1]), abs=1e-4)
        np.testing.assert_allclose(row["real_pose"], pair.real_pose[-1], atol=1e-4)
        assert view.replay(1) is pair  # kept
        sheet = _png(view.replay_frames_png(1))
        np.testing.assert_array_equal(sheet[:RES, RES : 2 * RES], real["image"][1])
        as_json = pair.to_json()
        assert len(as_json["position_err_px"]) == 12 and as_json["transfer"] == row
        with pytest.raises(FactoryError, match="seeded reset"):
            view.replay(0)
    finally:
        view.close()


# -- the server --------------------------------------------------------------------------
def _get(
    srv: DataViewServer, path: str, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    request = urllib.request.Request(srv.address.rstrip("/") + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_the_page_and_the_api_need_the_token(server: DataViewServer) -> None:
    status, page = _get(server, f"/?token={TOKEN}")
    assert status == 200 and b"/view.js" in page
    assert server.location == f"http://127.0.0.1:{server.port}/?token={TOKEN}"
    assert _get(server, "/view.js")[0] == 200  # the script holds no secret
    for path in ("/", "/api/episodes", "/api/episodes/0/thumb.png", "/api/store"):
        status, body = _get(server, path)
        assert (status, body) == (403, b"forbidden: no token\n"), path
    assert _get(server, "/api/episodes?token=guess") == (403, b"forbidden: a wrong token\n")
    status, body = _get(server, f"/api/store?token={TOKEN}")
    assert status == 200 and json.loads(body)["episodes"] == 3


def test_a_foreign_origin_or_site_or_host_is_refused(
    server: DataViewServer, caplog: pytest.LogCaptureFixture
) -> None:
    own = server.address.rstrip("/")
    path = f"/api/episodes?token={TOKEN}"
    assert _get(server, path, {"Origin": own})[0] == 200
    assert _get(server, path, {"Sec-Fetch-Site": "same-origin"})[0] == 200
    status, body = _get(server, path, {"Origin": "http://evil.example"})
    assert status == 403 and b"is not the page's own" in body
    other_port = f"http://127.0.0.1:{server.port + 1}"
    assert _get(server, path, {"Origin": other_port})[0] == 403
    status, body = _get(server, path, {"Sec-Fetch-Site": "cross-site"})
    assert status == 403 and b"cross-site" in body
    status, body = _get(server, path, {"Host": f"evil.example:{server.port}"})
    assert status == 403 and b"not loopback" in body
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 4, refused


def test_the_api_serves_episodes_images_and_replays(
    server: DataViewServer, store: tuple[Path, dict[str, Any]]
) -> None:
    _, made = store
    status, body = _get(server, f"/api/episodes/1?token={TOKEN}")
    detail = json.loads(body)
    assert status == 200 and detail["seeded"] and detail["source"] == "world_model"
    status, png = _get(server, f"/api/episodes/0/frames.png?token={TOKEN}")
    assert status == 200 and _png(png)[:RES, :RES].tolist() == made["real"]["image"][0].tolist()
    status, body = _get(server, f"/api/episodes/1/replay.json?token={TOKEN}")
    replay = json.loads(body)
    assert status == 200 and replay["transfer"]["reset"] == "config"
    assert replay["position_err_px"] == pytest.approx([5.0] * 12, abs=1e-3)
    status, body = _get(server, f"/api/episodes/0/replay.json?token={TOKEN}")
    assert status == 404 and "seeded reset" in json.loads(body)["error"]
    status, body = _get(server, f"/api/episodes/9/thumb.png?token={TOKEN}")
    assert status == 404 and "no episode 9" in json.loads(body)["error"]
    assert _get(server, f"/api/episodes/0/nothing.png?token={TOKEN}")[0] == 404


def _busy_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock, int(sock.getsockname()[1])


def test_a_taken_port_is_one_clear_error(store: tuple[Path, dict[str, Any]]) -> None:
    sock, port = _busy_port()
    view = StoreView(store[0])
    try:
        with pytest.raises(PortInUseError, match=f"port {port} .* already in use"):
            DataViewServer(view, port=port, token=TOKEN).open()
        result = CliRunner().invoke(app, ["view", str(store[0]), "--port", str(port)])
        assert_one_line_error(result, "already in use", "--port")
    finally:
        sock.close()
        view.close()


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, store: tuple[Path, dict[str, Any]]
) -> None:
    runner = CliRunner()
    assert_one_line_error(runner.invoke(app, ["view", str(tmp_path / "no.zarr")]), "does not exist")
    (tmp_path / "junk").mkdir()
    assert_one_line_error(runner.invoke(app, ["view", str(tmp_path / "junk")]), "not a zarr")
    args = ["view", str(store[0]), "--host", "0.0.0.0", "--no-token"]
    assert_one_line_error(runner.invoke(app, args), "--no-token", "loopback")
    args = ["view", str(store[0]), "--token", "short"]
    assert_one_line_error(runner.invoke(app, args), "--token must be at least")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_the_command_serves_until_interrupted(store: tuple[Path, dict[str, Any]]) -> None:
    cmd = [sys.executable, "-m", "pipelines.cli", "view", str(store[0]), "--port", "0"]
    env = {**os.environ, "COLUMNS": "400"}
    # a shell's background job inherits SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: give the server the default, as a terminal's Ctrl-C has it
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_default_sigint)  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "3 episodes" in line and "?token=" in line, line
        url = line.split("open ", 1)[1].split()[0]
        with urllib.request.urlopen(url.replace("/?", "/api/store?"), timeout=60) as resp:
            assert json.loads(resp.read())["episodes"] == 3
        with pytest.raises(urllib.error.HTTPError, match="403"):
            urllib.request.urlopen(url.split("?")[0] + "api/store", timeout=60)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
