"""A private copy of gym-pusht's physics that the scripted expert plans pushes with.

It rebuilds the scene (walls, kinematic agent disk under PD control, T block with its
centre of gravity off the origin, no friction, velocity damped to zero every substep) from
an observation alone: the agent xy, an agent velocity estimate and the block pose. It never
touches the env, so the expert also runs inside the world model.
"""

from __future__ import annotations

import functools

import numpy as np
import pymunk
from pymunk._chipmunk import lib as _cp  # the C calls behind pymunk's wrappers

from factory.envs import pusht_geometry as geo

KP, KV = 100.0, 20.0  # gym-pusht's PD gains
DT = 0.01  # physics substep (s)
SUBSTEPS = 10  # substeps per 10 Hz env step
WALL_LO, WALL_HI = 7.0, 504.0  # inner faces of the walls (segments at 5 and 506, radius 2)


def pd_step(pos: np.ndarray, vel: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The agent's position and velocity after one env step towards ``target``.

    The agent is kinematic, so its motion does not depend on the block.
    """
    (px, py), (vx, vy) = np.asarray(pos, np.float64).tolist(), np.asarray(vel, np.float64).tolist()
    tx, ty = np.asarray(target, np.float64).tolist()
    for _ in range(SUBSTEPS):  # in Python floats: numpy's arithmetic on (2,) arrays, cheaper
        vx = vx + (KP * (tx - px) - KV * vx) * DT
        vy = vy + (KP * (ty - py) - KV * vy) * DT
        px, py = px + vx * DT, py + vy * DT
    return np.array([px, py]), np.array([vx, vy])


_STEP_GRID = np.arange(0.0, 30.25, 0.25)  # env steps, in quarters
_REMAINING = (1.0 + _STEP_GRID) * np.exp(-_STEP_GRID)  # decreasing in the steps


def pd_steps_to_reach(distance: float, tol: float = 1.0) -> float:
    """About how many env steps the PD needs to close ``distance`` to within ``tol``.

    Critically damped from rest: the remaining error is ``d (1 + x) exp(-x)`` after ``x``
    env steps (the natural frequency is 10/s and a step is 0.1 s). Quarter steps, at most 30.
    """
    return float(pd_steps_to_reach_many(np.asarray([distance], np.float64), tol)[0])


def pd_steps_to_reach_many(distances: np.ndarray, tol: float = 1.0) -> np.ndarray:
    """:func:`pd_steps_to_reach` of every distance (N,) -> (N,), in one table look-up."""
    ratio = tol / np.maximum(np.asarray(distances, np.float64), tol)
    # the first grid point whose remaining fraction is <= ratio (the grid's end if none)
    idx = np.searchsorted(-_REMAINING, -ratio, side="left")
    return np.asarray(_STEP_GRID[np.minimum(idx, len(_STEP_GRID) - 1)])


class PushTSim:
    """The PushT scene in pymunk, reset from (agent xy, agent velocity, block pose).

    ``walls=False`` leaves out the board's walls (a scene that is the same under any rigid
    motion, see :mod:`stroke_cache`).
    """

    def __init__(self, walls: bool = True) -> None:
        space = pymunk.Space()
        space.gravity = (0.0, 0.0)
        space.damping = 0.0
        segments = [
            ((5, 506), (5, 5)),
            ((5, 5), (506, 5)),
            ((506, 5), (506, 506)),
            ((5, 506), (506, 506)),
        ]
        if walls:
            space.add(*[pymunk.Segment(space.static_body, a, b, 2) for a, b in segments])
        agent = pymunk.Body(body_type=pymunk.Body.KINEMATIC)
        space.add(agent, pymunk.Circle(agent, geo.AGENT_RADIUS))
        block = pymunk.Body(geo.BLOCK_MASS, geo.BLOCK_MOMENT)
        shapes = [pymunk.Poly(block, [tuple(v) for v in rect]) for rect in geo.T_RECTS]
        block.center_of_gravity = tuple(geo.BLOCK_COG)
        space.add(block, *shapes)
        self.space, self.agent, self.block = space, agent, block

    def set_state(self, agent_xy: np.ndarray, agent_vel: np.ndarray, pose: np.ndarray) -> None:
        """Put the agent and the block at rest at the given state."""
        self.agent.position = (float(agent_xy[0]), float(agent_xy[1]))
        self.agent.velocity = (float(agent_vel[0]), float(agent_vel[1]))
        self.block.angle = float(pose[2])
        self.block.position = (float(pose[0]), float(pose[1]))
        self.block.velocity = (0.0, 0.0)
        self.block.angular_velocity = 0.0

    def pose(self) -> np.ndarray:
        """The block pose (x, y, angle)."""
        p = self.block.position
        return np.array([p.x, p.y, self.block.angle])

    def substep(self, target: tuple[float, float]) -> None:
        """One physics substep with the PD pulling the agent towards ``target``."""
        agent = self.agent
        pos, vel = agent.position, agent.velocity
        ax = KP * (target[0] - pos.x) - KV * vel.x
        ay = KP * (target[1] - pos.y) - KV * vel.y
        agent.velocity = (vel.x + ax * DT, vel.y + ay * DT)
        self.space.step(DT)

    def step(self, target: np.ndarray) -> None:
        """One env step (10 substeps) towards ``target``."""
        t = (float(target[0]), float(target[1]))
        for _ in range(SUBSTEPS):
            self.substep(t)

    def push_poses(
        self, start: np.ndarray, direction: np.ndarray, length: float, reach: np.ndarray
    ) -> np.ndarray:
        """Block poses (D, 3) when a push from rest at ``start`` towards ``start + length *
        direction`` first travels ``reach`` (D,) ascending px along ``direction``; the push
        stops 0.5 px short of its end or after 9 env steps (its last pose for reaches beyond).

        The agent is kinematic and starts at rest, so its motion along ``direction`` is the
        same for every push of this ``length``: it is precomputed, and only the substeps
        whose block pose is needed are read back.
        """
        vels, idx = self._push_plan(start, direction, length, reach)
        # pymunk's own C calls, without its per-call Python wrappers (the same arithmetic)
        set_velocity, step = _cp.cpBodySetVelocity, _cp.cpSpaceStep
        agent, block, space = self.agent._body, self.block._body, self.space._space
        out = np.empty((len(idx), 3))
        done = 0  # substeps stepped so far
        for k, last in enumerate(idx):
            for vel in vels[done : last + 1]:
                set_velocity(agent, vel)
                step(space, DT)
            done = max(done, last + 1)
            bp = _cp.cpBodyGetPosition(block)
            out[k] = (bp.x, bp.y, _cp.cpBodyGetAngle(block))
        return out

    def push_trajectory(
        self, start: np.ndarray, direction: np.ndarray, length: float, reach: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`push_poses` with the block pose after every substep: (poses (D, 3),
        trajectory (N, 3)), N the substeps up to the deepest reach."""
        vels, idx = self._push_plan(start, direction, length, reach)
        set_velocity, step = _cp.cpBodySetVelocity, _cp.cpSpaceStep
        agent, block, space = self.agent._body, self.block._body, self.space._space
        get_position, get_angle = _cp.cpBodyGetPosition, _cp.cpBodyGetAngle
        rows = []
        for vel in vels[: idx[-1] + 1]:
            set_velocity(agent, vel)
            step(space, DT)
            bp = get_position(block)
            rows.append((bp.x, bp.y, get_angle(block)))
        traj = np.array(rows)
        return traj[idx], traj

    def _push_plan(
        self, start: np.ndarray, direction: np.ndarray, length: float, reach: np.ndarray
    ) -> tuple[list[tuple[float, float]], list[int]]:
        """Puts the agent at ``start``; the agent velocity of each substep of the push and
        the substep (D,) at whose end each ``reach`` is first travelled."""
        speeds, travel = _push_profile(float(length), 9)
        idx = np.minimum(np.searchsorted(travel, reach), len(travel) - 1).tolist()
        self.agent.position = (float(start[0]), float(start[1]))
        dx, dy = float(direction[0]), float(direction[1])
        return list(zip((speeds * dx).tolist(), (speeds * dy).tolist(), strict=True)), idx


@functools.lru_cache(maxsize=64)
def _push_profile(length: float, max_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The agent's speed during (N,) and travel after (N,) each substep of a push from rest
    over ``length`` px, up to 0.5 px short of its end or ``max_steps`` env steps."""
    speeds, travel = [], []
    s = v = 0.0
    for _ in range(max_steps * SUBSTEPS):
        v = v + (KP * (length - s) - KV * v) * DT
        s = s + v * DT
        speeds.append(v)
        travel.append(s)
        if s >= length - 0.5:
            break
    return np.asarray(speeds), np.asarray(travel)
