"""The ground-truth pile world: physics, seeded and config resets, scoring, renders."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from factory.envs import WORLDS, make_world
from factory.envs import pile_geometry as geo
from factory.envs.pile import PileWorld
from factory.envs.pile_render import AGENT_RGB, DISC_RGB, GOAL_RGB, render_views
from factory.envs.pile_sim import PileParams, PileSim, pile_layout
from factory.envs.scoring import scorer_for
from factory.errors import FactoryError
from factory.world import World

N = 30


@pytest.fixture(scope="module")
def world() -> Iterator[PileWorld]:
    w = PileWorld(batch_size=1)
    yield w
    w.close()


def _grid(n: int, origin: tuple[float, float], cols: int = 6, gap: float = 25.0) -> np.ndarray:
    """``n`` disc centres (n, 2) on a grid of ``cols`` columns, ``gap`` px apart."""
    idx = np.arange(n)
    return np.stack([origin[0] + gap * (idx % cols), origin[1] + gap * (idx // cols)], axis=1)


def _config(agent: tuple[float, float], discs: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray(agent, float), np.asarray(discs, float).ravel()])[None]


def _actions(seed: int, steps: int) -> np.ndarray:
    """Random targets around the board centre (they sweep through most piles)."""
    return np.random.default_rng(seed).uniform(60.0, 450.0, size=(steps, 1, 2)).astype(np.float32)


def test_registry_and_spec() -> None:
    assert "pile" in WORLDS
    w = make_world("pile", batch_size=2, resolution=64)
    assert isinstance(w, World)
    s = w.spec
    assert s.name == "pile" and s.image_shape == (64, 64, 3)
    assert (s.action_dim, s.state_dim, s.fps) == (2, 2, 10.0)
    assert s.action_low == (0.0, 0.0) and s.action_high == (512.0, 512.0)
    assert len(s.task_state_names) == 2 * N and s.task_state_names[:3] == (
        "disc0_x",
        "disc0_y",
        "disc1_x",
    )
    assert s.config_names[:4] == ("agent_x", "agent_y", "disc0_x", "disc0_y")
    assert len(s.config_names) == 2 + 2 * N
    w.close()
    small = PileWorld(params=PileParams(n_discs=20))
    assert small.reset(seeds=np.array([0])).task_state.shape == (1, 40)
    for bad in (19, 41, 2.5):
        with pytest.raises(FactoryError, match="n_discs"):
            PileParams(n_discs=bad)  # type: ignore[arg-type]


def test_seeded_episodes_are_bit_identical(world: PileWorld) -> None:
    acts = _actions(1, 40)
    runs = []
    for _ in range(2):
        obs = [world.reset(seeds=np.array([7]))]
        obs += [world.step(a) for a in acts]
        runs.append(obs)
    for a, b in zip(*runs, strict=True):
        assert np.array_equal(a.frames, b.frames)
        assert np.array_equal(a.views["side"], b.views["side"])
        assert np.array_equal(a.task_state, b.task_state) and np.array_equal(a.state, b.state)
    moved = np.abs(runs[0][-1].task_state - runs[0][0].task_state).max()
    assert moved > 10.0  # the actions did push discs around
    other = world.reset(seeds=np.array([8]))
    assert not np.array_equal(other.task_state, runs[0][0].task_state)


def test_seeded_layout_is_a_pile_outside_the_goal() -> None:
    for seed in range(20):
        agent, discs = pile_layout(seed, N)
        assert discs.shape == (N, 2)
        assert not geo.inside_goal(discs).any()
        gaps = np.linalg.norm(discs[:, None] - discs[None], axis=-1) + np.eye(N) * 1e3
        assert gaps.min() >= 2 * geo.DISC_RADIUS  # no overlaps
        assert np.linalg.norm(discs - discs.mean(0), axis=1).mean() < 100.0  # a cluster
        assert geo.agent_disc_gaps(agent, discs).min() >= 10.0
        assert discs.min() > geo.WALL + geo.DISC_RADIUS
        assert discs.max() < geo.BOARD_SIZE - geo.WALL - geo.DISC_RADIUS


def test_config_reset_lands_where_asked(world: PileWorld) -> None:
    rng = np.random.default_rng(0)
    for _ in range(5):
        discs = _grid(N, tuple(rng.uniform(40, 300, 2))) + rng.uniform(-2, 2, (N, 2))
        agent = (float(rng.uniform(20, 490)), 495.0)
        obs = world.reset(configs=_config(agent, discs))
        np.testing.assert_allclose(obs.task_state[0], discs.ravel(), atol=1e-4)
        np.testing.assert_allclose(obs.state[0], agent, atol=1e-4)


def test_discs_at_rest_stay_still(world: PileWorld) -> None:
    discs = _grid(N, (60.0, 60.0))
    obs = world.reset(configs=_config((450.0, 450.0), discs))
    park = np.array([[450.0, 450.0]], np.float32)
    for _ in range(100):
        obs = world.step(park)
    assert np.abs(obs.task_state[0] - discs.ravel()).max() < 1.0
    # pushed discs slide a little, then stop (table friction)
    for target in np.linspace([40.0, 150.0], [300.0, 150.0], 15):
        world.step(target[None])
    for _ in range(30):
        settled = world.step(park)
    assert np.abs(settled.task_state - discs.ravel()[None]).max() > 20.0  # they were pushed
    for _ in range(100):
        obs = world.step(park)
    assert np.abs(obs.task_state - settled.task_state).max() < 1.0


def test_discs_stay_on_the_board_when_squeezed(world: PileWorld) -> None:
    discs = _grid(N, (20.0, 20.0), cols=10, gap=21.0)
    world.reset(configs=_config((250.0, 250.0), discs))
    corner = np.array([[0.0, 0.0]], np.float32)
    for k in range(150):  # ram the pile into the corner, then along the walls
        obs = world.step(corner if k % 30 < 20 else np.array([[k * 3.0, 0.0]], np.float32))
    xy = geo.discs_of(obs.task_state[0])
    assert xy.min() > geo.WALL and xy.max() < geo.BOARD_SIZE - geo.WALL


def test_score_and_success_known_answer(world: PileWorld) -> None:
    inside = _grid(27, (200.0, 200.0), gap=22.0)  # a 6 x 5 block in the goal [181, 331]^2
    assert geo.inside_goal(inside).all()
    outside = np.array([[100.0, 100.0], [450.0, 100.0], [100.0, 450.0]])
    obs = world.reset(configs=_config((480.0, 480.0), np.vstack([inside, outside])))
    assert obs.score[0] == pytest.approx(0.9) and bool(obs.success[0])
    assert obs.info["n_inside"][0] == 27
    one_less = np.vstack([inside[:26], [[60.0, 300.0]], outside])
    obs = world.reset(configs=_config((480.0, 480.0), one_less))
    assert obs.score[0] == pytest.approx(26 / 30) and not bool(obs.success[0])
    # the same geometry scores a task state without the env (the world model's path)
    score, success = scorer_for("pile")(obs.task_state)
    assert score[0] == obs.score[0] and success[0] == obs.success[0]
    # the goal square is closed: a centre on its edge counts, one just past it does not
    edge = geo.GOAL_CENTER + np.array([[geo.GOAL_HALF, 0.0], [geo.GOAL_HALF + 0.01, 0.0]])
    assert geo.inside_goal(edge).tolist() == [True, False]


def test_contact(world: PileWorld) -> None:
    discs = _grid(N, (60.0, 60.0))
    touching = (60.0 - geo.AGENT_RADIUS - geo.DISC_RADIUS - 0.5, 60.0)
    assert world.reset(configs=_config(touching, discs)).info["contact"].tolist() == [True]
    assert world.reset(configs=_config((400.0, 400.0), discs)).info["contact"].tolist() == [False]


def test_bad_input_raises(world: PileWorld) -> None:
    with pytest.raises(FactoryError, match="before reset"):
        PileWorld().step(np.zeros((1, 2)))
    world.reset(seeds=np.array([0]))
    with pytest.raises(FactoryError, match=r"shape \(1, 2\)"):
        world.step(np.zeros((2, 2)))
    with pytest.raises(FactoryError, match="non-finite"):
        world.step(np.array([[np.nan, 1.0]]))
    with pytest.raises(FactoryError, match="numeric"):
        world.step(np.array([["a", "b"]], dtype=object))
    with pytest.raises(FactoryError, match="1 seeds"):
        world.reset(seeds=np.array([0, 1]))
    with pytest.raises(FactoryError, match="non-negative integers"):
        world.reset(seeds=np.array([-1]))
    with pytest.raises(FactoryError, match="not both"):
        world.reset(seeds=np.array([0]), configs=np.zeros((1, 62)))
    with pytest.raises(FactoryError, match=r"shape \(1, 62\)"):
        world.reset(configs=np.zeros((1, 5)))
    with pytest.raises(FactoryError, match="non-finite"):
        world.reset(configs=np.full((1, 62), np.nan))
    with pytest.raises(FactoryError, match="on the board"):
        world.reset(configs=np.full((1, 62), 600.0))
    for make in (lambda: PileWorld(batch_size=0), lambda: PileWorld(resolution=4)):
        with pytest.raises(FactoryError):
            make()


def test_renders(world: PileWorld) -> None:
    discs = _grid(N, (60.0, 60.0))
    obs = world.reset(configs=_config((400.0, 100.0), discs))
    assert world.spec.cameras == ("top", "side") and set(obs.views) == {"side"}
    assert "image_side" not in obs.info  # the side camera travels in views only
    top, side = obs.frames, obs.views["side"]
    assert top.shape == side.shape == (1, 96, 96, 3)
    assert top.dtype == side.dtype == np.uint8
    assert not np.array_equal(top, side)
    # top view: column = x * 96 / 512, row = y * 96 / 512
    px = lambda xy: top[0, int(xy[1] * 96 / 512), int(xy[0] * 96 / 512)]  # noqa: E731
    np.testing.assert_allclose(px(geo.GOAL_CENTER), GOAL_RGB, atol=2)
    np.testing.assert_allclose(px((400.0, 100.0)), AGENT_RGB, atol=40)
    np.testing.assert_allclose(px(discs[7]), DISC_RGB, atol=60)
    moved = discs.copy()
    moved[7] = (300.0, 450.0)
    again = world.reset(configs=_config((400.0, 100.0), moved))
    for before, after in ((top, again.frames), (side, again.views["side"])):
        changed = np.any(before[0] != after[0], axis=-1)
        assert 2 <= changed.sum() < 200  # the disc left one spot and appeared at another
    views = render_views(np.concatenate([[400.0, 100.0], moved.ravel()]), 96)
    assert np.array_equal(views["top"], again.frames[0])
    assert np.array_equal(views["side"], again.views["side"][0])


def test_batch_rows_are_independent() -> None:
    w = PileWorld(batch_size=2, resolution=32)
    both = w.reset(seeds=np.array([3, 4]))
    acts = np.array([[256.0, 256.0], [100.0, 400.0]], np.float32)
    for _ in range(5):
        both = w.step(acts)
    sim = PileSim()
    sim.reset(4)
    for _ in range(5):
        sim.step(acts[1])
    np.testing.assert_allclose(both.task_state[1], sim.disc_xy().ravel(), atol=1e-4)
    w.close()
