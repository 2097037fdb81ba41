"""``factory eval transfer``: generated episodes replayed open loop in the ground truth."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import assert_one_line_error, tiny_world_model
from gt_model import GroundTruthModel
from typer.testing import CliRunner

from factory.envs import pusht_geometry as geo
from factory.envs.pusht import PushTWorld, pusht_spec
from factory.errors import FactoryError
from factory.eval.transfer import run_transfer, summarise
from factory.gen import GenJob, RolloutEngine
from factory.generators import make_generator
from factory.store import EpisodeMeta, EpisodeStore
from pipelines.cli import app
from pipelines.collect import open_output

RES = 32
runner = CliRunner()


def _store(path: Path) -> EpisodeStore:
    return open_output(path, pusht_spec(RES), RES, append=False)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three expert episodes generated inside a tiny model from seeded resets."""
    path = tmp_path_factory.mktemp("transfer") / "gen.zarr"
    eng = RolloutEngine(tiny_world_model(), make_generator, batch_size=2, model_id="tiny@x")
    jobs = [GenJob(seed=s, generator="expert", generator_params={}, steps=6) for s in (3, 4, 5)]
    with _store(path) as store:
        for ep in eng.run(jobs):
            store.append_episode(ep.data, ep.meta)
    eng.close()
    return path


def test_generated_store_replays_from_the_same_seeded_state(generated: Path) -> None:
    r = run_transfer(generated)
    assert r["episodes"] == 3 and r["skipped"] == 0 and r["env"] == "pusht"
    assert sorted(row["seed"] for row in r["per_episode"]) == [3, 4, 5]
    for row in r["per_episode"]:
        assert row["reset"] == "seed" and row["reset_err"] == 0.0 and row["steps"] == 6
    assert r["reset_by_config"] == 0
    json.dumps(r)  # JSON-able


def test_episodes_generated_inside_the_ground_truth_transfer_exactly(tmp_path: Path) -> None:
    """The ground truth as the model: the real replay ends where the model's episode did
    (no block error) with the model's outcome, successes included (the expert succeeds
    from seeds 100000 and 100001 within 120 steps at 32 px)."""
    path = tmp_path / "gt.zarr"
    eng = RolloutEngine(GroundTruthModel(RES), make_generator, batch_size=2, model_id="gt")
    jobs = [
        GenJob(seed=s, generator="expert", generator_params={}, steps=n, stop_on_success=True)
        for s, n in ((3, 9), (100000, 120), (100001, 120))
    ]
    jobs.append(GenJob(seed=9, generator="play", generator_params={}, steps=7, config=AWAY))
    with _store(path) as store:
        for ep in eng.run(jobs):
            store.append_episode(ep.data, ep.meta)
    eng.close()
    r = run_transfer(path)
    rows = {row["seed"]: row for row in r["per_episode"]}
    assert [rows[s]["model_success"] for s in (3, 100000, 100001, 9)] == [False, True, True, False]
    assert r["agreement"] == 1.0 and r["real_success_given_model_success"] == 1.0
    for row in rows.values():
        assert row["real_success"] == row["model_success"]
        assert row["block_err_px"] < 1e-2 and row["angle_err_deg"] < 1e-2
    assert [rows[s]["reset"] for s in (3, 100000, 100001, 9)] == ["seed"] * 3 + ["config"]
    assert rows[9]["reset_err"] < 1e-3 and rows[3]["reset_err"] == 0.0


def _meta(i: int, config: np.ndarray, success: bool, initial: str = "config") -> EpisodeMeta:
    return EpisodeMeta(
        source="world_model",
        generator="expert",
        seed=100 + i,
        success=success,
        extra={"world": "pusht-model", "initial": initial, "initial_config": config.tolist()},
    )


def _episode(config: np.ndarray, final_pose: np.ndarray, steps: int = 4) -> dict[str, Any]:
    """An episode whose actions hold the agent still and whose last block reading is
    ``final_pose``."""
    gt = np.tile(config[2:], (steps, 1)).astype(np.float32)
    gt[-1] = final_pose
    return {
        "image": np.zeros((steps, RES, RES, 3), np.uint8),
        "action": np.tile(config[:2], (steps, 1)).astype(np.float32),
        "state": np.tile(config[:2], (steps, 1)).astype(np.float32),
        "task_state": gt,
    }


AT_GOAL = np.array([60.0, 460.0, *geo.GOAL])  # block on the goal, agent far away
AWAY = np.array([460.0, 460.0, 130.0, 150.0, 3.1])  # block far from the goal


def test_success_flags_and_pose_errors_are_compared_right(tmp_path: Path) -> None:
    """The model's success flags and final readings are set by hand; the real block stays
    at rest (the agent never moves), so the world's outcome is known."""
    cases = [  # (config, model success, final reading offset (dx, dy, dangle))
        (AT_GOAL, True, (3.0, 4.0, 0.0)),
        (AT_GOAL, False, (0.0, 0.0, np.radians(10.0))),
        (AWAY, False, (0.0, 0.0, -6.2)),  # 3.1 - 6.2 = -3.1: 0.083 rad across the wrap
        (AWAY, True, (0.0, 0.0, 0.0)),
        (AWAY, True, (6.0, 8.0, 0.0)),
    ]
    path = tmp_path / "hand.zarr"
    with _store(path) as store:
        for i, (config, success, offset) in enumerate(cases):
            store.append_episode(
                _episode(config, config[2:] + np.array(offset)), _meta(i, config, success)
            )
    r = run_transfer(path)
    assert r["episodes"] == 5
    assert r["model_success"] == pytest.approx(0.6) and r["real_success"] == pytest.approx(0.4)
    assert r["real_success_given_model_success"] == pytest.approx(1 / 3)
    assert r["agreement"] == pytest.approx(0.4)
    rows = r["per_episode"]
    assert [row["real_success"] for row in rows] == [True, True, False, False, False]
    expected_px = [5.0, 0.0, 0.0, 0.0, 10.0]
    expected_deg = [0.0, 10.0, np.degrees(2 * np.pi - 6.2), 0.0, 0.0]
    assert [row["block_err_px"] for row in rows] == pytest.approx(expected_px, abs=1e-3)
    assert [row["angle_err_deg"] for row in rows] == pytest.approx(expected_deg, abs=1e-3)
    assert r["block_err_px_median"] == pytest.approx(0.0, abs=1e-3)
    assert all(row["reset"] == "config" and row["reset_err"] < 1e-3 for row in rows)


def test_a_seed_that_does_not_reproduce_the_config_falls_back_to_it(tmp_path: Path) -> None:
    world = PushTWorld(1, RES)
    obs = world.reset(seeds=np.array([7]))
    true = np.concatenate([obs.state[0], obs.task_state[0]]).astype(np.float64)
    world.close()
    moved = true + np.array([0.0, 0.0, 5.0, 0.0, 0.0])  # not what seed 7 gives
    path = tmp_path / "s.zarr"
    with _store(path) as store:
        for config in (true, moved):
            meta = dataclasses.replace(_meta(0, config, False, initial="seed"), seed=7)
            store.append_episode(_episode(config, config[2:]), meta)
    rows = run_transfer(path)["per_episode"]
    assert [row["reset"] for row in rows] == ["seed", "config"]
    assert rows[0]["reset_err"] == 0.0 and rows[1]["reset_err"] < 1e-3


def test_no_model_success_gives_null_conditional() -> None:
    row = {"model_success": False, "real_success": True, "block_err_px": 1.0}
    rows = [{**row, "angle_err_deg": 2.0, "reset_err": 0.0, "reset": "seed"}]
    s = summarise(rows)
    assert s["real_success_given_model_success"] is None and s["agreement"] == 0.0


def _write(path: Path, metas: list[EpisodeMeta]) -> Path:
    with _store(path) as store:
        for meta in metas:
            store.append_episode(_episode(AWAY, AWAY[2:]), meta)
    return path


def test_mixed_store_skips_unseeded_episodes(tmp_path: Path) -> None:
    replayed = EpisodeMeta(source="world_model", generator="replay", extra={"initial": "store"})
    path = _write(tmp_path / "m.zarr", [_meta(0, AWAY, False), replayed])
    r = run_transfer(path)
    assert r["episodes"] == 1 and r["skipped"] == 1


def _fails(args: list[str], *needles: str) -> None:
    assert_one_line_error(runner.invoke(app, ["eval", "transfer", *args]), *needles)


def test_bad_input_is_one_line(tmp_path: Path, generated: Path) -> None:
    real = _write(tmp_path / "real.zarr", [EpisodeMeta(source="real", generator="play", seed=1)])
    _fails([str(real)], "seeded reset", "1 real")
    replayed = EpisodeMeta(source="world_model", generator="replay", extra={"initial": "store"})
    _fails([str(_write(tmp_path / "rep.zarr", [replayed]))], "seeded reset")
    _fails([str(generated), "--env", "nope"], "unknown env")
    _fails([str(tmp_path / "missing.zarr")], "missing.zarr")
    with pytest.raises(FactoryError, match="seeded reset"):
        run_transfer(real)


def test_cli_json_and_text(generated: Path) -> None:
    result = runner.invoke(app, ["eval", "transfer", str(generated), "--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["episodes"] == 3 and len(r["per_episode"]) == 3
    keys = {"real_success_given_model_success", "block_err_px_median", "angle_err_deg_median"}
    assert keys <= set(r)
    text = runner.invoke(app, ["eval", "transfer", str(generated)])
    assert text.exit_code == 0 and "agreement" in text.output


def test_last_frame_is_compared_with_the_pose_after_all_but_the_last_action(
    tmp_path: Path,
) -> None:
    """Frame t of an episode follows t actions: a recording whose readings are the true
    poses has zero error, even while the last action still pushes the block."""
    config = np.array([256.0, 240.0, 256.0, 300.0, 0.0])  # agent just above the cross bar
    actions = np.array([[256.0, 240.0 + 15.0 * t] for t in range(1, 9)], np.float32)
    world = PushTWorld(1, RES)
    poses = [world.reset(configs=config[None]).task_state[0]]
    for a in actions:
        poses.append(world.step(a[None]).task_state[0])
    world.close()
    assert np.linalg.norm(poses[-1][:2] - poses[-2][:2]) > 1.0  # the last action pushes
    data = _episode(config, np.zeros(3), steps=len(actions))
    data["action"], data["task_state"] = actions, np.stack(poses[:-1]).astype(np.float32)
    path = tmp_path / "push.zarr"
    with _store(path) as store:
        store.append_episode(data, _meta(0, config, False))
    (row,) = run_transfer(path)["per_episode"]
    assert row["block_err_px"] == pytest.approx(0.0, abs=1e-3)
    assert row["angle_err_deg"] == pytest.approx(0.0, abs=1e-3)
