"""Stroke outcomes simulated once and reused at any block pose, by rigid motion.

Away from the walls the planner's physics (:mod:`pusht_sim`: a kinematic disk pushing a
frictionless T with no momentum) is the same under any rigid motion of the whole scene: a
stroke's effect on the block, relative to the pose it starts from, does not depend on where
the block is. So each set of strokes (body-frame contacts, standoff, depths) is simulated
once per process in a wall-free scene with the block at the origin, and a table at block pose
P composes P with those relative poses. A stroke whose swept block would come within
:data:`WALL_MARGIN` of a wall at P is left to the caller to simulate at P (with the walls).

The composed poses equal a simulation at P up to rounding; strokes that balance on a corner
(the disk meets a vertex) can turn rounding into a few pixels either way, in either
simulation.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from factory.envs import pusht_geometry as geo
from factory.generators.pusht_sim import WALL_HI, WALL_LO, PushTSim

R = geo.AGENT_RADIUS
WALL_MARGIN = 4.0  # px: a stroke whose block comes this close to a wall is simulated at P
SUPPORT_DIRECTIONS = 128  # support lines kept per stroke for the (conservative) wall test
CACHE_SETS = 64  # stroke sets kept (one per depth range and planner geometry)


@dataclass(frozen=True)
class StrokeSet:
    """Strokes of C contacts to D depths from a block at the origin.

    rel: (C, D, 3) block poses after each depth, in the start pose's frame; support: (C, K)
    how far the T's outline corners reach, over the whole stroke, along K equally spaced
    directions of that frame (``support[c, k] = max_p p . (cos, sin)(2 pi k / K)``).
    """

    rel: np.ndarray
    support: np.ndarray

    def poses(self, pose: np.ndarray) -> np.ndarray:
        """The strokes' block poses (C, D, 3) from block ``pose`` (3,), walls ignored."""
        out = np.empty_like(self.rel)
        out[..., :2] = geo.to_world(self.rel[..., :2], pose)
        out[..., 2] = pose[2] + self.rel[..., 2]
        return out

    def near_walls(self, pose: np.ndarray) -> np.ndarray:
        """(C,) bool: strokes whose block could come within WALL_MARGIN of a wall from
        ``pose`` (conservative: by the polygon the K support lines bound)."""
        x, y, angle = (float(v) for v in pose)
        # the walls' outward directions, in the stroke frame: +x, +y, -x, -y
        reach = [self._reach(d * np.pi / 2 - angle) for d in range(4)]
        gaps = [WALL_HI - x - reach[0], WALL_HI - y - reach[1]]
        gaps += [x - reach[2] - WALL_LO, y - reach[3] - WALL_LO]
        return np.asarray(np.min(gaps, axis=0) < WALL_MARGIN)

    def _reach(self, phi: float) -> np.ndarray:
        """An upper bound (C,) on the support along direction ``phi``: the vertex of the
        two support lines either side of it."""
        k = self.support.shape[1]
        step = 2 * np.pi / k
        t = float(np.mod(phi, 2 * np.pi)) / step
        lo = min(int(t), k - 1)
        frac = (t - lo) * step
        h0, h1 = self.support[:, lo], self.support[:, (lo + 1) % k]
        return np.asarray((h0 * np.sin(step - frac) + h1 * np.sin(frac)) / np.sin(step))


class StrokeCache:
    """Stroke sets by (contacts, standoff, depths), simulated on first use."""

    def __init__(self, size: int = CACHE_SETS) -> None:
        self.size = size
        self._sets: OrderedDict[bytes, StrokeSet] = OrderedDict()
        self._sim: PushTSim | None = None

    def get(
        self, points: np.ndarray, normals: np.ndarray, standoff: float, depths: np.ndarray
    ) -> StrokeSet:
        """The strokes of body-frame contacts ``points``/``normals`` (C, 2) that start from
        rest ``standoff`` px off the T and push ``depths`` (D,) ascending px past touch."""
        key = b"".join(
            np.ascontiguousarray(a, np.float64).tobytes()
            for a in (points, normals, [standoff], depths)
        )
        found = self._sets.get(key)
        if found is not None:
            self._sets.move_to_end(key)
            return found
        made = self._simulate(points, normals, standoff, depths)
        self._sets[key] = made
        if len(self._sets) > self.size:
            self._sets.popitem(last=False)
        return made

    def _simulate(
        self, points: np.ndarray, normals: np.ndarray, standoff: float, depths: np.ndarray
    ) -> StrokeSet:
        if self._sim is None:
            self._sim = PushTSim(walls=False)
        sim, origin = self._sim, np.zeros(3)
        starts = points + normals * (R + standoff)
        rel, support = [], []
        for start, normal in zip(starts, normals, strict=True):
            sim.set_state(start, np.zeros(2), origin)
            poses, traj = sim.push_trajectory(
                start, -normal, standoff + depths[-1], standoff + depths
            )
            rel.append(poses)
            support.append(_support(np.vstack([origin, traj])))
        return StrokeSet(np.asarray(rel), np.asarray(support))


def _support(poses: np.ndarray) -> np.ndarray:
    """How far (K,) the T's outline corners reach along SUPPORT_DIRECTIONS over block poses
    (N, 3)."""
    c, s = np.cos(poses[:, 2:]), np.sin(poses[:, 2:])
    x = c * geo.T_OUTLINE[:, 0] - s * geo.T_OUTLINE[:, 1] + poses[:, :1]
    y = s * geo.T_OUTLINE[:, 0] + c * geo.T_OUTLINE[:, 1] + poses[:, 1:2]
    return np.asarray(np.max(np.stack([x.ravel(), y.ravel()], axis=1) @ _DIRECTIONS, axis=0))


_ANGLES = 2 * np.pi * np.arange(SUPPORT_DIRECTIONS) / SUPPORT_DIRECTIONS
_DIRECTIONS = np.stack([np.cos(_ANGLES), np.sin(_ANGLES)])  # (2, K)
STROKES = StrokeCache()
"""The process-wide cache (one stroke set costs about one table's simulation)."""
