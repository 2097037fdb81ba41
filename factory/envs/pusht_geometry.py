"""PushT geometry in pure numpy/shapely: the T, its goal, coverage and agent contact.

Nothing here needs the env, so the same scores can be computed from a learned probe's
block-pose estimate inside the world model.

Conventions (those of gym-pusht's ``info["block_pose"]``): a block pose is ``(x, y, angle)``
where ``(x, y)`` is the body origin in board pixels and the T's vertices in the body frame
are rotated by ``angle`` and then translated by ``(x, y)``. The body's centre of gravity is
at ``BLOCK_COG`` in the body frame (not at the origin).
"""

from __future__ import annotations

import numpy as np
import shapely.geometry as sg

BOARD_SIZE = 512.0
AGENT_RADIUS = 15.0
SUCCESS_THRESHOLD = 0.95
GOAL = np.array([256.0, 256.0, np.pi / 4])
"""The goal pose (x, y, angle) that gym-pusht uses."""

BLOCK_COG = np.array([0.0, 45.0])
BLOCK_MASS = 1.0
BLOCK_MOMENT = 3000.0

# The two rectangles of the T in the body frame, as gym-pusht builds them (scale 30).
T_RECTS = np.array(
    [
        [[-60.0, 0.0], [60.0, 0.0], [60.0, 30.0], [-60.0, 30.0]],  # cross bar
        [[-15.0, 30.0], [-15.0, 120.0], [15.0, 120.0], [15.0, 30.0]],  # stem
    ]
)
# Axis-aligned bounds (xmin, ymin, xmax, ymax) of the two rectangles in the body frame.
_RECT_BOUNDS = np.array([[-60.0, 0.0, 60.0, 30.0], [-15.0, 30.0, 15.0, 120.0]])
# The T's outline (counter-clockwise in a y-up frame), one vertex per corner.
T_OUTLINE = np.array(
    [
        [-60.0, 0.0],
        [60.0, 0.0],
        [60.0, 30.0],
        [15.0, 30.0],
        [15.0, 120.0],
        [-15.0, 120.0],
        [-15.0, 30.0],
        [-60.0, 30.0],
    ]
)
T_AREA = 120.0 * 30.0 + 30.0 * 90.0
# gym-pusht's 8 keypoints (``PushTEnv.get_keypoints``) in the body frame, in its order:
# the bar's 4 corners, then the stem's, as pymunk lists each polygon's vertices.
KEYPOINTS_BODY = np.array(
    [
        [-60.0, 0.0],
        [60.0, 0.0],
        [60.0, 30.0],
        [-60.0, 30.0],
        [-15.0, 30.0],
        [15.0, 30.0],
        [15.0, 120.0],
        [-15.0, 120.0],
    ]
)


def wrap_angle(angle: np.ndarray | float) -> np.ndarray:
    """Wrap angles to (-pi, pi]."""
    return np.pi - np.mod(np.pi - np.asarray(angle, dtype=np.float64), 2 * np.pi)


def rotation(angle: float) -> np.ndarray:
    """The 2x2 rotation matrix of ``angle``."""
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s], [s, c]])


def to_world(points: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """Body-frame points (..., 2) of a block at ``pose`` in board coordinates."""
    pose = np.asarray(pose, dtype=np.float64)
    return np.asarray(points, dtype=np.float64) @ rotation(pose[2]).T + pose[:2]


def to_body(points: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """Board points (..., 2) in the body frame of a block at ``pose``."""
    pose = np.asarray(pose, dtype=np.float64)
    return (np.asarray(points, dtype=np.float64) - pose[:2]) @ rotation(pose[2])


def cog_position(pose: np.ndarray) -> np.ndarray:
    """The block's centre of gravity in board coordinates."""
    return to_world(BLOCK_COG, pose)


def t_outline(pose: np.ndarray) -> np.ndarray:
    """The T's 8 outline corners (8, 2) in board coordinates."""
    return to_world(T_OUTLINE, pose)


def t_polygon(pose: np.ndarray) -> sg.Polygon:
    """The T at ``pose`` as one shapely polygon."""
    return sg.Polygon(t_outline(pose))


def _t_multipolygon(pose: np.ndarray) -> sg.MultiPolygon:
    # The same construction as gym-pusht's ``pymunk_to_shapely`` (two closed rectangles).
    rects = to_world(T_RECTS, pose)
    return sg.MultiPolygon([sg.Polygon(np.vstack([r, r[:1]])) for r in rects])


def coverage(block_pose: np.ndarray, goal_pose: np.ndarray = GOAL) -> float:
    """The fraction of the goal T that the block covers (gym-pusht's ``info["coverage"]``)."""
    goal = _t_multipolygon(goal_pose)
    block = _t_multipolygon(block_pose)
    return float(goal.intersection(block).area / goal.area)


NEAR_GOAL_PX = 15.0
NEAR_GOAL_DEG = 15.0
"""Bounds of :func:`near_goal`: coverage above 0.9 needs the block within about 7 px and
5 deg of the goal (sampled, ``tests/test_robustness.py``), so these are loose."""


def near_goal(block_poses: np.ndarray, goal_pose: np.ndarray = GOAL) -> np.ndarray:
    """(B,) bool for block poses (B, 3): within :data:`NEAR_GOAL_PX` of the goal's position
    and :data:`NEAR_GOAL_DEG` of its (wrapped) angle. A necessary condition for success,
    so a batch tests coverage (a polygon intersection, about 0.25 ms) on these rows only."""
    poses = np.asarray(block_poses, np.float64).reshape(-1, 3)
    dist = np.hypot(poses[:, 0] - goal_pose[0], poses[:, 1] - goal_pose[1])
    turn = np.abs(np.angle(np.exp(1j * (poses[:, 2] - goal_pose[2]))))
    return np.asarray((dist <= NEAR_GOAL_PX) & (turn <= np.radians(NEAR_GOAL_DEG)))


def is_success(block_pose: np.ndarray, goal_pose: np.ndarray = GOAL) -> bool:
    """Coverage above the success threshold (0.95)."""
    return coverage(block_pose, goal_pose) > SUCCESS_THRESHOLD


def distance_to_block(points: np.ndarray, block_pose: np.ndarray) -> np.ndarray:
    """Euclidean distance (...,) from board points (..., 2) to the T (0 inside it)."""
    local = to_body(points, block_pose)[..., None, :]  # (..., 1, 2)
    lo, hi = _RECT_BOUNDS[:, :2], _RECT_BOUNDS[:, 2:]
    gap = np.maximum(np.maximum(lo - local, local - hi), 0.0)  # (..., 2, 2)
    return np.asarray(np.min(np.linalg.norm(gap, axis=-1), axis=-1))


def agent_block_contact(agent_xy: np.ndarray, block_pose: np.ndarray, margin: float = 1.0) -> bool:
    """Whether the agent disk (radius 15) touches the block, within ``margin`` pixels."""
    return bool(distance_to_block(np.asarray(agent_xy), block_pose) <= AGENT_RADIUS + margin)


def keypoint_error(block_pose: np.ndarray, goal_pose: np.ndarray = GOAL) -> float:
    """Root-mean-square distance (pixels) between the block's and the goal's outline corners.

    A smooth pose error that mixes position and angle; about 1.5 px or less means success.
    """
    diff = t_outline(block_pose) - t_outline(goal_pose)
    return float(np.sqrt(np.mean(np.sum(diff**2, axis=-1))))


def keypoint_errors(block_poses: np.ndarray, goal_pose: np.ndarray = GOAL) -> np.ndarray:
    """:func:`keypoint_error` for a batch of poses (N, 3) -> (N,)."""
    poses = np.asarray(block_poses, dtype=np.float64).reshape(-1, 3)
    c, s = np.cos(poses[:, 2]), np.sin(poses[:, 2])
    rot = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)  # (N, 2, 2)
    pts = np.einsum("nij,kj->nki", rot, T_OUTLINE) + poses[:, None, :2]
    diff = pts - t_outline(goal_pose)[None]
    return np.asarray(np.sqrt(np.mean(np.sum(diff**2, axis=-1), axis=-1)))


def keypoints(block_poses: np.ndarray) -> np.ndarray:
    """gym-pusht's ``environment_state``: block poses (..., 3) -> (..., 16) float64, the 8
    keypoints ``[x0, y0, x1, y1, ...]`` of :data:`KEYPOINTS_BODY` in board pixels."""
    poses = np.asarray(block_poses, dtype=np.float64)
    c, s = np.cos(poses[..., 2:3]), np.sin(poses[..., 2:3])  # (..., 1)
    bx, by = KEYPOINTS_BODY[:, 0], KEYPOINTS_BODY[:, 1]  # (8,)
    x = poses[..., 0:1] + c * bx - s * by
    y = poses[..., 1:2] + s * bx + c * by
    return np.stack([x, y], axis=-1).reshape(*poses.shape[:-1], 16)
