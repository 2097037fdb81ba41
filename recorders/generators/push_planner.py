"""Push planning for the scripted PushT expert.

A *push* is a straight stroke of the agent disk into the T along an outward surface normal:
it starts at rest ``standoff`` pixels off the contact point and ends ``depth`` pixels past
first touch. Contacts are frictionless, so only the normal matters; where along the T's
outline one pushes sets how much the block turns versus slides. The planner simulates every
candidate stroke in a private copy of the physics (:mod:`pusht_sim`), reads off the block
pose at several depths, and picks the stroke that most lowers the log keypoint error per
step spent (repositioning included). Repositioning paths go around the T's convex hull.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import shapely.geometry as sg
from shapely.prepared import prep

from factory.envs import pusht_geometry as geo
from recorders.generators.pusht_sim import PushTSim, pd_steps_to_reach

R = geo.AGENT_RADIUS
DEPTHS = np.array(
    [0.5, 1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 19.0, 27.0, 38.0, 52.0, 70.0, 95.0, 130.0]
)
WALL_LO, WALL_HI = 7.0, 504.0  # inner faces of the board's walls


def wall_penalty(poses: np.ndarray, reach: float) -> np.ndarray:
    """How far (N,) poses' outline corners crowd the walls: 0 when all are ``reach`` clear."""
    poses = np.asarray(poses, dtype=np.float64).reshape(-1, 3)
    c, s = np.cos(poses[:, 2]), np.sin(poses[:, 2])
    x = c[:, None] * geo.T_OUTLINE[:, 0] - s[:, None] * geo.T_OUTLINE[:, 1] + poses[:, :1]
    y = s[:, None] * geo.T_OUTLINE[:, 0] + c[:, None] * geo.T_OUTLINE[:, 1] + poses[:, 1:2]
    gap = np.minimum(np.minimum(x - WALL_LO, WALL_HI - x), np.minimum(y - WALL_LO, WALL_HI - y))
    return np.asarray(np.sum(np.clip(reach - gap, 0.0, None), axis=1) / reach)


@dataclass(frozen=True)
class Contact:
    """A body-frame contact point on the T and the outward push normal there."""

    point: np.ndarray
    normal: np.ndarray


@dataclass
class Push:
    """A planned stroke in board coordinates, with its predicted outcome."""

    contact: Contact
    start: np.ndarray
    end: np.ndarray
    depth: float
    path: list[np.ndarray]
    predicted_pose: np.ndarray
    predicted_error: float
    gain: float  # drop of the planner's potential (log error + wall penalty)
    rate: float  # gain per env step


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


class PushPlanner:
    """Chooses the next push for a block pose and an agent position."""

    def __init__(
        self,
        *,
        spacing: float,
        standoff: float,
        clearance: float,
        max_depth: float,
        overhead: float = 2.0,
        min_gain: float = 0.005,
        wall_weight: float = 0.5,
        wall_reach: float = 40.0,
    ) -> None:
        self.contacts = make_contacts(spacing)
        self.standoff = standoff
        self.clearance = clearance
        self.overhead = overhead
        self.min_gain = min_gain
        self.wall_weight = wall_weight
        self.wall_reach = wall_reach
        self.max_depth = max_depth
        self.sim = PushTSim()

    def value(self, poses: np.ndarray) -> np.ndarray:
        """The planner's potential (N,): log keypoint error plus a wall-crowding penalty."""
        poses = np.asarray(poses, dtype=np.float64).reshape(-1, 3)
        return np.asarray(
            np.log(geo.keypoint_errors(poses) + 0.05)
            + self.wall_weight * wall_penalty(poses, self.wall_reach)
        )

    def plan(
        self,
        agent: np.ndarray,
        pose: np.ndarray,
        rng: np.random.Generator | None = None,
        jitter: float = 0.0,
        explore: bool = False,
    ) -> Push | None:
        """The push with the best potential drop per step, or None when none is possible.

        When no push lowers the potential, the one that raises it least is returned (its
        ``gain`` is then <= 0). With ``rng``: ``jitter`` adds noise to the rates, and
        ``explore`` picks a random push among those that do little harm (to get unstuck).
        """
        err0 = geo.keypoint_error(pose)
        max_depth = float(np.clip(2.5 * err0 + 3.0, 3.0, self.max_depth))
        depths = DEPTHS[max_depth >= DEPTHS]
        value0 = float(self.value(pose)[0])
        router = Router(pose, R + self.clearance)
        pushes = [
            push
            for contact in self.contacts
            if (push := self._evaluate(contact, agent, pose, depths, router, value0))
        ]
        if not pushes:
            return None
        if rng is not None and jitter > 0:
            for push in pushes:
                push.rate += float(rng.normal(0.0, jitter))
        if rng is not None and explore:
            harmless = [p for p in pushes if p.gain > -0.1]
            if harmless:
                return harmless[int(rng.integers(len(harmless)))]
        useful = [p for p in pushes if p.gain > self.min_gain]
        if useful:
            return max(useful, key=lambda p: p.rate)
        return max(pushes, key=lambda p: p.gain)

    def _evaluate(
        self,
        contact: Contact,
        agent: np.ndarray,
        pose: np.ndarray,
        depths: np.ndarray,
        router: Router,
        value0: float,
    ) -> Push | None:
        rot = geo.rotation(pose[2])
        point = geo.to_world(contact.point, pose)
        normal = rot @ contact.normal
        start = point + normal * (R + self.standoff)
        if np.any(start < 1.0) or np.any(start > 511.0):
            return None
        rel = agent - point
        along = float(rel @ normal)
        lateral = float(np.linalg.norm(rel - along * normal))
        if lateral < 1.5 and R - 2.0 <= along <= R + self.standoff + 1.0:
            start, path = agent.copy(), []  # already on this stroke: keep pushing
            nav_steps = 0.0
        else:
            path = router.route(agent, start, point, normal)
            if not path:
                return None
            nav_steps = route_steps(agent, path)
        lead = float((start - point) @ normal) - R  # gap before first touch
        self.sim.set_state(start, np.zeros(2), pose)
        travel, poses = self.sim.push_trace(start, -normal, lead + depths[-1], max_steps=9)
        idx = np.minimum(np.searchsorted(travel, lead + depths), len(travel) - 1)
        gains = value0 - self.value(poses[idx])
        steps = nav_steps + np.array([pd_steps_to_reach(lead + d, 0.7) for d in depths])
        rates = gains / (steps + self.overhead)
        k = int(np.argmax(rates)) if np.any(gains > self.min_gain) else int(np.argmax(gains))
        end = point + normal * (R - float(depths[k]))
        return Push(
            contact,
            start,
            end,
            float(depths[k]),
            path,
            poses[idx[k]],
            float(geo.keypoint_error(poses[idx[k]])),
            float(gains[k]),
            float(rates[k]),
        )


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
