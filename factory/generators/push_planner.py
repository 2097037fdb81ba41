"""Push planning for the scripted PushT expert.

A *push* is a straight stroke of the agent disk into the T along an outward surface normal:
it starts at rest ``standoff`` pixels off the contact point and ends ``depth`` pixels past
first touch. Contacts are frictionless, so only the normal matters; where along the T's
outline one pushes sets how much the block turns versus slides. The planner simulates every
candidate stroke in a private copy of the physics (:mod:`pusht_sim`), reads off the block
pose at several depths, and picks the stroke that most lowers the log keypoint error per
step spent (repositioning included). Repositioning paths go around the T's convex hull.

Cost: everything that depends only on the block pose (the simulated strokes and their
gains, the router) is computed once per pose and cached (:class:`PoseTable`); the strokes
themselves are simulated once per process and moved to each pose by rigid motion, except
near the walls (:mod:`stroke_cache`); candidate geometry and gains are evaluated for all
contacts at once; and routes, the expensive part that depends on the agent, are computed
best-first, only for candidates whose optimistic rate (straight-line repositioning) can
still beat the best stroke found so far. The choice is the same as evaluating every
candidate.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from factory.envs import pusht_geometry as geo
from factory.generators.push_router import Contact, Router, make_contacts, route_steps
from factory.generators.pusht_sim import WALL_HI, WALL_LO, PushTSim, pd_steps_to_reach_many
from factory.generators.stroke_cache import STROKES

R = geo.AGENT_RADIUS
DEPTHS = np.array(
    [0.5, 1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 13.0, 19.0, 27.0, 38.0, 52.0, 70.0, 95.0, 130.0]
)
MIN_DEPTH = 3.0  # px: the shallowest range a plan tries (its depths are DEPTHS up to it)
CACHE_POSES = 4  # block poses whose tables are kept
GOAL_OUTLINE = geo.t_outline(geo.GOAL)


def wall_penalty(poses: np.ndarray, reach: float) -> np.ndarray:
    """How far (N,) poses' outline corners crowd the walls: 0 when all are ``reach`` clear."""
    return _wall_penalty(*_outline_xy(poses), reach)


def _outline_xy(poses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The outline corners' board x and y (N, 8) of block poses (N, 3)."""
    poses = np.asarray(poses, dtype=np.float64).reshape(-1, 3)
    c, s = np.cos(poses[:, 2:]), np.sin(poses[:, 2:])
    x = c * geo.T_OUTLINE[:, 0] - s * geo.T_OUTLINE[:, 1] + poses[:, :1]
    y = s * geo.T_OUTLINE[:, 0] + c * geo.T_OUTLINE[:, 1] + poses[:, 1:2]
    return x, y


def _wall_penalty(x: np.ndarray, y: np.ndarray, reach: float) -> np.ndarray:
    gap = np.minimum(np.minimum(x - WALL_LO, WALL_HI - x), np.minimum(y - WALL_LO, WALL_HI - y))
    return np.asarray(np.sum(np.clip(reach - gap, 0.0, None), axis=1) / reach)


def _keypoint_errors(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``geo.keypoint_errors`` (N,) from the outline corners (N, 8), with the same rounding."""
    dx, dy = x - GOAL_OUTLINE[:, 0], y - GOAL_OUTLINE[:, 1]
    return np.asarray(np.sqrt(np.mean(dx**2 + dy**2, axis=-1)))


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


@dataclass(frozen=True)
class PoseTable:
    """What a block pose alone decides, for C contacts and D depths.

    points, normals, starts: (C, 2) board coordinates; valid: (C,) whether the stroke start
    is on the board; gains: (C, D) potential drops; poses: (C, D, 3) predicted block poses
    (both for a stroke from ``starts``); steps: (C, D) env steps of a stroke from rest.
    """

    depths: np.ndarray
    value0: float
    points: np.ndarray
    normals: np.ndarray
    starts: np.ndarray
    valid: np.ndarray
    gains: np.ndarray
    poses: np.ndarray
    steps: np.ndarray
    router: Router


@dataclass(frozen=True)
class AgentView:
    """A :class:`PoseTable` seen from one agent position: contacts whose stroke line the
    agent sits on (on_stroke (C,)) push from the agent instead, so their rows of gains
    (C, D), poses (C, D, 3) and steps (C, D) are simulated afresh."""

    gains: np.ndarray
    poses: np.ndarray
    steps: np.ndarray
    on_stroke: np.ndarray


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
        self._body_points = np.array([c.point for c in self.contacts])
        self._body_normals = np.array([c.normal for c in self.contacts])
        self.standoff = standoff
        self.clearance = clearance
        self.overhead = overhead
        self.min_gain = min_gain
        self.wall_weight = wall_weight
        self.wall_reach = wall_reach
        self.max_depth = max_depth
        self.sim = PushTSim()
        self._tables: OrderedDict[bytes, PoseTable] = OrderedDict()

    def warm_strokes(self) -> None:
        """Simulate now every stroke set :meth:`plan` can ask for (one per depth range,
        :data:`MIN_DEPTH` to ``max_depth``; about 30 ms each), so that a process's first
        plans cost what later ones do. Generation workers call it in their start-up."""
        lo = int(np.sum(DEPTHS <= MIN_DEPTH))
        hi = int(np.sum(max(self.max_depth, MIN_DEPTH) >= DEPTHS))
        for k in range(lo, hi + 1):
            STROKES.get(self._body_points, self._body_normals, self.standoff, DEPTHS[:k])

    def value(self, poses: np.ndarray) -> np.ndarray:
        """The planner's potential (N,): log keypoint error plus a wall-crowding penalty."""
        x, y = _outline_xy(poses)
        return np.asarray(
            np.log(_keypoint_errors(x, y) + 0.05)
            + self.wall_weight * _wall_penalty(x, y, self.wall_reach)
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
        agent = np.asarray(agent, np.float64)
        table = self.table(np.asarray(pose, np.float64))
        view = self._agent_view(table, agent, pose)
        if (rng is None or (jitter <= 0 and not explore)) and (
            best := self._best_first(table, agent, view)
        ):
            return best
        pushes = [
            push
            for i in range(len(self.contacts))
            if table.valid[i] and (push := self._finish(table, i, agent, view))
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

    def table(self, pose: np.ndarray) -> PoseTable:
        """The (cached) :class:`PoseTable` of block ``pose`` (3,)."""
        key = pose.tobytes()
        table = self._tables.get(key)
        if table is None:
            table = self._build_table(pose)
            self._tables[key] = table
            if len(self._tables) > CACHE_POSES:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(key)
        return table

    def _build_table(self, pose: np.ndarray) -> PoseTable:
        err0 = geo.keypoint_error(pose)
        max_depth = float(np.clip(2.5 * err0 + 3.0, MIN_DEPTH, self.max_depth))
        depths = DEPTHS[max_depth >= DEPTHS]
        rot = geo.rotation(pose[2])
        points = geo.to_world(self._body_points, pose)
        normals = self._body_normals @ rot.T
        starts = points + normals * (R + self.standoff)
        valid = np.all((starts >= 1.0) & (starts <= 511.0), axis=1)
        value0 = float(self.value(pose)[0])
        poses = self._stroke_poses(pose, points, normals, starts, valid, depths)
        gains = value0 - self.value(poses.reshape(-1, 3)).reshape(len(points), len(depths))
        return PoseTable(
            depths=depths,
            value0=value0,
            points=points,
            normals=normals,
            starts=starts,
            valid=valid,
            gains=np.where(valid[:, None], gains, -np.inf),
            poses=poses,
            steps=self._stroke_steps(np.sum((starts - points) * normals, axis=1) - R, depths),
            router=Router(pose, R + self.clearance),
        )

    def _stroke_poses(
        self,
        pose: np.ndarray,
        points: np.ndarray,
        normals: np.ndarray,
        starts: np.ndarray,
        valid: np.ndarray,
        depths: np.ndarray,
    ) -> np.ndarray:
        """Predicted block poses (C, D, 3) of every valid contact's stroke (zeros elsewhere):
        the cached strokes moved to ``pose``, except near a wall, simulated here."""
        strokes = STROKES.get(self._body_points, self._body_normals, self.standoff, depths)
        poses = np.where(valid[:, None, None], strokes.poses(pose), 0.0)
        for i in np.flatnonzero(valid & strokes.near_walls(pose)):
            poses[i] = self._trace(starts[i], normals[i], points[i], pose, depths)
        return poses

    def _trace(
        self,
        start: np.ndarray,
        normal: np.ndarray,
        point: np.ndarray,
        pose: np.ndarray,
        depths: np.ndarray,
    ) -> np.ndarray:
        """Predicted block poses (D, 3) of a stroke from rest at ``start`` to each depth."""
        lead = float((start - point) @ normal) - R  # gap before first touch
        self.sim.set_state(start, np.zeros(2), pose)
        return self.sim.push_poses(start, -normal, lead + depths[-1], lead + depths)

    @staticmethod
    def _stroke_steps(leads: np.ndarray, depths: np.ndarray) -> np.ndarray:
        """Env steps (C, D) of strokes from rest ``leads`` (C,) px before touch to each depth."""
        total = np.asarray(leads, np.float64).reshape(-1, 1) + depths
        return pd_steps_to_reach_many(total.ravel(), 0.7).reshape(total.shape)

    def _agent_view(self, table: PoseTable, agent: np.ndarray, pose: np.ndarray) -> AgentView:
        """The table's candidates as seen from this agent position.

        A contact whose stroke line the agent already sits on keeps pushing from where the
        agent is, so its stroke (not cacheable) is simulated here.
        """
        rel = agent - table.points
        along = np.sum(rel * table.normals, axis=1)
        lateral = np.linalg.norm(rel - along[:, None] * table.normals, axis=1)
        on_stroke = table.valid & (lateral < 1.5) & (along >= R - 2.0)
        on_stroke &= along <= R + self.standoff + 1.0
        if not on_stroke.any():
            return AgentView(table.gains, table.poses, table.steps, on_stroke)
        gains, poses, steps = table.gains.copy(), table.poses.copy(), table.steps.copy()
        for i in np.flatnonzero(on_stroke):
            point, normal = table.points[i], table.normals[i]
            poses[i] = self._trace(agent, normal, point, pose, table.depths)
            gains[i] = table.value0 - self.value(poses[i])
            steps[i] = self._stroke_steps(np.array([(agent - point) @ normal - R]), table.depths)
        return AgentView(gains, poses, steps, on_stroke)

    def _best_first(self, table: PoseTable, agent: np.ndarray, view: AgentView) -> Push | None:
        """The best useful push, routing only candidates that can still win; None if none.

        A candidate's rate is at most its rate with straight-line repositioning, so once the
        best rate found beats every remaining bound the search stops. Ties go to the lower
        contact index, as in a full scan.
        """
        dist = np.linalg.norm(table.starts - agent, axis=1)
        nav_lb = np.where(view.on_stroke, 0.0, pd_steps_to_reach_many(dist, 1.5))
        rates = view.gains / (nav_lb[:, None] + view.steps + self.overhead)
        useful = view.gains > self.min_gain
        bound = np.where(useful, rates, -np.inf).max(axis=1, initial=-np.inf)
        best: Push | None = None
        best_i = -1
        for i in np.argsort(-bound, kind="stable"):
            if not np.isfinite(bound[i]) or (best is not None and bound[i] < best.rate):
                break
            push = self._finish(table, int(i), agent, view)
            if push is None or push.gain <= self.min_gain:
                continue
            if best is None or push.rate > best.rate or (push.rate == best.rate and i < best_i):
                best, best_i = push, int(i)
        return best

    def _finish(self, table: PoseTable, i: int, agent: np.ndarray, view: AgentView) -> Push | None:
        """Contact ``i``'s push at its best depth, with its route; None if unreachable."""
        point, normal = table.points[i], table.normals[i]
        gains, poses = view.gains[i], view.poses[i]
        if view.on_stroke[i]:  # already on this stroke: keep pushing
            start, path, nav_steps = agent.copy(), [], 0.0
        else:
            start = table.starts[i]
            path = table.router.route(agent, start, point, normal)
            if not path:
                return None
            nav_steps = route_steps(agent, path)
        rates = gains / (nav_steps + view.steps[i] + self.overhead)
        k = int(np.argmax(rates)) if np.any(gains > self.min_gain) else int(np.argmax(gains))
        return Push(
            self.contacts[i],
            start.copy(),
            point + normal * (R - float(table.depths[k])),
            float(table.depths[k]),
            path,
            poses[k].copy(),
            float(geo.keypoint_error(poses[k])),
            float(gains[k]),
            float(rates[k]),
        )
