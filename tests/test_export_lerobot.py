"""``factory export lerobot`` / ``factory import lerobot``: counts, exact arrays, video
PSNR, provenance, offline loading, the store -> export -> import round trip, bad input.

Stores are tiny (3 PushT episodes of <= 12 steps at 96 px, or synthetic 16 px ones):
video encoding is slow on 2 cores.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from factories import assert_one_line_error
from typer.testing import CliRunner

from exporters.lerobot_export import meaning_names
from factory.envs import pusht_geometry as geo
from factory.store import EpisodeMeta, EpisodeStore, KeySpec, StoreSchema
from pipelines.cli import app

pytest.importorskip("lerobot.datasets.lerobot_dataset")
from lerobot.datasets.lerobot_dataset import LeRobotDataset

runner = CliRunner()
REPO = "local/test"


def _ok(args: list[str]) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def _one_line_error(args: list[str], *needles: str) -> str:
    result = runner.invoke(app, args)
    assert_one_line_error(result, *needles)
    return str(result.output.strip())


def _digest(path: Path) -> str:
    """Hash of every file's relative path and bytes under ``path``."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def _frames(ds: LeRobotDataset, key: str = "observation.image") -> np.ndarray:
    """(N, H, W, 3) uint8 frames of every item, through the dataset's own __getitem__."""
    out = [np.asarray(ds[i][key]) for i in range(len(ds))]
    return np.round(np.stack(out).transpose(0, 2, 3, 1) * 255).astype(np.uint8)


def _column(ds: LeRobotDataset, key: str) -> np.ndarray:
    return np.asarray(ds.hf_dataset.with_format("numpy")[key])


@pytest.fixture(scope="module")
def pusht(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 expert PushT episodes of at most 12 steps at 96 px (the real resolution)."""
    out = tmp_path_factory.mktemp("src") / "pusht.zarr"
    args = ["collect", "--generator", "expert", "--episodes", "3", "--steps", "12"]
    result = runner.invoke(app, [*args, "--resolution", "96", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _synthetic(path: Path, successes: list[bool], image: bool = True, wrist: bool = False) -> Path:
    """A 16 px store with random frames, one episode per entry of ``successes``."""
    keys = {
        "action": KeySpec(shape=(2,), dtype="float32"),
        "state": KeySpec(shape=(2,), dtype="float32"),
    }
    if image:
        keys = {"image": KeySpec(shape=(16, 16, 3), dtype="uint8"), **keys}
    if wrist:
        keys["image_wrist"] = KeySpec(shape=(8, 12, 3), dtype="uint8")
    rng = np.random.default_rng(0)
    with EpisodeStore.create(
        path, StoreSchema(keys=keys), fps=10, action_meaning="xy", attrs={"task": "t"}
    ) as store:
        for i, ok in enumerate(successes):
            n = 4 + i
            data = {k: rng.uniform(0, 255, (n, *s.shape)).astype(s.dtype) for k, s in keys.items()}
            meta = EpisodeMeta(
                source="real", generator="play", seed=i, task=f"task {i}", success=ok
            )
            store.append_episode(data, meta)
    return path


@pytest.fixture(scope="module", params=["libsvtav1", "h264"])
def video_export(request: pytest.FixtureRequest, pusht: Path) -> tuple[Path, dict]:
    out = pusht.parent / f"video_{request.param}"
    summary = _ok(["export", "lerobot", str(pusht), str(out), "--repo-id", REPO,
                   "--vcodec", request.param])  # fmt: skip
    return out, summary


@pytest.fixture(scope="module")
def image_export(pusht: Path) -> Path:
    out = pusht.parent / "images"
    _ok(["export", "lerobot", str(pusht), str(out), "--repo-id", REPO, "--images"])
    return out


def test_video_export_loads_offline_and_matches(pusht: Path, video_export: tuple) -> None:
    out, summary = video_export
    ds = LeRobotDataset(REPO, root=out)  # HF_HUB_OFFLINE=1 (conftest): no Hub access
    with EpisodeStore.open(pusht) as store:
        assert summary["episodes"] == ds.num_episodes == store.n_episodes == 3
        assert summary["frames"] == ds.num_frames == store.n_frames
        assert ds.fps == 10 and ds.meta.video_keys == ["observation.image"]
        lengths = [int(ds.meta.episodes[i]["length"]) for i in range(ds.num_episodes)]
        assert lengths == store.episode_lengths.tolist()
        data = store.load()
        metas = store.all_meta()
    np.testing.assert_array_equal(_column(ds, "action"), data["action"])
    np.testing.assert_array_equal(_column(ds, "observation.state"), data["state"])
    np.testing.assert_array_equal(_column(ds, "task_state"), data["task_state"])
    psnr = _psnr(_frames(ds), data["image"])
    print(f"{summary['vcodec']} crf {summary['crf']}: PSNR {psnr:.2f} dB")
    assert psnr >= 35.0
    first = ds[0]
    assert first["task"] == metas[0].task
    record = json.loads(first["provenance"])
    assert record["store_episode"] == 0
    assert EpisodeMeta.from_json(record["meta"]) == metas[0]


def test_png_path_for_large_episodes(
    pusht: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Episodes too large for the streaming queue go through lerobot's PNG-then-encode path."""
    import exporters.lerobot_export as lerobot_export

    monkeypatch.setattr(lerobot_export, "STREAMING_MAX_BYTES", 0)
    with EpisodeStore.open(pusht) as store:
        video = lerobot_export.VideoOptions(vcodec="h264")
        req = lerobot_export.WriteRequest(store, [0], tmp_path / "x", REPO, video)
        assert "streaming_encoding" not in lerobot_export.writer_options(req)
    out = tmp_path / "png_path"
    _ok(["export", "lerobot", str(pusht), str(out), "--repo-id", REPO, "--vcodec", "h264"])
    ds = LeRobotDataset(REPO, root=out)
    with EpisodeStore.open(pusht) as store:
        assert ds.num_frames == store.n_frames
        assert _psnr(_frames(ds), store.load(["image"])["image"]) >= 35.0


def test_images_export_is_exact(pusht: Path, image_export: Path) -> None:
    ds = LeRobotDataset(REPO, root=image_export)
    assert ds.meta.image_keys == ["observation.image"] and not ds.meta.video_keys
    with EpisodeStore.open(pusht) as store:
        assert ds.num_frames == store.n_frames
        np.testing.assert_array_equal(_frames(ds), store.load(["image"])["image"])


def _assert_same_store(a: Path, b: Path, image_psnr: float | None = None) -> None:
    with EpisodeStore.open(a) as src, EpisodeStore.open(b) as back:
        assert back.episode_lengths.tolist() == src.episode_lengths.tolist()
        assert back.all_meta() == src.all_meta()
        assert back.fps == src.fps and back.action_meaning == src.action_meaning
        assert back.attrs["env"] == src.attrs["env"]
        assert set(back.schema.keys) == set(src.schema.keys)
        x, y = src.load(), back.load()
    for key in ("action", "state", "task_state"):
        np.testing.assert_array_equal(y[key], x[key])
    if image_psnr is None:
        np.testing.assert_array_equal(y["image"], x["image"])
    else:
        assert _psnr(y["image"], x["image"]) >= image_psnr


def test_round_trip_images_exact(pusht: Path, image_export: Path, tmp_path: Path) -> None:
    back = tmp_path / "back.zarr"
    summary = _ok(["import", "lerobot", str(image_export), str(back)])
    assert summary["cameras"] == {"observation.image": "image"}
    _assert_same_store(pusht, back)


def test_round_trip_video_within_codec_tolerance(
    pusht: Path, video_export: tuple, tmp_path: Path
) -> None:
    back = tmp_path / "back.zarr"
    _ok(["import", "lerobot", str(video_export[0]), str(back), "--camera", "observation.image"])
    _assert_same_store(pusht, back, image_psnr=35.0)


def test_selection_only_success_and_task(tmp_path: Path) -> None:
    src = _synthetic(tmp_path / "s.zarr", [True, False, True, True])
    out = tmp_path / "ok"
    args = ["export", "lerobot", str(src), str(out), "--repo-id", REPO, "--images"]
    summary = _ok([*args, "--episodes", "0:3", "--only-success", "--task", "push it"])
    assert summary["store_episodes"] == [0, 2]
    ds = LeRobotDataset(REPO, root=out)
    assert ds.num_episodes == 2 and ds.num_frames == 4 + 6
    assert list(ds.meta.tasks.index) == ["push it"]
    records = [json.loads(ds[i]["provenance"]) for i in (0, len(ds) - 1)]
    assert [r["store_episode"] for r in records] == [0, 2]
    with EpisodeStore.open(src) as store:
        want = np.concatenate([store.episode(i)["action"] for i in (0, 2)])
    np.testing.assert_array_equal(_column(ds, "action"), want)


FAR = np.array([60.0, 60.0, 0.0])  # nowhere near the goal: coverage 0
HALF = geo.GOAL + np.array([15.0, 0.0, 0.0])  # partly on it


def _posed(path: Path, scores: list[float | None], names: dict | None = None) -> Path:
    """A 16 px store whose task_state block poses walk FAR -> HALF -> GOAL -> GOAL, one
    episode per entry of ``scores`` (its meta.score)."""
    spec = {"image": (16, 16, 3), "action": (2,), "state": (2,), "task_state": (3,)}
    keys = {k: KeySpec(shape=v, dtype="uint8" if k == "image" else "float32")
            for k, v in spec.items()}  # fmt: skip
    attrs = {"task": "t", "env": "pusht", "task_state_names": ["block_x", "block_y", "block_angle"]}
    with EpisodeStore.create(
        path, StoreSchema(keys=keys), fps=10, action_meaning="target (u, v) in pixels",
        attrs={**attrs, **(names or {})},
    ) as store:  # fmt: skip
        for i, score in enumerate(scores):
            data = {
                "image": np.zeros((4, 16, 16, 3), np.uint8),
                "action": np.full((4, 2), i, np.float32),
                "state": np.zeros((4, 2), np.float32),
                "task_state": np.stack([FAR, HALF, geo.GOAL, geo.GOAL]).astype(np.float32),
            }
            meta = EpisodeMeta(source="real", generator="play", success=True, score=score)
            store.append_episode(data, meta)
    return path


def test_next_columns_known_answers(tmp_path: Path) -> None:
    """next.* of frame t score frame t + 1's block pose; the last frame takes meta.score
    (episode 0: 0.5) or, without one, its own pose's (episode 1: the goal, 1.0)."""
    src = _posed(tmp_path / "p.zarr", [0.5, None])
    out = tmp_path / "ds"
    summary = _ok(["export", "lerobot", str(src), str(out), "--repo-id", REPO, "--images"])
    assert summary["features"][-4:] == ["next.reward", "next.success", "next.done", "provenance"]
    ds = LeRobotDataset(REPO, root=out)
    half = geo.coverage(HALF.astype(np.float32))
    assert 0.2 < half < 0.9
    want = np.array([[half / 0.95, 1.0, 1.0, 0.5 / 0.95], [half / 0.95, 1.0, 1.0, 1.0]])
    np.testing.assert_allclose(_column(ds, "next.reward").reshape(2, 4), want, rtol=1e-6)
    success = _column(ds, "next.success").reshape(2, 4)
    assert success.tolist() == [[False, True, True, False], [False, True, True, True]]
    done = _column(ds, "next.done").reshape(2, 4)
    assert done.tolist() == [[False, False, False, True]] * 2
    assert _column(ds, "next.reward").dtype == np.float32 and success.dtype == bool


def test_dimension_names(tmp_path: Path) -> None:
    """Action names come from the store's action_names, else the world spec's meaning;
    robot_type is the world's, a world model's too."""
    assert meaning_names("absolute agent target position (x, y) in board pixels", 2) == ["x", "y"]
    assert meaning_names("xy in [0, 512]", 2) is None
    assert meaning_names("(a, b) then (c, d, e)", 3) == ["c", "d", "e"]
    out = tmp_path / "ds"
    src = _posed(tmp_path / "p.zarr", [None])
    _ok(["export", "lerobot", str(src), str(out), "--repo-id", REPO, "--images"])
    features = LeRobotDataset(REPO, root=out).meta.features
    assert features["action"]["names"] == ["u", "v"]
    assert features["observation.state"]["names"] == ["state_0", "state_1"]
    assert LeRobotDataset(REPO, root=out).meta.robot_type == "pusht"
    attrs = {"action_names": ["ax", "ay"], "env": "pusht-model"}
    named = _posed(tmp_path / "n.zarr", [None], attrs)
    _ok(["export", "lerobot", str(named), str(out), "--repo-id", REPO, "--images", "--overwrite"])
    meta = LeRobotDataset(REPO, root=out).meta
    assert meta.features["action"]["names"] == ["ax", "ay"]
    assert meta.robot_type == "pusht"  # a world model's episodes are of the same robot


def test_pixels_export_round_trip_skips_next(tmp_path: Path) -> None:
    """--obs pixels_agent_pos has next.* (scored from the unexported task_state) and no
    keypoints; importing it back skips next.* and gives the exported keys exactly."""
    src = _posed(tmp_path / "p.zarr", [0.5, None])
    out, back = tmp_path / "ds", tmp_path / "back.zarr"
    args = ["export", "lerobot", str(src), str(out), "--repo-id", REPO, "--images"]
    summary = _ok([*args, "--obs", "pixels_agent_pos"])
    assert "next.reward" in summary["features"]
    assert "observation.environment_state" not in summary["features"]
    imported = _ok(["import", "lerobot", str(out), str(back)])
    assert set(imported["skipped"]) == {"next.reward", "next.success", "next.done"}
    with EpisodeStore.open(src) as a, EpisodeStore.open(back) as b:
        assert set(b.schema.keys) == {"image", "action", "state"}
        assert a.all_meta() == b.all_meta()
        np.testing.assert_array_equal(b.load(["action"])["action"], a.load(["action"])["action"])


def test_extra_camera_round_trip(tmp_path: Path) -> None:
    src = _synthetic(tmp_path / "s.zarr", [True, False], wrist=True)
    out, back = tmp_path / "ds", tmp_path / "back.zarr"
    summary = _ok(["export", "lerobot", str(src), str(out), "--repo-id", REPO, "--images"])
    assert "observation.images.wrist" in summary["features"]
    _ok(["import", "lerobot", str(out), str(back)])
    with EpisodeStore.open(src) as a, EpisodeStore.open(back) as b:
        assert a.schema == b.schema and a.all_meta() == b.all_meta()
        x, y = a.load(), b.load()
    for key in x:
        np.testing.assert_array_equal(y[key], x[key])
    only = tmp_path / "only.zarr"
    _ok(["import", "lerobot", str(out), str(only), "--camera", "observation.images.wrist"])
    with EpisodeStore.open(only) as c:
        assert c.schema.image_keys == ["image"] and c.schema.keys["image"].shape == (8, 12, 3)
        np.testing.assert_array_equal(c.load(["image"])["image"], x["image_wrist"])


def test_pile_two_cameras_round_trip(tmp_path: Path) -> None:
    """A pile store's cameras export as observation.images.top / .side (no PushT keypoints
    or next.*: pile has no block pose) and import back to image / image_side exactly."""
    src, out, back = tmp_path / "pile.zarr", tmp_path / "ds", tmp_path / "back.zarr"
    args = ["collect", "--env", "pile", "--generator", "pile_play", "--episodes", "2"]
    result = runner.invoke(app, [*args, "--steps", "5", "--resolution", "32", "--out", str(src)])
    assert result.exit_code == 0, result.output
    summary = _ok(["export", "lerobot", str(src), str(out), "--repo-id", REPO, "--images"])
    cameras = ["observation.images.top", "observation.images.side"]
    assert summary["features"] == [cameras[0], "action", "observation.state", "task_state",
                                   cameras[1], "provenance"]  # fmt: skip
    ds = LeRobotDataset(REPO, root=out)
    assert ds.meta.camera_keys == cameras and ds.meta.robot_type == "pile"
    imported = _ok(["import", "lerobot", str(out), str(back)])
    assert imported["cameras"] == {cameras[0]: "image", cameras[1]: "image_side"}
    with EpisodeStore.open(src) as a, EpisodeStore.open(back) as b:
        assert a.schema == b.schema and a.all_meta() == b.all_meta()
        assert b.attrs["cameras"] == ["top", "side"] and b.attrs["env"] == "pile"
        assert {k: v for k, v in b.attrs.items() if k != "imported_from"} == a.attrs
        x, y = a.load(), b.load()
    assert set(x) == {"image", "image_side", "action", "state", "task_state"}
    for key in x:
        np.testing.assert_array_equal(y[key], x[key])
    np.testing.assert_array_equal(_frames(ds, cameras[1]), x["image_side"])
    side = tmp_path / "side.zarr"
    _ok(["import", "lerobot", str(out), str(side), "--camera", cameras[1]])
    with EpisodeStore.open(side) as c:
        assert c.schema.image_keys == ["image"] and c.attrs["cameras"] == ["side"]
        np.testing.assert_array_equal(c.load(["image"])["image"], x["image_side"])


def test_foreign_dataset_imports_as_real(tmp_path: Path) -> None:
    """A LeRobot dataset written without demofactory provenance (lerobot's writer only)."""
    root = tmp_path / "foreign"
    features = {
        "observation.images.top": {"dtype": "image", "shape": (8, 8, 3), "names": None},
        "observation.state": {"dtype": "float32", "shape": (3,), "names": None},
        "action": {"dtype": "float32", "shape": (3,), "names": ["j0", "j1", "grip"]},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
    }
    ds = LeRobotDataset.create(REPO, 5, features, root=root, use_videos=False)
    rng = np.random.default_rng(1)
    for _ in range(3):
        ds.add_frame(
            {
                "observation.images.top": rng.integers(0, 255, (8, 8, 3), dtype=np.uint8),
                "observation.state": rng.normal(size=3).astype(np.float32),
                "action": rng.normal(size=3).astype(np.float32),
                "next.reward": np.array([1.0], np.float32),
                "task": "wave",
            }
        )
    ds.save_episode()
    ds.finalize()
    store = tmp_path / "f.zarr"
    _ok(["import", "lerobot", str(root), str(store)])
    with EpisodeStore.open(store) as s:
        assert set(s.schema.keys) == {"image", "state", "action", "next_reward"}
        meta = s.episode_meta(0)
        assert (meta.source, meta.generator, meta.task) == ("real", "lerobot", "wave")
        assert s.fps == 5 and s.n_frames == 3
        assert s.attrs["action_names"] == ["j0", "j1", "grip"] and "state_names" not in s.attrs


# ---------------------------------------------------------------- bad input (exit 2)


def test_out_exists_needs_overwrite(pusht: Path, tmp_path: Path) -> None:
    before = _digest(pusht)
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    args = ["export", "lerobot", str(pusht), str(out), "--repo-id", REPO, "--images"]
    _one_line_error(args, "already exists", "--overwrite")
    _one_line_error([*args, "--overwrite"], "not a LeRobot dataset")
    assert (out / "keep.txt").read_text() == "mine"
    assert _digest(pusht) == before


def test_overwrite_replaces_a_dataset(tmp_path: Path) -> None:
    src = _synthetic(tmp_path / "s.zarr", [True, False])
    out = tmp_path / "ds"
    args = ["export", "lerobot", str(src), str(out), "--repo-id", REPO, "--images"]
    _ok([*args, "--episodes", "0"])
    _ok([*args, "--overwrite"])
    assert LeRobotDataset(REPO, root=out).num_episodes == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_store_without_image_key(tmp_path: Path) -> None:
    src = _synthetic(tmp_path / "noimg.zarr", [True], image=False)
    before = _digest(src)
    out = tmp_path / "o"
    _one_line_error(["export", "lerobot", str(src), str(out), "--repo-id", REPO], "no image key")
    assert not out.exists() and _digest(src) == before


@pytest.mark.parametrize("sel", ["3", "0:9", "x"])
def test_selection_out_of_range(tmp_path: Path, sel: str) -> None:
    src = _synthetic(tmp_path / "s.zarr", [True, True, True])
    before = _digest(src)
    out = tmp_path / "o"
    args = ["export", "lerobot", str(src), str(out), "--repo-id", REPO, "--episodes", sel]
    _one_line_error(args, "--episodes")
    assert not out.exists() and _digest(src) == before


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--vcodec", "vp9"], "--vcodec"),
        (["--crf", "99"], "--crf"),
        (["--repo-id", "no slash"], "--repo-id"),
    ],
)
def test_bad_options(tmp_path: Path, extra: list[str], needle: str) -> None:
    src = _synthetic(tmp_path / "s.zarr", [True])
    out = tmp_path / "o"
    _one_line_error(["export", "lerobot", str(src), str(out), "--repo-id", REPO, *extra], needle)
    assert not out.exists()


def test_lerobot_not_importable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _synthetic(tmp_path / "s.zarr", [True])
    before = _digest(src)
    monkeypatch.setitem(sys.modules, "lerobot.datasets.lerobot_dataset", None)
    out = tmp_path / "o"
    _one_line_error(["export", "lerobot", str(src), str(out), "--repo-id", REPO], "install it with")
    assert not out.exists() and _digest(src) == before


def test_import_refuses_other_version(image_export: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    shutil.copytree(image_export, old)
    info = json.loads((old / "meta" / "info.json").read_text())
    (old / "meta" / "info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    before = _digest(old)
    store = tmp_path / "s.zarr"
    _one_line_error(["import", "lerobot", str(old), str(store)], "v2.1", "v3.0")
    assert not store.exists() and _digest(old) == before


def test_import_bad_inputs(image_export: Path, tmp_path: Path) -> None:
    before = _digest(image_export)
    store = tmp_path / "s.zarr"
    _one_line_error(["import", "lerobot", str(tmp_path / "nope"), str(store)], "does not exist")
    _one_line_error(["import", "lerobot", str(tmp_path), str(store)], "not a LeRobot dataset")
    _one_line_error(
        ["import", "lerobot", str(image_export), str(store), "--camera", "wrist"], "wrist"
    )
    assert not store.exists()
    store.mkdir()
    _one_line_error(["import", "lerobot", str(image_export), str(store)], "already exists")
    assert _digest(image_export) == before


def test_import_lerobot_not_importable(
    image_export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "lerobot.datasets.lerobot_dataset", None)
    store = tmp_path / "s.zarr"
    _one_line_error(["import", "lerobot", str(image_export), str(store)], "install it with")
    assert not store.exists()
