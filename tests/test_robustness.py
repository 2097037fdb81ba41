"""Robustness inside the model (``factory.gen.robustness``): noisy open-loop replays of
generated successes, the writer's keep rule and ``factory eval robustness``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from factories import tiny_world_model
from torch import Tensor

from factory.envs import pile_geometry as pile_geo
from factory.envs import pusht_geometry as geo
from factory.envs.scoring import read_success, scorer_for
from factory.errors import FactoryError
from factory.eval.robust_curve import _real_outcomes, curve
from factory.gen.jobs import GeneratedEpisode
from factory.gen.robustness import (
    LAYOUTS,
    RobustConfig,
    RobustnessCheck,
    check_plan,
    episode_noise,
    robustness,
)
from factory.gen.writer import keeps
from factory.model.state_rollout import StateRollout
from factory.store import EpisodeMeta

GOAL = geo.GOAL


class TowardGoal(StateRollout):
    """A state 'model' whose first object (the block: the state's columns 2:4) moves
    ``speed`` px per step straight at ``goal`` (x, y) while the action's x is above 0 (the
    agent pushes), and stands still otherwise; the rest of the state never moves: a known
    dynamics to replay in."""

    kind = "object_state"
    starts_from_states = True

    def __init__(self, speed: float = 1.0, goal: np.ndarray = GOAL[:2], state_dim: int = 5) -> None:
        cfg = SimpleNamespace(context=1, action_dim=2, image_shape=(32, 32, 3), state_dim=state_dim)
        super().__init__(cfg, None, None, None)
        self.speed, self.goal = speed, torch.tensor(goal, dtype=torch.float32)

    def _context_states(self, frames: object, states: np.ndarray | Tensor | None) -> Tensor:
        assert states is not None
        return torch.as_tensor(np.asarray(states), dtype=torch.float32)

    def _dynamics_step(self, prev: Tensor, cur: Tensor, prev_action: Tensor, a: Tensor) -> Tensor:
        gap = self.goal - cur[:, 2:4]
        dist = gap.norm(dim=1, keepdim=True).clamp_min(1e-9)
        step = gap / dist * torch.minimum(dist, torch.tensor(self.speed))
        push = (a[:, :1] > 0).float()
        return torch.cat([a, cur[:, 2:4] + step * push, cur[:, 4:]], dim=1)


def _episode(offset: float, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """A start (5,) with the block ``offset`` px left of the goal and ``steps`` pushes."""
    start = np.array([100.0, 100.0, GOAL[0] - offset, GOAL[1], GOAL[2]])
    return start, np.full((steps, 2), 50.0, np.float32)


def test_near_goal_bounds_every_near_success() -> None:
    """Poses of coverage above 0.9 (looser than success) all lie inside the gate."""
    rng = np.random.default_rng(0)
    d = rng.uniform(-12, 12, (3000, 2))
    turn = rng.uniform(-0.2, 0.2, 3000)
    poses = np.column_stack([GOAL[0] + d[:, 0], GOAL[1] + d[:, 1], GOAL[2] + turn])
    cov = np.array([geo.coverage(p) for p in poses])
    assert (cov > 0.9).sum() > 50  # the sample reaches the region it tests
    assert geo.near_goal(poses)[cov > 0.9].all()
    far = np.array([[GOAL[0] + 20, GOAL[1], GOAL[2]], [GOAL[0], GOAL[1], GOAL[2] + 0.5]])
    assert not geo.near_goal(far).any()


def test_read_success_matches_the_scorer() -> None:
    rng = np.random.default_rng(1)
    poses = np.column_stack(
        [GOAL[0] + rng.normal(0, 4, 400), GOAL[1] + rng.normal(0, 4, 400), np.full(400, GOAL[2])]
    )
    poses[::7, :2] += 100  # some far off
    _, want = scorer_for("pusht")(poses)
    assert want.any() and not want.all()
    np.testing.assert_array_equal(read_success("pusht", poses), want)


def test_noiseless_replay_of_a_success_is_fully_robust() -> None:
    start, acts = _episode(8.0, 10)  # reaches the goal after 8 pushes
    cfg = RobustConfig(k=4, step_px=0.0)
    assert robustness(TowardGoal(), "pusht", start[None], [acts], cfg).tolist() == [1.0]
    short = acts[:3]  # stops 5 px off: never a success
    assert robustness(TowardGoal(), "pusht", start[None], [short], cfg).tolist() == [0.0]


def test_noise_on_a_moving_block_lowers_robustness() -> None:
    """Ending exactly at the goal survives no noise, less of 3 px per moving step, and
    hardly any of 30 px; a block that never moves gets no step noise."""
    start, acts = _episode(8.0, 8)
    model = TowardGoal()
    values = [
        robustness(model, "pusht", start[None], [acts], RobustConfig(k=32, step_px=s))[0]
        for s in (0.0, 3.0, 30.0)
    ]
    assert values[0] == 1.0 > values[1] > values[2]
    assert values[2] < 0.2
    still = np.array([100.0, 100.0, *GOAL])  # at the goal, never pushed
    hold = np.full((5, 2), -50.0, np.float32)
    cfg = RobustConfig(k=8, step_px=30.0)
    assert robustness(model, "pusht", still[None], [hold], cfg).tolist() == [1.0]


def test_each_episode_draws_its_own_noise() -> None:
    """An episode's robustness depends on its key, not on what it is batched with."""
    eps = [_episode(8.0, 8), _episode(5.0, 9), _episode(3.0, 4)]
    starts = np.stack([e[0] for e in eps])
    acts = [e[1] for e in eps]
    cfg = RobustConfig(k=16, step_px=1.0, start_px=0.5, batch=7)
    together = robustness(TowardGoal(), "pusht", starts, acts, cfg, keys=[11, 12, 13])
    alone = [
        robustness(TowardGoal(), "pusht", starts[i : i + 1], [acts[i]], cfg, keys=[11 + i])[0]
        for i in range(3)
    ]
    np.testing.assert_allclose(together, alone)
    a, b = episode_noise(cfg, 11, 8), episode_noise(cfg, 12, 8)
    assert a[1].shape == (16, 8, 1, 2) and not np.allclose(a[1], b[1])


def test_check_leaves_the_engine_rollout_alone() -> None:
    """The check replays on a copy: the model's own rollout state is untouched."""
    model = TowardGoal()
    start, acts = _episode(8.0, 10)
    model.start(None, None, states=np.zeros((2, 1, 5), np.float32))
    before = model.last_reading()
    data = {"state": np.tile(start[:2], (10, 1)), "task_state": np.tile(start[2:], (10, 1)),
            "action": acts}  # fmt: skip
    assert RobustnessCheck(model, "pusht", RobustConfig(k=2, step_px=0.0))(data, 3) == 1.0
    after = model.last_reading()
    np.testing.assert_array_equal(before[1], after[1])
    assert model.batch_size == 2


def _ep(success: bool, robust: float | None) -> GeneratedEpisode:
    extra = {} if robust is None else {"robustness": robust}
    meta = EpisodeMeta(
        source="world_model", generator="expert", seed=1, success=success, extra=extra
    )
    return GeneratedEpisode(data={}, meta=meta)


def test_writer_keep_rule() -> None:
    cfg = RobustConfig(keep=0.9)
    assert keeps(_ep(False, None), only_success=False, robust=None)
    assert not keeps(_ep(False, None), only_success=True, robust=None)
    assert keeps(_ep(True, None), only_success=True, robust=None)
    assert keeps(_ep(True, 0.9), only_success=True, robust=cfg)
    assert not keeps(_ep(True, 0.875), only_success=True, robust=cfg)
    assert not keeps(_ep(False, 1.0), only_success=True, robust=cfg)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [({"k": 0}, "--robust-k"), ({"keep": 1.5}, "--robust-keep"), ({"step_px": -1}, ">= 0")],
)
def test_config_refuses_nonsense(kwargs: dict, needle: str) -> None:
    with pytest.raises(FactoryError, match=needle):
        RobustConfig(**kwargs)


def test_plan_and_model_checks() -> None:
    with pytest.raises(FactoryError, match="--only-success"):
        check_plan("object_state", "pusht", only_success=False)
    with pytest.raises(FactoryError, match="object_state"):
        check_plan("latent_grid", "pusht", only_success=True)
    check_plan("object_set", "pile", only_success=True)  # the pile's discs have a layout
    with pytest.raises(FactoryError, match="pusht, pile"):
        check_plan("object_state", "rope", only_success=True)
    start, acts = _episode(8.0, 8)
    with pytest.raises(FactoryError, match="perturbed state"):
        robustness(tiny_world_model(), "pusht", start[None], [acts], RobustConfig(k=1))


def test_curve_counts_and_auc() -> None:
    robust = np.array([1.0, 1.0, 0.9, 0.5, 0.0])
    real = np.array([True, True, False, False, False])
    out = curve(robust, real)
    rows = {r["keep"]: r for r in out["thresholds"]}
    assert rows[0.0]["kept"] == 5 and rows[0.0]["real_success"] == pytest.approx(0.4)
    assert rows[1.0]["kept"] == 2 and rows[1.0]["real_success"] == 1.0
    assert out["auc"] == 1.0
    assert curve(robust, np.ones(5, bool))["auc"] is None


def test_transfer_json_is_checked(tmp_path: Path) -> None:
    good = tmp_path / "t.json"
    good.write_text(json.dumps({"per_episode": [{"index": 0, "real_success": True}]}))
    assert _real_outcomes(good, tmp_path) == {0: True}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"episodes": 3}))
    with pytest.raises(FactoryError, match="eval transfer"):
        _real_outcomes(bad, tmp_path)
    with pytest.raises(FactoryError, match="no transfer result"):
        _real_outcomes(tmp_path / "none.json", tmp_path)


@pytest.mark.parametrize(
    ("world", "generator", "steps", "seeds"),
    [("pusht", "expert", 300, (300001, 300002)), ("pile", "pile_expert", 400, (200008,))],
)
def test_the_engine_records_robustness_of_the_shipped_models_successes(
    world: str, generator: str, steps: int, seeds: tuple[int, ...]
) -> None:
    """With the shipped model of each world (object_state, object_set), the dynamics-only
    replay of a generated success from its recorded start reproduces it exactly (noise 0:
    robustness 1), and the engine's episodes carry the value and how it was read."""
    from factory.gen import GenJob, RolloutEngine
    from factory.generators import make_generator
    from factory.model.files import load_model, shipped_model

    model, ident = load_model(shipped_model(world))
    cfg = RobustConfig(k=2, step_px=0.0)
    eng = RolloutEngine(model, make_generator, batch_size=2, model_id=ident, robust=cfg)
    jobs = [GenJob(s, generator, {}, steps, stop_on_success=True) for s in seeds]
    stream = eng.run(jobs)
    assert hasattr(stream, "send")  # a generator: Ray's streaming sends into it
    eps = list(stream)
    eng.close()
    won = [ep for ep in eps if ep.meta.success]
    assert won, "the expert succeeds inside the shipped model on these seeds"
    for ep in won:
        assert ep.meta.extra["robustness"] == 1.0
        assert ep.meta.extra["robustness_config"]["k"] == 2


def test_the_commands_defaults_are_the_configs() -> None:
    """``generate --robust-*`` and ``eval robustness`` default to :class:`RobustConfig`'s
    own values, so the documented defaults are one set."""
    import inspect

    from pipelines.cli_generate import generate
    from pipelines.cli_model import eval_robustness

    want = RobustConfig()
    gen = inspect.signature(generate).parameters
    ev = inspect.signature(eval_robustness).parameters
    for name in ("k", "step_px", "start_px", "start_deg"):
        assert gen[f"robust_{name}"].default == getattr(want, name)
        assert ev[name].default == getattr(want, name)
    assert ev["keep"].default == want.keep


class DiscToGoal(TowardGoal):
    """A pile 'model' of two discs: disc 0 moves ``speed`` px per step towards the goal's
    centre while the action's x is above 0, disc 1 never moves."""

    kind = "object_set"

    def __init__(self, speed: float = 10.0) -> None:
        super().__init__(speed, pile_geo.GOAL_CENTER, state_dim=6)


def test_pile_noise_goes_on_each_moving_disc_only() -> None:
    """Disc 1 rests 0.5 px inside the goal's edge and disc 0 is pushed to the centre: noise
    on the moving disc alone leaves every replay a success, while the same noise on the
    start of every disc knocks disc 1 out of the goal in about half of them."""
    cx, cy = pile_geo.GOAL_CENTER
    edge = cx + pile_geo.GOAL_HALF - 0.5
    start = np.array([100.0, 100.0, cx - 150.0, cy, edge, cy])
    acts = np.full((30, 2), 50.0, np.float32)
    model = DiscToGoal()
    moving = robustness(model, "pile", start[None], [acts], RobustConfig(k=32, step_px=3.0))
    assert moving.tolist() == [1.0]
    shaken = robustness(model, "pile", start[None], [acts], RobustConfig(k=32, start_px=3.0))
    assert 0.2 < shaken[0] < 0.8
    short = acts[:5]  # disc 0 is still 100 px out of the goal
    assert robustness(model, "pile", start[None], [short], RobustConfig(k=4)).tolist() == [0.0]
    start_noise, steps = episode_noise(RobustConfig(k=4), 7, 30, LAYOUTS["pile"], 2)
    assert start_noise.shape == (4, 4) and steps.shape == (4, 30, 2, 2)
