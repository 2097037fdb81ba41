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

from factory.envs import pusht_geometry as geo

KP, KV = 100.0, 20.0  # gym-pusht's PD gains
DT = 0.01  # physics substep (s)
SUBSTEPS = 10  # substeps per 10 Hz env step


def pd_step(pos: np.ndarray, vel: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The agent's position and velocity after one env step towards ``target``.

    The agent is kinematic, so its motion does not depend on the block.
    """
    pos = np.array(pos, dtype=np.float64)
    vel = np.array(vel, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    for _ in range(SUBSTEPS):
        vel = vel + (KP * (target - pos) - KV * vel) * DT
        pos = pos + vel * DT
    return pos, vel


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
    """The PushT scene in pymunk, reset from (agent xy, agent velocity, block pose)."""

    def __init__(self) -> None:
        space = pymunk.Space()
        space.gravity = (0.0, 0.0)
        space.damping = 0.0
        walls = [
            ((5, 506), (5, 5)),
            ((5, 5), (506, 5)),
            ((506, 5), (506, 506)),
            ((5, 506), (506, 506)),
        ]
        space.add(*[pymunk.Segment(space.static_body, a, b, 2) for a, b in walls])
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
        speeds, travel = _push_profile(float(length), 9)
        idx = np.minimum(np.searchsorted(travel, reach), len(travel) - 1)
        self.agent.position = (float(start[0]), float(start[1]))
        dx, dy = float(direction[0]), float(direction[1])
        agent, block, space = self.agent, self.block, self.space
        out = np.empty((len(idx), 3))
        k = 0
        for i, speed in enumerate(speeds[: int(idx[-1]) + 1]):
            agent.velocity = (speed * dx, speed * dy)
            space.step(DT)
            while k < len(idx) and idx[k] == i:
                bp = block.position
                out[k] = (bp.x, bp.y, block.angle)
                k += 1
        return out


@functools.lru_cache(maxsize=64)
def _push_profile(length: float, max_steps: int) -> tuple[list[float], np.ndarray]:
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
    return speeds, np.asarray(travel)
