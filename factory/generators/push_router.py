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


@dataclass(frozen=True)
class _BodyGeometry:
    """What a router needs that is the same for every block pose, in the body frame: the
    inflated T (obstacle), its convex hull, the ring of waypoints just outside the hull
    (N, 2) and which ring points see each other (N, N) bool."""

    obstacle: shapely.Polygon
    hull: shapely.Polygon
    ring: np.ndarray
    sight: np.ndarray


@functools.lru_cache(maxsize=8)
def _body_geometry(inflate: float) -> _BodyGeometry:
    obstacle = geo.t_polygon(np.zeros(3)).buffer(inflate, quad_segs=4)
    shapely.prepare(obstacle)
    hull = obstacle.convex_hull
    shapely.prepare(hull)
    ring = np.asarray(hull.buffer(3.0, quad_segs=2).exterior.coords)[:-1]
    sight = np.stack([_clear_many(obstacle, p, ring) for p in ring])
    for a in (ring, sight):
        a.flags.writeable = False
    return _BodyGeometry(obstacle, hull, ring, sight)


def _clear_many(obstacle: shapely.Polygon, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether each straight segment from a (2,) or (N, 2) to b (N, 2) misses
    ``obstacle``: (N,) bool."""
    segs = np.empty((len(b), 2, 2))
    segs[:, 0], segs[:, 1] = a, b
    return np.asarray(~shapely.intersects(obstacle, shapely.linestrings(segs)))


class Router:
    """Collision-free waypoints around a block (the T inflated by the agent radius).

    Everything is done in the block's body frame, where the obstacle, its hull, the ring of
    waypoints and the ring's mutual sight are the same for every pose (built once per
    inflation, :func:`_body_geometry`): a pose only moves the queries in and the waypoints
    out. Waypoints must be reachable, so the ring is clipped to the board in board
    coordinates; the few ring points the clip moves get their sight tested afresh.
    Collision tests go to shapely (GEOS, prepared geometries) in batches.
    """

    def __init__(self, pose: np.ndarray, inflate: float) -> None:
        self.pose = np.asarray(pose, np.float64)
        body = _body_geometry(float(inflate))
        self.obstacle, self.hull = body.obstacle, body.hull
        world = geo.to_world(body.ring, self.pose)
        self.ring = np.clip(world, 2.0, 510.0)
        moved = np.flatnonzero(np.any(self.ring != world, axis=1))
        if len(moved):
            self._ring_body = body.ring.copy()
            self._ring_body[moved] = geo.to_body(self.ring[moved], self.pose)
            sight = body.sight.copy()
            for i in moved:
                row = _clear_many(body.obstacle, self._ring_body[i], self._ring_body)
                sight[i] = sight[:, i] = row
            self._sight = sight
        else:
            self._ring_body, self._sight = body.ring, body.sight

    def clear(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether the straight segment a-b (board coordinates) misses the inflated T."""
        return bool(self.clear_many(np.asarray(a), np.asarray(b)[None])[0])

    def clear_many(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether each straight segment from a (2,) or (N, 2) to b (N, 2), in board
        coordinates, misses the inflated T: (N,) bool."""
        return _clear_many(self.obstacle, geo.to_body(a, self.pose), geo.to_body(b, self.pose))

    def route(
        self, agent: np.ndarray, goal: np.ndarray, point: np.ndarray, normal: np.ndarray
    ) -> list[np.ndarray]:
        """Waypoints from ``agent`` to ``goal`` (the stroke start at ``point``/``normal``),
        all in board coordinates."""
        agent_b, goal_b = geo.to_body(agent, self.pose), geo.to_body(goal, self.pose)
        if _clear_many(self.obstacle, agent_b, goal_b[None])[0]:
            return [goal]
        path: list[np.ndarray] = []
        here = agent_b
        if shapely.contains_xy(self.obstacle, agent_b[0], agent_b[1]):
            here = self._exit(agent_b)
            path.append(self._world(here))
            if _clear_many(self.obstacle, here, goal_b[None])[0]:
                return [*path, goal]
        entry = goal_b
        if shapely.contains_xy(self.hull, goal_b[0], goal_b[1]):  # a pocket: in along the normal
            entry = self._outside_along(geo.to_body(point, self.pose), normal @ self._rot())
        path.extend(self._around_body(here, entry))
        if entry is not goal_b:
            path.append(self._world(entry))
        path.append(goal)
        return path

    def _rot(self) -> np.ndarray:
        return geo.rotation(self.pose[2])

    def _world(self, p: np.ndarray) -> np.ndarray:
        return np.asarray(geo.to_world(p, self.pose))

    def _exit(self, agent: np.ndarray) -> np.ndarray:
        """A body-frame point just outside the obstacle, straight away from the centre of
        gravity from body-frame ``agent`` inside it."""
        away = agent - geo.BLOCK_COG
        norm = float(np.linalg.norm(away))
        away = away / norm if norm > 1e-6 else np.array([0.0, -1.0])
        probes = agent + away * np.arange(2.0, 200.0, 2.0)[:, None]
        out = np.flatnonzero(~shapely.contains_xy(self.obstacle, probes[:, 0], probes[:, 1]))
        if len(out):
            return np.asarray(probes[out[0]] + away * 2.0)
        return np.asarray(agent + away * 200.0)

    def _outside_along(self, point: np.ndarray, normal: np.ndarray) -> np.ndarray:
        """The first body-frame point out of the hull along ``normal`` from ``point``."""
        probes = point + normal * np.arange(R, 300.0, 4.0)[:, None]
        out = np.flatnonzero(~shapely.contains_xy(self.hull, probes[:, 0], probes[:, 1]))
        if len(out):
            return np.asarray(probes[out[0]] + normal * 4.0)
        return np.asarray(point + normal * 300.0)

    def _around(self, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        """Ring waypoints (board coordinates) from ``a`` to ``b`` (board coordinates)."""
        return self._around_body(geo.to_body(a, self.pose), geo.to_body(b, self.pose))

    def _around_body(self, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        """Ring waypoints (board coordinates) from body-frame ``a`` to ``b``: the shorter
        of the two ways round among those with the fewest blocked segments."""
        ring = self._ring_body
        n = len(ring)
        ia = int(np.argmin(np.linalg.norm(ring - a, axis=1)))
        ib = int(np.argmin(np.linalg.norm(ring - b, axis=1)))
        sight = self._sight_rows(a, b)
        options = []
        for sign, count in ((1, (ib - ia) % n), (-1, (ia - ib) % n)):
            kept = _shortcut([(ia + sign * k) % n for k in range(count + 1)], sight)
            hits = sum(not sight[p, q] for p, q in itertools.pairwise([-1, *kept, n]))
            seq = np.vstack([a, *ring[kept], b])
            options.append((hits, _length(seq), kept))
        kept = min(options, key=lambda o: (o[0], o[1]))[2]
        return [self.ring[k].copy() for k in kept]

    def _sight_rows(self, start: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """(N + 2, N + 1) bool: row i < N is what ring point i sees of the ring and (column
        N) the goal; the last row is what the start sees (so row -1 is the start)."""
        ring, n = self._ring_body, len(self._ring_body)
        rows = np.empty((n + 2, n + 1), bool)
        rows[:n, :n] = self._sight
        rows[:n, n] = _clear_many(self.obstacle, ring, np.broadcast_to(goal, ring.shape))
        rows[-1, :n] = _clear_many(self.obstacle, start, ring)
        rows[-1, n] = _clear_many(self.obstacle, start, goal[None])[0]
        rows[n] = False
        return rows

    def ring_sight(self, i: int) -> np.ndarray:
        """(N,) bool: whether ring point ``i`` sees each ring point."""
        return np.asarray(self._sight[i])


def _shortcut(pts: list[int], sight: np.ndarray) -> list[int]:
    """Ring points ``pts`` (indices) thinned: from the start, and then from each kept
    point, jump to the furthest one (or the goal, index N) in clear sight (``sight``, the
    rows of :meth:`Router._sight_rows`)."""
    out: list[int] = []
    here = -1  # the start
    seq = [*pts, sight.shape[1] - 1]  # ... then the goal
    i = 0
    while i < len(seq) - 1:
        seen = np.flatnonzero(sight[here, seq[i + 1 :]])
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


def _length(pts: np.ndarray) -> float:
    """The length of the polyline through points (N, 2)."""
    return float(np.sum(np.linalg.norm(np.diff(pts, axis=0), axis=1)))
