"""Pile-sweeping geometry in pure numpy: the board, the goal square, scoring and contact.

Nothing here needs the simulator, so the same score can be computed from a learned probe's
disc-position estimate inside the world model. A disc counts as *inside* the goal when its
centre lies in the closed goal square; the score is the fraction of discs inside.

Conventions: board pixels, x to the right and y down in the top view (as in PushT);
a task state is every disc's centre flattened, ``[x0, y0, x1, y1, ...]`` (K = 2 N).
"""

from __future__ import annotations

import numpy as np

BOARD_SIZE = 512.0
WALL = 5.0  # the walls' inner faces are at WALL and BOARD_SIZE - WALL
AGENT_RADIUS = 15.0
DISC_RADIUS = 10.0
GOAL_CENTER = np.array([256.0, 256.0])
GOAL_HALF = 75.0  # the goal is the axis-aligned square GOAL_CENTER +- GOAL_HALF (150 px)
SUCCESS_THRESHOLD = 0.9
CONTACT_MARGIN = 1.0  # pixels: the agent within this of a disc counts as touching


def goal_corners() -> np.ndarray:
    """The goal square's 4 corners (4, 2), counter-clockwise in the top view."""
    c, h = GOAL_CENTER, GOAL_HALF
    return np.array(
        [[c[0] - h, c[1] - h], [c[0] + h, c[1] - h], [c[0] + h, c[1] + h], [c[0] - h, c[1] + h]]
    )


def discs_of(task_state: np.ndarray) -> np.ndarray:
    """Task states (..., 2 N) as disc centres (..., N, 2)."""
    arr = np.asarray(task_state, dtype=np.float64)
    return arr.reshape(*arr.shape[:-1], arr.shape[-1] // 2, 2)


def inside_goal(xy: np.ndarray) -> np.ndarray:
    """Whether points (..., 2) lie in the closed goal square -> (...,) bool."""
    off = np.abs(np.asarray(xy, dtype=np.float64) - GOAL_CENTER)
    return np.asarray(np.all(off <= GOAL_HALF, axis=-1))


def fraction_inside(task_state: np.ndarray) -> np.ndarray:
    """The score: the fraction of discs inside the goal, task states (..., 2 N) -> (...,)."""
    return np.asarray(np.mean(inside_goal(discs_of(task_state)), axis=-1))


def score_and_success(task_state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Task states (B, 2 N) -> (score (B,) float32, success (B,) bool: score >= 0.9)."""
    score = fraction_inside(task_state).astype(np.float32)
    # compare in float64 so that 27/30 counts as 0.9 exactly
    return score, fraction_inside(task_state) >= SUCCESS_THRESHOLD - 1e-9


def agent_disc_gaps(agent_xy: np.ndarray, discs: np.ndarray) -> np.ndarray:
    """Surface gaps (..., N) between the agent (..., 2) and the discs (..., N, 2)."""
    d = np.linalg.norm(np.asarray(discs) - np.asarray(agent_xy)[..., None, :], axis=-1)
    return np.asarray(d - AGENT_RADIUS - DISC_RADIUS)


def agent_contact(
    agent_xy: np.ndarray, discs: np.ndarray, margin: float = CONTACT_MARGIN
) -> np.ndarray:
    """Whether the agent (..., 2) touches any disc (..., N, 2) within ``margin`` -> (...,)."""
    return np.asarray(np.min(agent_disc_gaps(agent_xy, discs), axis=-1) <= margin)
