"""The recording node: episode controls, provenance, rate keeping with a tiny model,
resets from stored frames, a device unplugged mid-episode, and the soak bench."""

from __future__ import annotations

import importlib.util
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from factories import tiny_world_model, write_tiny_model_dir
from teleop_fakes import FULL_SCALE, CommandScriptSource, FakeHidDevice, install_fake_spacemouse

from factory.envs import make_world
from factory.envs.model_world import ModelWorld
from factory.record import open_output
from factory.store import EpisodeStore
from factory.world import World
from teleop.node import NodeConfig, RecordingNode
from teleop.sources import Command, InitialCondition, PlanarMapping
from teleop.sources.scripted import ScriptedSource
from teleop.sources.spacemouse import SpaceMouseSource
from teleop.viewers import NullViewer

RES = 32
REPO = Path(__file__).resolve().parents[1]


def _seeds(start: int = 0) -> Iterator[InitialCondition]:
    return (InitialCondition(seed=start + i, label=f"seed {start + i}") for i in itertools.count())


def _store(path: Path, world: World) -> EpisodeStore:
    return open_output(path, world.spec, RES, append=True)


def test_episode_controls_save_discard_reset_quit(tmp_path: Path) -> None:
    world = make_world("pusht", 1, RES)
    S, Y, N = Command.START, Command.STOP_SUCCESS, Command.STOP_FAILURE
    script: list[list[Command]] = [
        [S], [], [], [], [], [Y],  # episode 1: 5 frames, saved as a success (then seed 1)
        [Command.DISCARD],  # nothing recording: ignored
        [S], [], [], [Command.DISCARD],  # 3 frames dropped; retry the same seed 1
        [Command.RESET],  # idle reset: on to seed 2
        [Command.TOGGLE], [], [], [N],  # episode 2: 3 frames, a failure (then seed 3)
        [S], [], [Command.QUIT],  # dropped by the quit
    ]  # fmt: skip
    source = CommandScriptSource(script, dx=4.0)
    cfg = NodeConfig(fps=200, steps=100, task="push it", model_id="m-1")
    with _store(tmp_path / "s.zarr", world) as store:
        summary = RecordingNode(world, source, NullViewer(), store, _seeds(), cfg).run()
    assert summary["episodes"] == 2 and summary["frames"] == 8
    assert summary["discarded"] == 2 and summary["end_reason"] == "quit"
    assert [ic.seed for ic in source.begun] == [0, 1, 2, 3]
    with EpisodeStore.open(tmp_path / "s.zarr") as store:
        assert store.episode_lengths.tolist() == [5, 3]
        metas = store.all_meta()
        first = store.episode(0).to_dict()
    assert [m.success for m in metas] == [True, False]
    assert [m.seed for m in metas] == [0, 2]
    meta = metas[0]
    assert (meta.source, meta.generator, meta.task, meta.model_id) == (
        "teleop",
        "script",
        "push it",
        "m-1",
    )
    for key in ("device", "target_fps", "achieved_fps", "late_frac", "latency_ms_p99"):
        assert key in meta.extra, key
    assert meta.extra["stop"] == "operator" and meta.extra["initial"] == "seed 0"
    reference = make_world("pusht", 1, RES).reset(seeds=np.array([0]))
    np.testing.assert_array_equal(first["image"][0], reference.frames[0])
    np.testing.assert_allclose(np.diff(first["action"][:, 0]), 4.0)  # frame t before action t


def test_loop_keeps_its_rate_with_a_tiny_model(tmp_path: Path) -> None:
    world = ModelWorld(tiny_world_model(), batch_size=1, model_id="tiny")
    cfg = NodeConfig(fps=15, steps=15, episodes=2, model_id="tiny")
    with _store(tmp_path / "s.zarr", world) as store:
        summary = RecordingNode(
            world, ScriptedSource("play"), NullViewer(), store, _seeds(), cfg
        ).run()
    assert summary["episodes"] == 2 and summary["frames"] == 30
    assert 13.0 <= summary["achieved_fps"] <= 15.3, summary  # not slower, never faster
    assert summary["late_frac"] <= 0.15, summary  # slack for a loaded 2-core CI machine
    assert summary["latency_ms_p99"] < 1000 / 15, summary
    with EpisodeStore.open(tmp_path / "s.zarr") as store:
        meta = store.episode_meta(1)
    assert meta.model_id == "tiny" and meta.generator == "play"
    assert meta.extra["device"] == "scripted" and meta.extra["stop"] == "steps"
    assert 12 <= meta.extra["achieved_fps"] <= 15.5


def test_model_world_resets_from_stored_frames(tmp_path: Path) -> None:
    world = ModelWorld(tiny_world_model(), batch_size=1)
    frame = make_world("pusht", 1, RES).reset(seeds=np.array([5])).frames[0]
    initials = itertools.repeat(InitialCondition(seed=9, frames=frame[None], label="s.zarr#0"))
    cfg = NodeConfig(fps=500, steps=3, episodes=1)
    with _store(tmp_path / "s.zarr", world) as store:
        RecordingNode(world, ScriptedSource("play"), NullViewer(), store, initials, cfg).run()
    with EpisodeStore.open(tmp_path / "s.zarr") as store:
        np.testing.assert_array_equal(store.episode(0)["image"][0], frame)
        assert store.episode_meta(0).extra["initial"] == "s.zarr#0"


def test_spacemouse_unplugged_mid_episode_discards_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    device = FakeHidDevice()
    install_fake_spacemouse(monkeypatch, device)
    world = make_world("pusht", 1, RES)
    source = SpaceMouseSource(PlanarMapping(speed=300.0))
    source.open(world.spec)
    calls = itertools.count()
    real_poll = source.poll

    def scripted_poll() -> list[Command]:
        """The operator: start, push right, save; start again; unplug mid-episode."""
        n = next(calls)
        if n in (0, 20):
            device.press(0)
            device.settle()
        elif n == 1:
            device.translate(FULL_SCALE, 0)
            device.settle()
        elif n == 12:
            device.press(0)
            device.settle()
        elif n == 25:
            device.unplug()
        return real_poll()

    monkeypatch.setattr(source, "poll", scripted_poll)
    cfg = NodeConfig(fps=100, steps=1000)
    try:
        with _store(tmp_path / "s.zarr", world) as store:
            summary = RecordingNode(world, source, NullViewer(), store, _seeds(), cfg).run()
    finally:
        source.close()
    assert summary["end_reason"] == "device_disconnected", summary
    assert "SpaceMouse disconnected" in summary["message"]
    assert summary["episodes"] == 1 and summary["discarded"] == 1
    with EpisodeStore.open(tmp_path / "s.zarr") as store:
        actions = store.episode(0)["action"]
        meta = store.episode_meta(0)
    assert len(actions) == 12  # ticks 0..11 recorded; the press at tick 12 saved it
    np.testing.assert_allclose(np.diff(actions[:, 0]), 300.0 / 100, atol=1e-3)  # full right
    assert meta.generator == "spacemouse" and meta.extra["stop"] == "toggle"


def _load_bench() -> object:
    spec = importlib.util.spec_from_file_location("soak_bench", REPO / "bench" / "soak_bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_soak_bench_runs_on_a_tiny_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = _load_bench()
    model = write_tiny_model_dir(tmp_path / "tiny")
    args = ["--model", str(model), "--frames", "40", "--steps", "20", "--fps", "60"]
    assert bench.main([*args, "--out", str(tmp_path / "soak.zarr")]) == 0  # type: ignore[attr-defined]
    result = json.loads(capsys.readouterr().out)
    for key in ("episodes", "frames", "achieved_fps", "late_frac", "latency_ms_p99"):
        assert key in result, key
    assert result["episodes"] == 2 and result["frames"] == 40
    assert result["all_committed"] is True
    assert result["step_ms_p50_unpaced"] > 0
    assert result["headroom_x"] == pytest.approx(1000 / 60 / result["step_ms_p50_unpaced"])
    assert "rss_growth_mb" in result and result["model"].endswith("tiny")
    assert 0.0 <= result["empty_loop_late_frac"] <= 1.0
    assert len(result["loadavg_1m_before_after"]) == 2
    assert np.isfinite(result["rss_mb_per_episode"])
