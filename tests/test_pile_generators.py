"""The pile world's scripted generators: pile_expert, pile_play and the planner."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from factory.envs import pile_geometry as geo
from factory.envs.pile import PileWorld
from factory.errors import FactoryError
from factory.generators import GENERATORS, make_generator
from factory.generators.base import ActionGenerator
from factory.generators.pile_expert import push_line
from factory.generators.pile_planner import GridPlanner
from factory.world import Observation

SEEDS = np.array([0, 1, 2])


@pytest.fixture(scope="module")
def world() -> Iterator[PileWorld]:
    w = PileWorld(batch_size=len(SEEDS), resolution=32)
    yield w
    w.close()


def _rollout(
    world: PileWorld, name: str, steps: int, seeds: np.ndarray = SEEDS, configs=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``name`` on every row: (final scores (B,), contacts (T, B), first success step (B,),
    0 where none)."""
    obs = world.reset(configs=configs) if configs is not None else world.reset(seeds=seeds)
    gens: list[ActionGenerator] = [make_generator(name) for _ in range(world.batch_size)]
    for i, gen in enumerate(gens):
        gen.reset(int(seeds[i]), obs.item(i))
    contacts, first = [], np.zeros(world.batch_size, np.int64)
    for t in range(steps):
        acts = np.stack([g.act(obs.item(i)) for i, g in enumerate(gens)])
        obs = world.step(acts)
        contacts.append(obs.info["contact"])
        first[(first == 0) & obs.success] = t + 1
    return obs.score, np.stack(contacts), first


def test_registry() -> None:
    assert {"pile_play", "pile_expert"} <= set(GENERATORS)
    expert = make_generator("pile_expert", push_lead="50")
    assert expert.name == "pile_expert" and expert.params()["push_lead"] == 50.0
    assert make_generator("pile_play", max_speed=20).params()["max_speed"] == 20.0
    with pytest.raises(FactoryError, match="no parameter"):
        make_generator("pile_expert", warp=1)
    with pytest.raises(FactoryError, match="integer"):
        make_generator("pile_play", max_segment_steps=2.5)


def test_expert_beats_play_and_hold_still(world: PileWorld) -> None:
    expert, _, _ = _rollout(world, "pile_expert", 150)
    play, play_contacts, _ = _rollout(world, "pile_play", 150)
    hold, _, _ = _rollout(world, "hold_still", 150)
    assert hold.max() == 0.0  # the seeded piles start outside the goal and nothing moves
    assert expert.min() > play.max() and expert.mean() > 0.3
    assert play_contacts.mean() > 0.3  # play is contact-rich


def test_expert_succeeds_on_an_easy_config() -> None:
    inside = np.stack(np.meshgrid(np.arange(5) * 25.0 + 200, np.arange(4) * 25.0 + 210), -1)
    inside = np.vstack([inside.reshape(-1, 2), [[300.0, 300.0], [210.0, 310.0]]])  # 22
    edges = [[256.0, 150.0], [150.0, 256.0], [360.0, 256.0], [256.0, 360.0]]
    corners = [[120.0, 120.0], [400.0, 400.0], [400.0, 120.0], [120.0, 400.0]]
    outside = np.array([*edges, *corners])
    config = np.concatenate([[470.0, 40.0], inside.ravel(), outside.ravel()])[None]
    w = PileWorld(batch_size=1, resolution=32)
    start = w.reset(configs=config)
    assert start.info["n_inside"][0] == 22 and not start.success[0]
    score, _, first = _rollout(w, "pile_expert", 200, np.array([0]), config)
    w.close()
    assert 0 < first[0] <= 200 and score[0] >= 0.9


def test_generators_are_deterministic_per_seed(world: PileWorld) -> None:
    for name in ("pile_play", "pile_expert"):
        a = _rollout(world, name, 40)
        b = _rollout(world, name, 40)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    obs = world.reset(seeds=np.array([5, 5, 5]))
    plays = [make_generator("pile_play") for _ in range(3)]
    acts = []
    for seed, gen in zip((0, 1, 2), plays, strict=True):
        gen.reset(seed, obs.item(0))
        acts.append(np.stack([gen.act(obs.item(0)) for _ in range(30)]))
    assert not np.allclose(acts[0], acts[1]) and not np.allclose(acts[1], acts[2])


def test_expert_reads_only_state_and_task_state() -> None:
    w = PileWorld(batch_size=1, resolution=32)
    obs = w.reset(seeds=np.array([9])).item(0)
    blind = Observation(np.zeros((1, 1, 3), np.uint8), obs.state, obs.task_state, 0.0, False)
    a, b = make_generator("pile_expert"), make_generator("pile_expert")
    a.reset(9, obs)
    b.reset(9, blind)
    for _ in range(20):
        act = a.act(obs)
        assert np.array_equal(act, b.act(blind))
        obs = w.step(act[None]).item(0)
        blind = Observation(blind.frame, obs.state, obs.task_state, 0.0, False)
    w.close()


def test_push_line_and_planner() -> None:
    u, spot = push_line(np.array([100.0, 256.0]), 6.0)
    np.testing.assert_allclose(u, [1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(spot, [100.0 - 31.0, 256.0])
    # a disc on the wall: the spot is clipped onto the board and the direction turned
    u, spot = push_line(np.array([16.0, 100.0]), 6.0)
    assert spot.min() >= 2.0 and np.linalg.norm(u) == pytest.approx(1.0)
    planner = GridPlanner(cell=8.0, inflate=30.0)
    wall = np.stack([np.full(12, 256.0), np.arange(12) * 20.0 + 150.0], axis=1)  # x = 256
    crowded = planner.crowded(wall)
    centres = (np.argwhere(crowded)[:, ::-1] + 0.5) * 8.0
    assert np.linalg.norm(centres[:, None] - wall[None], axis=-1).min(axis=1).max() < 30.0
    start, end = np.array([150.0, 256.0]), np.array([360.0, 256.0])
    path = planner.path(planner.field(start, crowded), end)
    np.testing.assert_allclose(path[-1], end)
    gaps = np.linalg.norm(path[:, None] - wall[None], axis=-1).min(axis=1)
    assert gaps.min() >= geo.AGENT_RADIUS + geo.DISC_RADIUS  # it goes around the wall
    assert not planner.clear(start, end, crowded)
    assert planner.clear(start, np.array([150.0, 400.0]), crowded)
