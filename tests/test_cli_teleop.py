"""CLI: ``factory teleop``: a scripted session, replay, a model session, every bad input
as one line with exit code 2, a SpaceMouse unplugged mid-episode, and SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from factories import assert_one_line_error, write_tiny_model_dir
from teleop_fakes import FULL_SCALE, FakeHidDevice, install_fake_spacemouse
from typer.testing import CliRunner

from factory.store import EpisodeStore
from pipelines.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
GT = ["--world", "pusht", "--resolution", "32"]
SCRIPTED = ["--device", "scripted", "--headless", "--fps", "100"]


def _teleop(*args: str) -> object:
    return runner.invoke(app, ["teleop", *args])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with two scripted ground-truth episodes of 10 frames."""
    out = tmp_path_factory.mktemp("teleop") / "t.zarr"
    args = [*GT, *SCRIPTED, "--episodes", "2", "--steps", "10", "--task", "push the T"]
    result = _teleop(*args, "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    for key in ("episodes", "frames", "achieved_fps", "late_frac", "latency_ms_p99"):
        assert key in summary, key
    assert "rss_growth_mb" in summary
    assert (summary["episodes"], summary["frames"], summary["store_episodes"]) == (2, 20, 2)
    return out


def _snapshot(store_path: Path) -> tuple[list[int], np.ndarray, list[str]]:
    with EpisodeStore.open(store_path) as store:
        metas = [json.dumps(m.to_json(), sort_keys=True) for m in store.all_meta()]
        return store.episode_ends.tolist(), store.load(["action"])["action"], metas


def test_scripted_session_records_provenance(recorded: Path) -> None:
    with EpisodeStore.open(recorded) as store:
        assert store.episode_lengths.tolist() == [10, 10]
        meta = store.episode_meta(1)
    assert meta.source == "teleop" and meta.generator == "play" and meta.seed == 1
    assert meta.task == "push the T" and meta.model_id is None
    assert meta.extra["device"] == "scripted" and meta.extra["world"] == "pusht"
    assert meta.extra["target_fps"] == 100.0
    for key in ("achieved_fps", "late_frac", "latency_ms_p99", "tick_ms_p99"):
        assert isinstance(meta.extra[key], float), key


def test_rerun_appends_and_keeps_what_was_recorded(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy.zarr"
    args = [*GT, *SCRIPTED, "--episodes", "1", "--steps", "5", "--out", str(out)]
    assert _teleop(*args).exit_code == 0
    before = _snapshot(out)
    result = _teleop(*args, "--seed", "7")
    assert result.exit_code == 0, result.output
    after = _snapshot(out)
    assert after[0] == [5, 10] and after[2][0] == before[2][0]
    np.testing.assert_array_equal(after[1][:5], before[1])


def test_replay_drives_the_stored_actions(recorded: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay.zarr"
    args = [*GT, *SCRIPTED, "--generator", "replay", "--reset-from", str(recorded)]
    result = _teleop(*args, "--episodes", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    with EpisodeStore.open(recorded) as src, EpisodeStore.open(out) as dst:
        for i in range(2):
            np.testing.assert_array_equal(dst.episode(i)["action"], src.episode(i)["action"])
            np.testing.assert_allclose(dst.episode(i)["state"], src.episode(i)["state"], atol=1e-3)
            assert dst.episode_meta(i).extra["initial"] == f"{recorded}#{i}"


def test_model_session_records_the_model_id(tmp_path: Path) -> None:
    model = write_tiny_model_dir(tmp_path / "tiny")
    out = tmp_path / "m.zarr"
    args = ["--model", str(model), *SCRIPTED, "--episodes", "1", "--steps", "6"]
    result = _teleop(*args, "--compute", "cpu", "--out", str(out))
    assert result.exit_code == 0, result.output
    with EpisodeStore.open(out) as store:
        meta = store.episode_meta(0)
        assert store.attrs["env"] == "pusht-model"
    assert meta.model_id is not None and meta.model_id.startswith("tiny")


# -- bad input ----------------------------------------------------------------------------
def test_store_with_another_schema_is_refused_and_kept(recorded: Path) -> None:
    before = _snapshot(recorded)
    args = ["--world", "pusht", "--resolution", "48", *SCRIPTED, "--episodes", "1"]
    assert_one_line_error(_teleop(*args, "--out", str(recorded)), "different schema", "new store")
    after = _snapshot(recorded)
    assert after[0] == before[0] and after[2] == before[2]


def test_model_whose_action_space_does_not_fit(tmp_path: Path) -> None:
    model = write_tiny_model_dir(tmp_path / "wide", action_dim=3)
    out = tmp_path / "w.zarr"
    args = ["--model", str(model), "--device", "keyboard", "--compute", "cpu"]
    assert_one_line_error(_teleop(*args, "--out", str(out)), "3-D actions", "2-D target")
    assert not out.exists()


def test_port_in_use(recorded: Path) -> None:
    before = _snapshot(recorded)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        result = _teleop(*GT, "--device", "web", "--port", port, "--out", str(recorded))
    assert_one_line_error(result, f"port {port}", "already in use", "--port")
    assert _snapshot(recorded)[0] == before[0]


def test_no_spacemouse_or_no_hidapi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = tmp_path / "sm.zarr"
    install_fake_spacemouse(monkeypatch, None)
    assert_one_line_error(
        _teleop(*GT, "--device", "spacemouse", "--out", str(out)),
        "no SpaceMouse found",
        "--device keyboard",
    )
    install_fake_spacemouse(monkeypatch, FakeHidDevice(), hidapi=False)
    assert_one_line_error(
        _teleop(*GT, "--device", "spacemouse", "--out", str(out)),
        "apt-get install libhidapi-hidraw0",
    )
    assert not out.exists()  # a device error never leaves an empty store behind


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--device", "joystick"], "unknown --device 'joystick'"),
        (["--device", "keyboard", "--headless"], "--headless opens no window"),
        (["--model", "m", "--device", "scripted"], "--model DIR or --world NAME"),
        (["--device", "scripted", "--generator", "replay", "--headless"], "--reset-from"),
        (["--device", "scripted", "--headless", "--fps", "0"], "--fps"),
        (["--device", "scripted", "--headless", "--threads", "0"], "--threads"),
        (["--device", "keyboard", "--deadzone", "1.5"], "--deadzone"),
        (["--device", "scripted", "--headless", "--generator", "dance"], "unknown generator"),
        (["--device", "web", "--host", "0.0.0.0", "--no-token"], "only on loopback"),
        (["--device", "web", "--host", "::", "--no-token"], "not --host ::"),
        (["--device", "web", "--token", "short"], "--token must be at least 8"),
        (["--device", "web", "--token", "long-enough", "--no-token"], "not both"),
    ],
)
def test_bad_arguments(tmp_path: Path, args: list[str], needle: str) -> None:
    args = [*GT, *args] if "--model" not in args else [*args, "--world", "pusht"]
    out = tmp_path / "bad.zarr"
    assert_one_line_error(_teleop(*args, "--out", str(out)), needle)
    assert not out.exists()


def test_missing_model_dir(tmp_path: Path) -> None:
    args = ["--model", str(tmp_path / "nope"), *SCRIPTED, "--compute", "cpu"]
    assert_one_line_error(_teleop(*args, "--out", str(tmp_path / "x.zarr")))


# -- a device unplugged mid-episode -------------------------------------------------------
def test_spacemouse_unplug_keeps_saved_episodes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    device = FakeHidDevice()
    install_fake_spacemouse(monkeypatch, device)
    out = tmp_path / "sm.zarr"

    def operator() -> None:
        """Start, push right, save; start again; unplug."""
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        device.press(0)
        device.translate(FULL_SCALE, 0)
        time.sleep(0.6)
        device.press(0)
        time.sleep(0.3)
        device.press(0)
        time.sleep(0.4)
        device.unplug()

    feeder = threading.Thread(target=operator, daemon=True)
    feeder.start()
    args = [*GT, "--device", "spacemouse", "--fps", "30", "--out", str(out)]  # a dummy-SDL window
    result = runner.invoke(app, ["teleop", *args], catch_exceptions=False)
    feeder.join(timeout=5)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert "Traceback" not in result.output
    assert len(lines) == 3, lines  # the ready line, the summary, the error
    assert lines[-1].startswith("error: the SpaceMouse disconnected"), lines
    assert "committed episodes are kept" in lines[-1]
    with EpisodeStore.open(out) as store:
        assert store.n_episodes == 1
        actions = store.episode(0)["action"]
        assert store.episode_meta(0).extra["device"] == "spacemouse"
    assert len(actions) >= 5 and actions[-1, 0] > actions[0, 0]


# -- SIGKILL and SIGTERM ----------------------------------------------------------------
def _session_until(out: Path, episodes: int, sig: signal.Signals) -> int:
    """Run a scripted session in a subprocess; send ``sig`` once ``episodes`` are committed
    (a little later, so it lands inside an episode); return the exit code."""
    cmd = [sys.executable, "-m", "pipelines.cli", "teleop", *GT, *SCRIPTED[:3], "--fps", "60"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [*cmd, "--steps", "8", "--out", str(out)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        committed = 0
        while committed < episodes:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, f"the node never committed {episodes} episodes"
            time.sleep(0.05)
            if (out / "meta").exists():
                with EpisodeStore.open(out) as store:
                    committed = store.n_episodes
        time.sleep(0.07)
    finally:
        proc.send_signal(sig)
        proc.wait(timeout=30)
    return proc.returncode


def test_sigterm_ends_the_session_and_keeps_the_saved_episodes(tmp_path: Path) -> None:
    out = tmp_path / "term.zarr"
    assert _session_until(out, 2, signal.SIGTERM) == 130
    with EpisodeStore.open(out) as store:
        assert store.n_episodes >= 2 and set(store.episode_lengths.tolist()) == {8}


def test_sigkill_loses_at_most_the_episode_in_progress(tmp_path: Path) -> None:
    out = tmp_path / "kill.zarr"
    assert _session_until(out, 3, signal.SIGKILL) == -signal.SIGKILL
    with EpisodeStore.open(out) as store:
        n = store.n_episodes
        assert n >= 3
        assert set(store.episode_lengths.tolist()) == {8}
        assert [m.seed for m in store.all_meta()] == list(range(n))
        images = store.load(["image"])["image"]
        assert images.shape == (8 * n, 32, 32, 3)
    # The writer recovers the store and appends after the committed episodes.
    result = _teleop(*GT, *SCRIPTED, "--steps", "8", "--episodes", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    with EpisodeStore.open(out) as store:
        assert store.n_episodes == n + 1


def test_no_display_for_a_window(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("SDL_VIDEODRIVER", "DISPLAY", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "k.zarr"
    result = _teleop(*GT, "--device", "keyboard", "--out", str(out))
    assert_one_line_error(result, "cannot open a window", "--device web")
    assert not out.exists()
