"""Geometry shared by the scripted PushT generators: push contacts on the T and routes around it.

A *contact* is a body-frame point on the T's outline with the outward normal a push there
goes along. The :class:`Router` finds collision-free waypoints around a block (the T
inflated by the agent radius), over the T's convex hull.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np
import shapely

from factory.envs import pusht_geometry as geo
from factory.generators.pusht_sim import pd_steps_to_reach

R = geo.AGENT_RADIUS


@dataclass(frozen=True)
class Contact:
    """A body-frame contact point on the T and the outward push normal there."""

    point: np.ndarray
    normal: np.ndarray


def make_contacts(spacing: float) -> list[Contact]:
    """Candidate contacts: points along every outline edge plus corner pushes.

    Built once per spacing (a fresh list each call; the contacts' arrays are read-only).
    """
    return list(_contacts(float(spacing)))


@functools.lru_cache(maxsize=8)
def _contacts(spacing: float) -> tuple[Contact, ...]:
    contacts: list[Contact] = []
    outline = geo.T_OUTLINE
    n = len(outline)
    for i in range(n):
        a, b = outline[i], outline[(i + 1) % n]
        edge = b - a
        length = float(np.linalg.norm(edge))
        tangent = edge / length
        normal = np.array([tangent[1], -tangent[0]])  # outward for this vertex order
        count = max(round(length / spacing), 1)
        for k in range(count + 1):
            point = a + tangent * (length * k / count)
            contacts.append(Contact(point, normal))
    for i in range(n):  # corner pushes along the bisector of the two edge normals
        prev_c = [c for c in contacts if np.allclose(c.point, outline[i])]
        normals = [c.normal for c in prev_c]
        if len(normals) == 2:
            bis = normals[0] + normals[1]
            contacts.append(Contact(outline[i].copy(), bis / np.linalg.norm(bis)))
    kept = tuple(c for c in contacts if _clear(c))
    for c in kept:
        c.point.flags.writeable = c.normal.flags.writeable = False
    return kept


def _clear(contact: Contact) -> bool:
    """Whether the disk can sit on ``contact`` and come in along its normal."""
    probes = contact.point + contact.normal * (R + np.array([0.5, 5.0, 20.0, 60.0]))[:, None]
    identity = np.zeros(3)
    return bool(np.all(geo.distance_to_block(probes, identity) >= R - 0.25))


def route_steps(agent: np.ndarray, path: list[np.ndarray]) -> float:
    """About how many env steps following ``path`` takes."""
    pts = np.vstack([agent, *path])
    length = float(np.sum(np.linalg.norm(np.diff(pts, axis=0), axis=1)))
    return pd_steps_to_reach(length, 1.5) + 0.7 * (len(path) - 1)


class Router:
    """Collision-free waypoints around a block (the T inflated by the agent radius).

    Collision tests go to shapely (GEOS, prepared geometries) in batches.
    """

    def __init__(self, pose: np.ndarray, inflate: float) -> None:
        self.pose = pose
        self.obstacle = geo.t_polygon(pose).buffer(inflate, quad_segs=4)
        shapely.prepare(self.obstacle)
        hull = self.obstacle.convex_hull.buffer(3.0, quad_segs=2)
        # Waypoints must be reachable: the agent's target is clipped to the board.
        self.ring = np.clip(np.asarray(hull.exterior.coords)[:-1], 2.0, 510.0)
        self.hull = self.obstacle.convex_hull
        shapely.prepare(self.hull)
        self._ring_sight: dict[int, np.ndarray] = {}

    def clear(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether the straight segment a-b misses the inflated T."""
        return bool(self.clear_many(np.asarray(a), np.asarray(b)[None])[0])

    def clear_many(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether each straight segment from a (2,) or (N, 2) to b (N, 2) misses the
        inflated T: (N,) bool."""
        segs = np.empty((len(b), 2, 2))
        segs[:, 0], segs[:, 1] = a, b
        return ~shapely.intersects(self.obstacle, shapely.linestrings(segs))

    def route(
        self, agent: np.ndarray, goal: np.ndarray, point: np.ndarray, normal: np.ndarray
    ) -> list[np.ndarray]:
        """Waypoints from ``agent`` to ``goal`` (the stroke start at ``point``/``normal``)."""
        if self.clear(agent, goal):
            return [goal]
        path: list[np.ndarray] = []
        here = agent
        if shapely.contains_xy(self.obstacle, agent[0], agent[1]):
            here = self._exit(agent)
            path.append(here)
            if self.clear(here, goal):
                return [*path, goal]
        entry = goal
        if shapely.contains_xy(self.hull, goal[0], goal[1]):  # a pocket: in along the normal
            entry = self._outside_along(point, normal)
        around = self._around(here, entry)
        path.extend(around)
        if entry is not goal:
            path.append(entry)
        path.append(goal)
        return path

    def _exit(self, agent: np.ndarray) -> np.ndarray:
        local = geo.to_body(agent, self.pose)
        centre = geo.BLOCK_COG
        away = local - centre
        norm = float(np.linalg.norm(away))
        away = away / norm if norm > 1e-6 else np.array([0.0, -1.0])
        world_dir = geo.rotation(self.pose[2]) @ away
        probes = agent + world_dir * np.arange(2.0, 200.0, 2.0)[:, None]
        out = np.flatnonzero(~shapely.contains_xy(self.obstacle, probes[:, 0], probes[:, 1]))
        if len(out):
            return np.asarray(probes[out[0]] + world_dir * 2.0)
        return np.asarray(agent + world_dir * 200.0)

    def _outside_along(self, point: np.ndarray, normal: np.ndarray) -> np.ndarray:
        probes = point + normal * np.arange(R, 300.0, 4.0)[:, None]
        out = np.flatnonzero(~shapely.contains_xy(self.hull, probes[:, 0], probes[:, 1]))
        if len(out):
            return np.asarray(probes[out[0]] + normal * 4.0)
        return np.asarray(point + normal * 300.0)

    def _around(self, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        ring = self.ring
        n = len(ring)
        ia = int(np.argmin(np.linalg.norm(ring - a, axis=1)))
        ib = int(np.argmin(np.linalg.norm(ring - b, axis=1)))
        sight = _Sight(self, a, b)
        options = []
        for sign, count in ((1, (ib - ia) % n), (-1, (ia - ib) % n)):
            kept = self._shortcut([(ia + sign * k) % n for k in range(count + 1)], sight)
            hits = sum(not sight.clear(p, q) for p, q in itertools.pairwise([-1, *kept, n]))
            seq = np.vstack([a, *ring[kept], b])
            options.append((hits, _length(seq), [ring[k] for k in kept]))
        return min(options, key=lambda o: (o[0], o[1]))[2]

    def _shortcut(self, pts: list[int], sight: _Sight) -> list[int]:
        """Ring points ``pts`` (indices) thinned: from the start, and then from each kept
        point, jump to the furthest one (or the goal) in clear sight."""
        out: list[int] = []
        here = -1  # the start
        seq = [*pts, len(self.ring)]  # ... then the goal
        i = 0
        while i < len(seq) - 1:
            seen = np.flatnonzero(sight.row(here)[seq[i + 1 :]])
            j = i + 1 + int(seen[-1]) if len(seen) else i
            if j == i:
                out.append(seq[i])
                here = seq[i]
                i += 1
            else:
                if j == len(seq) - 1:
                    return out
                out.append(seq[j])
                here = seq[j]
                i = j
        return out

    def ring_sight(self, i: int) -> np.ndarray:
        """(N,) bool: whether ring point ``i`` sees each ring point (memoised)."""
        row = self._ring_sight.get(i)
        if row is None:
            row = self._ring_sight[i] = self.clear_many(self.ring[i], self.ring)
        return row


class _Sight:
    """Clear sight among a start (index -1), the router's ring points (0..N-1) and a goal
    (index N), each segment tested (from its first point to its second) once."""

    def __init__(self, router: Router, start: np.ndarray, goal: np.ndarray) -> None:
        ring = router.ring
        self.router = router
        self.start = np.append(router.clear_many(start, ring), router.clear(start, goal))
        self.to_goal = router.clear_many(ring, np.broadcast_to(goal, ring.shape))

    def row(self, i: int) -> np.ndarray:
        """(N + 1,) bool: what point ``i`` (-1 or a ring index) sees of the ring and goal."""
        if i < 0:
            return self.start
        return np.append(self.router.ring_sight(i), self.to_goal[i])

    def clear(self, i: int, j: int) -> bool:
        """Whether point ``i`` (-1 or a ring index) sees point ``j`` (a ring index or N)."""
        return bool(self.row(i)[j])


def _length(pts: np.ndarray) -> float:
    """The length of the polyline through points (N, 2)."""
    return float(np.sum(np.linalg.norm(np.diff(pts, axis=0), axis=1)))
