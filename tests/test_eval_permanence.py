"""The permanence check: a block at rest, the agent held clear of it, 100 model steps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from factories import assert_one_line_error, tiny_world_model, write_tiny_model_dir
from store_factories import still_episode
from typer.testing import CliRunner

from factory.envs.pusht import PushTWorld, pusht_spec
from factory.eval.permanence import (
    PermanenceConfig,
    candidate_starts,
    choose_starts,
    permanence_metrics,
    run_permanence,
)
from factory.model.world_model import StepOutput
from factory.store import EpisodeMeta, EpisodeStore
from pipelines.cli import app
from pipelines.collect import open_output

RES = 32
BLOCK = np.array([256.0, 300.0, 0.0])  # the T covers x 196..316, y 300..420


def test_candidates_need_the_agent_clear_and_the_block_still() -> None:
    n = 14
    agent = np.tile([50.0, 50.0], (n, 1))
    agent[6] = [256.0, 290.0]  # 10 px above the cross bar: touching (radius 15)
    block = np.tile(BLOCK, (n, 1))
    block[11:, 0] += 2.0 * np.arange(1, n - 10)  # the block slides from frame 11 on
    got = candidate_starts(agent, block, context=3)
    assert got.tolist() == [2, 3, 4, 5, 9, 10]


def test_margin_is_measured_from_the_agent_disk_to_the_t() -> None:
    cfg = PermanenceConfig(margin_px=30.0)
    block = np.tile(BLOCK, (2, 1))
    gap_above = 15.0 + 30.0  # agent radius + margin, above the cross bar (y = 300)
    near = np.tile([256.0, 300.0 - gap_above + 1.0], (2, 1))
    far = np.tile([256.0, 300.0 - gap_above - 1.0], (2, 1))
    assert candidate_starts(near, block, 2, cfg).tolist() == []
    assert candidate_starts(far, block, 2, cfg).tolist() == [1]
    turned = block.copy()
    turned[1, 2] += np.radians(1.0)  # over still_deg
    assert candidate_starts(far, turned, 2, cfg).tolist() == []


@pytest.fixture(scope="module")
def still_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real episodes of 104 frames (enough for fidelity's horizon 100 with context 3),
    block at rest, agent far; a third with the agent touching the block."""
    path = tmp_path_factory.mktemp("perm") / "still.zarr"
    world = PushTWorld(1, RES)
    configs = [
        np.array([60.0, 60.0, *BLOCK]),
        np.array([450.0, 450.0, 200.0, 150.0, 1.0]),
        np.array([256.0, 285.0, *BLOCK]),  # agent on the block's edge
    ]
    with open_output(path, pusht_spec(RES), RES, append=False) as store:
        for i, config in enumerate(configs):
            meta = EpisodeMeta(source="real", generator="test", seed=i)
            store.append_episode(still_episode(world, config, 104), meta)
    world.close()
    return path


def test_choose_starts_takes_qualifying_frames_only(still_store: Path) -> None:
    with EpisodeStore.open(still_store) as store:
        starts = choose_starts(store, context=3, cfg=PermanenceConfig(starts=4))
    assert starts is not None
    assert starts.frames.shape == (4, 3, RES, RES, 3) and starts.actions.shape == (4, 2, 2)
    episodes = set(starts.where[:, 0].tolist())
    assert episodes == {0, 1}  # never the episode where the agent touches the block
    assert (starts.where[:, 1] >= 2).all()  # a full context window before each start
    np.testing.assert_allclose(starts.agent[starts.where[:, 0] == 0], [[60.0, 60.0]] * 2)


def test_permanence_keys_and_ranges(still_store: Path) -> None:
    cfg = PermanenceConfig(starts=3, steps=12, horizons=(4, 12))
    with EpisodeStore.open(still_store) as store:
        r = permanence_metrics(tiny_world_model(), store, context=3, cfg=cfg)
    assert r["starts"] == 3 and r["steps"] == 12
    for key in ("iou_4", "iou_12", "iou_12_min"):
        assert 0.0 <= r[key] <= 1.0
    assert r["iou_12_min"] <= r["iou_12"]
    assert r["block_drift_px"] >= 0 and r["block_drift_px_max"] >= r["block_drift_px"]
    assert 0.0 <= r["angle_drift_deg"] <= 180.0 and r["agent_drift_px"] >= 0
    assert len(r["where"]) == 3


def test_a_model_that_keeps_the_start_frame_scores_perfectly(still_store: Path) -> None:
    """A stand-in model that shows the start frame forever: IoU 1, no drift. One that
    shows another episode's frame instead: lower IoU and a drift."""
    model = tiny_world_model()
    with EpisodeStore.open(still_store) as store:
        starts = choose_starts(store, context=3, cfg=PermanenceConfig(starts=2))
    assert starts is not None and set(starts.where[:, 0].tolist()) == {0, 1}
    start = starts.frames[:, -1]
    _, pose = model.read_frames(start)

    def show(frames: np.ndarray, poses: np.ndarray) -> None:
        def step(actions: np.ndarray) -> StepOutput:
            return StepOutput(frames, actions.copy(), poses, latents=None)  # type: ignore[arg-type]

        model.step = step  # type: ignore[method-assign]

    cfg = PermanenceConfig(steps=5, horizons=(5,))
    show(start, pose)
    r = run_permanence(model, starts, cfg)
    assert r["iou_5"] == 1.0 and r["block_drift_px"] == 0.0 and r["agent_drift_px"] == 0.0
    show(start[::-1].copy(), pose[::-1].copy())
    r = run_permanence(model, starts, cfg)
    assert r["iou_5"] < 0.5 and r["block_drift_px"] > 0.0


def test_no_qualifying_start_reports_zero_starts(tmp_path: Path) -> None:
    path = tmp_path / "touch.zarr"
    world = PushTWorld(1, RES)
    with open_output(path, pusht_spec(RES), RES, append=False) as store:
        episode = still_episode(world, np.array([256.0, 285.0, *BLOCK]), 6)
        store.append_episode(episode, EpisodeMeta(source="real", generator="test"))
    world.close()
    with EpisodeStore.open(path) as store:
        r = permanence_metrics(tiny_world_model(), store, context=3)
    assert r == {"starts": 0, "steps": 100}


def test_fidelity_cli_reports_permanence_and_probe_real(still_store: Path, tmp_path: Path) -> None:
    model = write_tiny_model_dir(tmp_path / "model")
    base = ["eval", "fidelity", "--model", str(model), "--data", str(still_store)]
    base += ["--episodes", "1", "--stability-frames", "0", "--device", "cpu"]
    runner = CliRunner()
    result = runner.invoke(app, [*base, "--permanence-starts", "3", "--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    perm = r["permanence"]
    assert perm["starts"] == 3 and perm["steps"] == 100
    assert {"iou_10", "iou_40", "iou_100", "block_drift_px", "angle_drift_deg"} <= set(perm)
    probe = r["probe_real"]
    assert probe["block_px"] == r["probe"]["block_err_px"] and probe["reader"] == "probe"
    assert {"angle_deg", "agent_px", "frames"} <= set(probe)
    text = runner.invoke(app, [*base, "--permanence-starts", "2"])
    assert text.exit_code == 0, text.output
    assert "permanence (2 starts" in text.output and "probe on" in text.output
    skipped = runner.invoke(app, [*base, "--permanence-starts", "0", "--json"])
    assert "permanence" not in json.loads(skipped.stdout)
    bad = runner.invoke(app, [*base, "--permanence-starts", "-1"])
    assert_one_line_error(bad, "--permanence-starts")
