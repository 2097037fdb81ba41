"""``factory eval transfer`` on the pile: episodes generated inside a pile model replay in
the real pile env, from their seeds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import assert_one_line_error, tiny_object_set_model
from pile_stand_in import PileStandIn
from typer.testing import CliRunner

from factory.envs.pile import PileWorld, pile_spec
from factory.eval.transfer import final_errors, run_transfer, world_of
from factory.gen import GenJob, RolloutEngine
from factory.generators import make_generator
from factory.record import open_output
from pipelines.cli import app

RES = 32


def _scene_key(state: np.ndarray) -> bytes:
    return np.asarray(state, np.float32).tobytes()


class PileTruth(PileStandIn):
    """The pile ground truth as a world model that a :class:`RolloutEngine` can run.

    A rollout row that starts from the world state (62,) float32 of a seeded reset of one
    of ``seeds`` is that seed's exact scene (float64): the pile's contacts make the
    ~1e-5 px of a float32 start grow to tens of px over a few hundred steps, so only the
    exact start gives the real env's episode.
    """

    def __init__(self, resolution: int, seeds: list[int]) -> None:
        super().__init__(resolution)
        self._seed_of: dict[bytes, int] = {}
        world = PileWorld(1, resolution)
        for seed in seeds:
            obs = world.reset(seeds=np.array([seed]))
            self._seed_of[_scene_key(np.concatenate([obs.state[0], obs.task_state[0]]))] = seed
        world.close()

    def start(
        self,
        context_frames: Any = None,
        context_actions: Any = None,
        seed: int = 0,
        states: Any = None,
    ) -> None:
        assert states is not None, "the ground truth starts from world states"
        self.close()
        self._rows = [PileWorld(1, self.resolution) for _ in range(len(states))]
        self._t = np.zeros(len(states), np.int64)
        self.start_slots(list(range(len(states))), states=states)

    def start_slots(
        self,
        slots: Any,
        context_frames: Any = None,
        context_actions: Any = None,
        states: Any = None,
    ) -> None:
        assert states is not None, "the ground truth starts from world states"
        for r, s in zip(np.asarray(slots).reshape(-1), states, strict=True):
            seed = self._seed_of[_scene_key(np.asarray(s)[-1])]
            self._rows[int(r)].reset(seeds=np.array([seed]))
        self._scenes = np.concatenate([w.scenes() for w in self._rows])


def _generate(path: Path, model: Any, jobs: list[GenJob]) -> Path:
    eng = RolloutEngine(model, make_generator, batch_size=2, world="pile", model_id="m@x")
    with open_output(path, pile_spec(RES), RES, append=False) as store:
        for ep in eng.run(jobs):
            store.append_episode(ep.data, ep.meta)
    eng.close()
    return path


def _job(seed: int, steps: int) -> GenJob:
    return GenJob(seed, "pile_expert", {}, steps, stop_on_success=True)


def test_pile_model_episodes_name_the_pile_world() -> None:
    assert world_of({"world": "pile-model"}) == "pile"
    assert world_of({"world": "pusht-model"}) == "pusht"
    assert world_of({}) == "pusht"


def test_episodes_generated_inside_the_pile_ground_truth_transfer_exactly(
    tmp_path: Path,
) -> None:
    """The ground truth as the model: each replay ends where the model's episode did, with
    its outcome (the pile expert succeeds from seeds 0 and 1 within 400 steps, and not
    from seed 2 in 30)."""
    model = PileTruth(RES, seeds=[0, 1, 2])
    path = _generate(tmp_path / "gen.zarr", model, [_job(0, 400), _job(1, 400), _job(2, 30)])
    r = run_transfer(path)
    assert r["env"] == "pile" and r["episodes"] == 3 and r["skipped"] == 0
    rows = {row["seed"]: row for row in r["per_episode"]}
    assert [rows[s]["model_success"] for s in (0, 1, 2)] == [True, True, False]
    assert [rows[s]["real_success"] for s in (0, 1, 2)] == [True, True, False]
    assert r["agreement"] == 1.0 and r["real_success_given_model_success"] == 1.0
    assert rows[2]["steps"] == 30 and rows[0]["steps"] < 400 and rows[1]["steps"] < 400
    for row in rows.values():
        assert row["reset"] == "seed" and row["reset_err"] == 0.0
        assert row["disc_err_px"] < 1e-3  # float32 readings of the same scene
        assert "block_err_px" not in row
    assert r["disc_err_px_median"] < 1e-3 and "block_err_px_median" not in r


def test_the_disc_error_is_the_matched_mean_distance() -> None:
    """Every disc read 5 px off (a (3, 4) px shift) is 5 px of mean disc error (no matching
    beats the identity on a shift), whatever the order the discs are read in."""
    world = PileWorld(1, RES)
    real = world.reset(seeds=np.array([4])).task_state[0].astype(np.float64)
    world.close()
    shifted = (real.reshape(-1, 2) + np.array([3.0, 4.0])).reshape(-1)
    reordered = real.reshape(-1, 2)[::-1].reshape(-1)
    assert final_errors("pile", shifted, real)["disc_err_px"] == pytest.approx(5.0, abs=1e-9)
    assert final_errors("pile", reordered, real)["disc_err_px"] == pytest.approx(0.0, abs=1e-9)
    assert set(final_errors("pusht", real[:3], real[:3])) == {"block_err_px", "angle_err_deg"}


def test_cli_transfer_of_an_object_set_store_replays_in_the_pile(tmp_path: Path) -> None:
    """A tiny object_set model's episodes: every one replays in the pile env from its
    seed's exact reset, and the model's final reading is compared disc by disc."""
    path = _generate(tmp_path / "gen.zarr", tiny_object_set_model(), [_job(s, 5) for s in (7, 8)])
    result = CliRunner().invoke(app, ["eval", "transfer", str(path), "--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["env"] == "pile" and r["episodes"] == 2
    for row in r["per_episode"]:
        assert row["reset"] == "seed" and row["reset_err"] == 0.0 and row["steps"] == 5
        assert np.isfinite(row["disc_err_px"]) and len(row["real_pose"]) == 60
    # an --env of another world than the episodes' is refused before any replay
    wrong = CliRunner().invoke(app, ["eval", "transfer", str(path), "--env", "pusht"])
    assert_one_line_error(wrong, "episode 0 was generated in a model of the pile world")


def test_the_replay_view_refuses_a_pile_episode_in_one_line(tmp_path: Path) -> None:
    """`factory view`'s model-vs-real replay shows a block pose (PushT): a pile episode is
    refused with a pointer to eval transfer, not compared as if disc 0 were a block."""
    from factory.errors import FactoryError
    from factory.store import EpisodeStore
    from factory.view.sidebyside import read_generated

    path = _generate(tmp_path / "gen.zarr", tiny_object_set_model(), [_job(7, 3)])
    with EpisodeStore.open(path) as store, pytest.raises(FactoryError, match="eval transfer"):
        read_generated(store, 0)
