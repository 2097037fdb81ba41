"""The ``World`` contract: the ground truth and every world-model kind pass the same suite."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
from factories import tiny_object_set_model, tiny_object_state_model, tiny_world_model

from factory.envs import make_world
from factory.envs.model_world import ModelWorld
from factory.errors import FactoryError
from factory.world import World, WorldObs

B = 2
RES = 32


def _ground_truth() -> World:
    return make_world("pusht", batch_size=B, resolution=RES)


def _pile_ground_truth() -> World:
    return make_world("pile", batch_size=B, resolution=RES)


def _model() -> World:
    return ModelWorld(tiny_world_model(), batch_size=B, seed=0)


def _object_state_model() -> World:
    return ModelWorld(tiny_object_state_model(), batch_size=B, seed=0)


def _object_set_model() -> World:
    return ModelWorld(tiny_object_set_model(), batch_size=B, seed=0)  # world: pile


BACKENDS: dict[str, Callable[[], World]] = {
    "ground_truth": _ground_truth,
    "pile_ground_truth": _pile_ground_truth,
    "model": _model,
    "object_state_model": _object_state_model,
    "object_set_model": _object_set_model,
}

_PUSHT_CONFIGS = np.array([[100.0, 100.0, 300.0, 300.0, 0.5], [400.0, 120.0, 200.0, 250.0, -1.0]])


def _pile_configs() -> np.ndarray:
    """Agent xy then 30 disc centres on a 6 x 5 grid, shifted per episode."""
    grid = np.stack(np.meshgrid(np.arange(6) * 25.0, np.arange(5) * 25.0), -1).reshape(-1, 2)
    rows = [np.concatenate([[400.0, 400.0], (grid + off).ravel()]) for off in (60.0, 300.0)]
    return np.stack(rows)


CONFIGS: dict[str, Callable[[], np.ndarray]] = {
    "ground_truth": lambda: _PUSHT_CONFIGS,
    "pile_ground_truth": _pile_configs,
    "model": lambda: _PUSHT_CONFIGS,
    "object_state_model": lambda: _PUSHT_CONFIGS,
    "object_set_model": _pile_configs,
}
"""Backend -> initial configs (B, C) in that world's convention."""


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def world(backend: str) -> Iterator[World]:
    w = BACKENDS[backend]()
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
    assert list(obs.views) == list(spec.cameras[1:])  # every camera after the main one
    for frames in obs.views.values():
        assert frames.shape == obs.frames.shape and frames.dtype == np.uint8
    item = obs.item(B - 1)
    assert list(item.views) == list(spec.cameras[1:])
    for name, frame in item.views.items():
        np.testing.assert_array_equal(frame, obs.views[name][B - 1])


def _actions(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(100, 400, (n, B, 2)).astype(np.float32)


CAMERAS = {
    "ground_truth": (),
    "pile_ground_truth": ("top", "side"),
    "model": (),  # a model renders its main camera only
    "object_state_model": (),
    "object_set_model": ("top", "side"),  # it renders both cameras from one state
}
"""Backend -> the cameras its spec names (``()``: one unnamed main camera)."""


def test_is_a_world(world: World, backend: str) -> None:
    assert isinstance(world, World)
    assert world.batch_size == B
    assert world.spec.image_shape == (RES, RES, 3)
    assert world.spec.action_dim == 2
    assert world.spec.cameras == CAMERAS[backend]


def test_reset_and_step_shapes(world: World) -> None:
    _check_obs(world, world.reset(seeds=np.arange(B)))
    for a in _actions(3):
        _check_obs(world, world.step(a))


def test_reset_from_config(world: World, backend: str) -> None:
    configs = CONFIGS[backend]()
    assert configs.shape == (B, len(world.spec.config_names))
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
