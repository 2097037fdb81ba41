"""Geometry shared by the scripted PushT generators: push contacts on the T and routes around it.

A *contact* is a body-frame point on the T's outline with the outward normal a push there
goes along. The :class:`Router` finds collision-free waypoints around a block (the T
inflated by the agent radius), over the T's convex hull.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import shapely.geometry as sg
from shapely.prepared import prep

from factory.envs import pusht_geometry as geo
from factory.generators.pusht_sim import pd_steps_to_reach

R = geo.AGENT_RADIUS


@dataclass(frozen=True)
class Contact:
    """A body-frame contact point on the T and the outward push normal there."""

    point: np.ndarray
    normal: np.ndarray


def make_contacts(spacing: float) -> list[Contact]:
    """Candidate contacts: points along every outline edge plus corner pushes."""
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
    return [c for c in contacts if _clear(c)]


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
    """Collision-free waypoints around a block (the T inflated by the agent radius)."""

    def __init__(self, pose: np.ndarray, inflate: float) -> None:
        self.pose = pose
        self.obstacle = geo.t_polygon(pose).buffer(inflate, quad_segs=4)
        self.prepared = prep(self.obstacle)
        hull = self.obstacle.convex_hull.buffer(3.0, quad_segs=2)
        # Waypoints must be reachable: the agent's target is clipped to the board.
        self.ring = np.clip(np.asarray(hull.exterior.coords)[:-1], 2.0, 510.0)
        self.hull = prep(self.obstacle.convex_hull)

    def clear(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether the straight segment a-b misses the inflated T."""
        return not self.prepared.intersects(sg.LineString([a, b]))

    def route(
        self, agent: np.ndarray, goal: np.ndarray, point: np.ndarray, normal: np.ndarray
    ) -> list[np.ndarray]:
        """Waypoints from ``agent`` to ``goal`` (the stroke start at ``point``/``normal``)."""
        if self.clear(agent, goal):
            return [goal]
        path: list[np.ndarray] = []
        here = agent
        if self.prepared.contains(sg.Point(agent)):
            here = self._exit(agent)
            path.append(here)
            if self.clear(here, goal):
                return [*path, goal]
        entry = goal
        if self.hull.contains(sg.Point(goal)):  # a pocket: come in along the normal
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
        for dist in np.arange(2.0, 200.0, 2.0):
            p = agent + world_dir * dist
            if not self.prepared.contains(sg.Point(p)):
                return p + world_dir * 2.0
        return agent + world_dir * 200.0

    def _outside_along(self, point: np.ndarray, normal: np.ndarray) -> np.ndarray:
        for dist in np.arange(R, 300.0, 4.0):
            p = point + normal * dist
            if not self.hull.contains(sg.Point(p)):
                return p + normal * 4.0
        return point + normal * 300.0

    def _around(self, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
        ring = self.ring
        n = len(ring)
        ia = int(np.argmin(np.linalg.norm(ring - a, axis=1)))
        ib = int(np.argmin(np.linalg.norm(ring - b, axis=1)))
        options = []
        for sign, count in ((1, (ib - ia) % n), (-1, (ia - ib) % n)):
            pts = [ring[(ia + sign * k) % n] for k in range(count + 1)]
            pts = self._shortcut(a, pts, b)
            seq = [a, *pts, b]
            hits = sum(not self.clear(p, q) for p, q in itertools.pairwise(seq))
            options.append((hits, _length(seq), pts))
        return min(options, key=lambda o: (o[0], o[1]))[2]

    def _shortcut(self, a: np.ndarray, pts: list[np.ndarray], b: np.ndarray) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        here = a
        seq = [*pts, b]
        i = 0
        while i < len(seq) - 1:
            j = len(seq) - 1
            while j > i and not self.clear(here, seq[j]):
                j -= 1
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


def _length(pts: list[np.ndarray]) -> float:
    arr = np.vstack(pts)
    return float(np.sum(np.linalg.norm(np.diff(arr, axis=0), axis=1)))
