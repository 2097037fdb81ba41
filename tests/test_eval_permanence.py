"""The permanence check: a block at rest, the agent held clear of it, 100 model steps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from factories import assert_one_line_error, tiny_world_model, write_tiny_model_dir
from gt_model import GroundTruthModel
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


def test_the_ground_truth_keeps_the_block_still_and_whole(still_store: Path) -> None:
    """The ground truth as the model: the untouched block stays exactly where it is, so
    every horizon's T mask is the start frame's and nothing drifts."""
    cfg = PermanenceConfig(starts=3, steps=12, horizons=(4, 12))
    with EpisodeStore.open(still_store) as store:
        r = permanence_metrics(GroundTruthModel(RES), store, context=3, cfg=cfg)
    assert r["starts"] == 3 and r["steps"] == 12 and len(r["where"]) == 3
    assert r["iou_4"] == r["iou_12"] == r["iou_12_min"] == 1.0
    assert r["block_drift_px"] == r["block_drift_px_max"] == r["angle_drift_deg"] == 0.0
    assert r["agent_drift_px"] < 1e-3


def test_a_model_that_keeps_the_start_frame_scores_perfectly(still_store: Path) -> None:
    """A stand-in model that shows the start frame forever: IoU 1, no drift. One that
    shows another episode's frame from step 3 on and moves its block reading 2 px a step:
    IoU 1 up to step 2, then lower, and a drift of 2 px per step."""
    model = tiny_world_model()
    with EpisodeStore.open(still_store) as store:
        starts = choose_starts(store, context=3, cfg=PermanenceConfig(starts=2))
    assert starts is not None and set(starts.where[:, 0].tolist()) == {0, 1}
    start = starts.frames[:, -1]
    _, pose = model.read_frames(start)

    def show(frames: np.ndarray, poses: np.ndarray, *, swap_at: int = 0, px: float = 0.0) -> None:
        calls = []

        def step(actions: np.ndarray) -> StepOutput:
            calls.append(1)
            shown = frames[::-1].copy() if swap_at and len(calls) >= swap_at else frames
            moved = poses + np.array([px * len(calls), 0.0, 0.0], np.float32)
            return StepOutput(shown, actions.copy(), moved, latents=None)  # type: ignore[arg-type]

        model.step = step  # type: ignore[method-assign]

    cfg = PermanenceConfig(steps=5, horizons=(2, 3, 5))
    show(start, pose)
    r = run_permanence(model, starts, cfg)
    assert r["iou_2"] == r["iou_5"] == 1.0
    assert r["block_drift_px"] == 0.0 and r["agent_drift_px"] == 0.0
    show(start, pose, swap_at=3, px=2.0)
    r = run_permanence(model, starts, cfg)
    assert r["iou_2"] == 1.0 and r["iou_3"] < 0.5 and r["iou_5"] < 0.5
    assert r["block_drift_px"] == pytest.approx(10.0, abs=1e-4)  # 5 steps of 2 px
    assert r["angle_drift_deg"] == 0.0


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


def test_fidelity_cli_reports_permanence_and_reader_real(still_store: Path, tmp_path: Path) -> None:
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
    probe = r["reader_real"]
    assert probe["block_px"] == r["reader"]["block_err_px"] and probe["reader"] == "probe"
    assert {"angle_deg", "agent_px", "frames"} <= set(probe)
    text = runner.invoke(app, [*base, "--permanence-starts", "2"])
    assert text.exit_code == 0, text.output
    assert "permanence (2 starts" in text.output and "probe on" in text.output
    skipped = runner.invoke(app, [*base, "--permanence-starts", "0", "--json"])
    assert "permanence" not in json.loads(skipped.stdout)
    bad = runner.invoke(app, [*base, "--permanence-starts", "-1"])
    assert_one_line_error(bad, "--permanence-starts")
