"""The ``World`` contract: the ground truth and both world-model kinds pass the same suite."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
from factories import tiny_object_state_model, tiny_world_model

from factory.envs import make_world
from factory.envs.model_world import ModelWorld
from factory.errors import FactoryError
from factory.world import World, WorldObs

B = 2
RES = 32


def _ground_truth() -> World:
    return make_world("pusht", batch_size=B, resolution=RES)


def _model() -> World:
    return ModelWorld(tiny_world_model(), batch_size=B, seed=0)


def _object_state_model() -> World:
    return ModelWorld(tiny_object_state_model(), batch_size=B, seed=0)


BACKENDS: dict[str, Callable[[], World]] = {
    "ground_truth": _ground_truth,
    "model": _model,
    "object_state_model": _object_state_model,
}


@pytest.fixture(params=sorted(BACKENDS))
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    w = BACKENDS[request.param]()
    yield w
    w.close()


def _check_obs(world: World, obs: WorldObs) -> None:
    spec = world.spec
    assert obs.frames.shape == (B, *spec.image_shape) and obs.frames.dtype == np.uint8
    assert obs.state.shape == (B, spec.state_dim) and obs.state.dtype == np.float32
    assert obs.task_state.shape == (B, len(spec.task_state_names))
    assert obs.score.shape == (B,) and obs.success.shape == (B,)
    assert obs.success.dtype == bool
    assert np.isfinite(obs.state).all() and np.isfinite(obs.score).all()
    assert ((obs.score >= 0) & (obs.score <= 1)).all()


def _actions(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(100, 400, (n, B, 2)).astype(np.float32)


def test_is_a_world(world: World) -> None:
    assert isinstance(world, World)
    assert world.batch_size == B
    assert world.spec.image_shape == (RES, RES, 3)
    assert world.spec.action_dim == 2


def test_reset_and_step_shapes(world: World) -> None:
    _check_obs(world, world.reset(seeds=np.arange(B)))
    for a in _actions(3):
        _check_obs(world, world.step(a))


def test_reset_from_config(world: World) -> None:
    configs = np.array([[100.0, 100.0, 300.0, 300.0, 0.5], [400.0, 120.0, 200.0, 250.0, -1.0]])
    _check_obs(world, world.reset(configs=configs))
    _check_obs(world, world.step(_actions(1)[0]))


def _rollout(world: World, seeds: np.ndarray) -> list[np.ndarray]:
    frames = [world.reset(seeds=seeds).frames]
    frames += [world.step(a).frames for a in _actions(4)]
    return frames


def test_deterministic_for_a_seed(world: World) -> None:
    first = _rollout(world, np.array([3, 4]))
    again = _rollout(world, np.array([3, 4]))
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_actions_refused(world: World) -> None:
    world.reset(seeds=np.arange(B))
    bad = np.full((B, 2), np.nan, np.float32)
    with pytest.raises(FactoryError):
        world.step(bad)
    with pytest.raises(FactoryError):
        world.step(np.zeros((B + 1, 2), np.float32))
