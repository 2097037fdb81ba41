"""Per-slot restarts of a batched model rollout (continuous batching), tiny model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from factories import tiny_world_model

from factory.envs.model_world import ModelWorld
from factory.model import WorldModel


def frames(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*shape, 32, 32, 3), dtype=np.uint8)


def actions(n: int, b: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(50, 450, (n, b, 2)).astype(np.float32)


def _run(wm: WorldModel, acts: np.ndarray) -> list[np.ndarray]:
    return [wm.step(a).frames for a in acts]


def test_restart_leaves_other_rows_alone() -> None:
    """Rows not restarted give bit-identical frames with and without a restart of row 1."""
    ctx, new = frames(3, 2, seed=0), frames(1, 2, seed=5)
    ctx_a, new_a = np.zeros((3, 1, 2), np.float32), np.full((1, 1, 2), 200.0, np.float32)
    before, after = actions(3, 3, seed=1), actions(4, 3, seed=2)
    wm = tiny_world_model()
    wm.start(ctx, ctx_a, seed=3)
    _run(wm, before)
    wm.start_slots([1], new, new_a)
    restarted = _run(wm, after)
    wm.start(ctx, ctx_a, seed=3)
    _run(wm, before)
    plain = _run(wm, after)
    for x, y in zip(restarted, plain, strict=True):
        np.testing.assert_array_equal(x[[0, 2]], y[[0, 2]])
    assert any(not np.array_equal(x[1], y[1]) for x, y in zip(restarted, plain, strict=True))


def test_restarted_row_equals_a_fresh_start() -> None:
    """A restarted row steps exactly like a fresh rollout of that context, same noise."""
    wm, fresh = tiny_world_model(), tiny_world_model()
    ctx, new = frames(3, 2, seed=0), frames(1, 2, seed=5)
    new_a = np.full((1, 1, 2), 200.0, np.float32)
    wm.start(ctx, np.zeros((3, 1, 2), np.float32), seed=3)
    _run(wm, actions(2, 3, seed=1))
    wm.start_slots([1], new, new_a)
    zeros = np.zeros((1, 1, 2), np.float32)
    fresh.start(np.concatenate([ctx[:1], new, ctx[2:]]), np.concatenate([zeros, new_a, zeros]))
    assert fresh._actions is not None and wm._actions is not None
    torch.testing.assert_close(fresh._actions[1], wm._actions[1], rtol=0, atol=0)
    assert fresh._window is not None and wm._window is not None
    torch.testing.assert_close(fresh._window[1], wm._window[1], rtol=0, atol=0)
    assert wm._generator is not None and fresh._generator is not None
    fresh._generator.set_state(wm._generator.get_state())
    for a in actions(3, 3, seed=4):
        np.testing.assert_array_equal(wm.step(a).frames[1], fresh.step(a).frames[1])


def test_single_frame_restart_pads_only_that_row() -> None:
    wm = tiny_world_model(context=4)
    wm.start(frames(2, 3), np.full((2, 2, 2), 50.0, np.float32), seed=0)
    wm.step(np.full((2, 2), 60.0, np.float32))
    assert wm._actions is not None
    kept = wm._actions[0].clone()
    wm.start_slots([1], frames(1, 1, seed=9), None)
    wm.step(np.full((2, 2), 300.0, np.float32))
    norm = wm.dynamics.normalise_actions  # type: ignore[union-attr]
    # row 1's padded window actions became its first step's action (the world stood still)
    torch.testing.assert_close(wm._actions[1], norm(torch.full((3, 2), 300.0)))
    # row 0 kept its own history, shifted by one step
    torch.testing.assert_close(wm._actions[0, :2], kept[1:])


def test_keep_slots_reorders_and_shrinks() -> None:
    wm = tiny_world_model()
    wm.start(frames(3, 1), None, seed=0)
    wm.step(np.full((3, 2), 100.0, np.float32))
    assert wm._window is not None
    rows = wm._window[[2, 0]].clone()
    wm.keep_slots([2, 0])
    assert wm.batch_size == 2
    torch.testing.assert_close(wm._window, rows, rtol=0, atol=0)
    assert wm.step(np.zeros((2, 2), np.float32)).frames.shape == (2, 32, 32, 3)


def test_slot_errors() -> None:
    wm = tiny_world_model()
    with pytest.raises(RuntimeError):
        wm.start_slots([0], frames(1, 1), None)
    wm.start(frames(2, 1), None)
    with pytest.raises(ValueError, match="out of range"):
        wm.start_slots([2], frames(1, 1), None)
    with pytest.raises(ValueError, match="repeat"):
        wm.keep_slots([0, 0])
    with pytest.raises(ValueError, match="slots"):
        wm.start_slots([0, 1], frames(1, 1), None)


def test_model_world_slots() -> None:
    world = ModelWorld(tiny_world_model(), batch_size=3, seed=0)
    world.reset(seeds=np.array([0, 1, 2]))
    world.step(np.full((3, 2), 256.0, np.float32))
    obs = world.start_slots([2], frames(1, 1, seed=3), None)
    assert obs.frames.shape == (1, 32, 32, 3) and obs.task_state.shape == (1, 3)
    agent, block = world.model.read_frames(frames(1, 1, seed=3)[:, -1])
    np.testing.assert_allclose(obs.task_state, block)
    np.testing.assert_allclose(obs.state, agent)
    world.keep_slots([0, 2])
    assert world.batch_size == 2
    assert world.step(np.full((2, 2), 256.0, np.float32)).frames.shape[0] == 2
    world.close()
