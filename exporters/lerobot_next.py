"""The per-frame outcome columns of a PushT export, as lerobot's simulated PushT datasets
write them (``lerobot_eval``'s recorded rollouts, ``lerobot/pusht``):

    next.reward   float32 (1,)  gym-pusht's reward, ``clip(coverage / 0.95, 0, 1)``
    next.success  bool (1,)     coverage > 0.95
    next.done     bool (1,)     True on the last frame of an episode only

Frame ``t`` of a store holds the observation *before* action ``t``, so its ``next.*``
describe the state that action ``t`` led to: the block pose of frame ``t + 1`` (the
store's ``task_state``; in a generated store the model's own reading), scored with the env's
scorer (:func:`factory.envs.scoring.scorer_for`). The state after the last action is not
stored: the last frame takes the episode's ``meta.score`` (the coverage the world reported
after that action) where it is set, else its own block pose's (lerobot's convention of
repeating the last frame).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from exporters.lerobot_common import DONE, REWARD, SUCCESS
from factory.envs.model_vector_env import pusht_reward
from factory.envs.pusht_geometry import SUCCESS_THRESHOLD
from factory.envs.scoring import scorer_for

SCORED_WORLD = "pusht"  # a (block_x, block_y, block_angle) task_state is PushT's block pose


def next_features() -> dict[str, dict[str, Any]]:
    """The LeRobot feature specs of the three columns (lerobot_eval's)."""
    return {
        REWARD: {"dtype": "float32", "shape": (1,), "names": None},
        SUCCESS: {"dtype": "bool", "shape": (1,), "names": None},
        DONE: {"dtype": "bool", "shape": (1,), "names": None},
    }


def next_coverage(task_state: np.ndarray, final_score: float | None) -> np.ndarray:
    """Block poses (T, 3) of one episode -> (T,) float32 coverage of each frame's next
    state: frame t + 1's for t < T - 1, ``final_score`` (if a finite number in [0, 1]) or
    frame T - 1's own for the last frame."""
    poses = np.asarray(task_state, np.float64).reshape(-1, 3)
    score, _ = scorer_for(SCORED_WORLD)(poses)
    valid = final_score is not None and math.isfinite(final_score) and 0 <= final_score <= 1
    last = np.float32(final_score) if valid else score[-1:]
    return np.concatenate([score[1:], np.atleast_1d(last)]).astype(np.float32)


def next_columns(task_state: np.ndarray, final_score: float | None) -> dict[str, np.ndarray]:
    """``{next.reward (T, 1) float32, next.success (T, 1) bool, next.done (T, 1) bool}`` of
    one episode from its block poses (T, 3) and ``meta.score`` (see the module docstring)."""
    coverage = next_coverage(task_state, final_score)
    done = np.arange(len(coverage)) == len(coverage) - 1
    return {
        REWARD: pusht_reward(coverage).astype(np.float32)[:, None],
        SUCCESS: (coverage > SUCCESS_THRESHOLD)[:, None],
        DONE: done[:, None],
    }
