"""The ``hold_still`` generator: the floor that never moves the agent."""

from __future__ import annotations

import numpy as np
import pytest

from factory.envs.pusht import PushTWorld
from factory.errors import FactoryError
from factory.generators import make_generator
from factory.record import run_episode

AWAY = np.array([460.0, 460.0, 130.0, 150.0, 1.0])  # agent in a corner, block far from it


def test_hold_still_leaves_the_ground_truth_as_it_was() -> None:
    """Held at its reset position, the agent never moves, so neither does the block: every
    recorded state is the reset's and the episode never succeeds."""
    world = PushTWorld(1, 32)
    ep = run_episode(world, make_generator("hold_still"), 0, 8, source="real", config=AWAY)
    world.close()
    np.testing.assert_allclose(ep.data["action"], np.tile(AWAY[:2], (8, 1)))
    np.testing.assert_allclose(ep.data["state"], np.tile(AWAY[:2], (8, 1)), atol=1e-4)
    np.testing.assert_allclose(ep.data["task_state"], np.tile(AWAY[2:], (8, 1)), atol=1e-4)
    assert not ep.meta.success and ep.meta.generator == "hold_still"
    assert ep.meta.generator_params == {}


def test_a_given_target_is_held_and_recorded() -> None:
    gen = make_generator("hold_still", target=[100, 200])
    assert gen.params() == {"target": [100.0, 200.0]}
    world = PushTWorld(1, 32)
    ep = run_episode(world, gen, 0, 5, source="real", config=AWAY)
    world.close()
    np.testing.assert_array_equal(ep.data["action"], np.tile([100.0, 200.0], (5, 1)))
    assert ep.meta.generator_params == {"target": [100.0, 200.0]}


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(FactoryError, match="no parameter"):
        make_generator("hold_still", speed=1)
    with pytest.raises(FactoryError, match="NaN"):
        make_generator("hold_still", target=[np.nan, 0.0])
