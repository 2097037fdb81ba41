"""A private copy of gym-pusht's physics that the scripted expert plans pushes with.

It rebuilds the scene (walls, kinematic agent disk under PD control, T block with its
centre of gravity off the origin, no friction, velocity damped to zero every substep) from
an observation alone: the agent xy, an agent velocity estimate and the block pose. It never
touches the env, so the expert also runs inside the world model.
"""

from __future__ import annotations

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


def pd_steps_to_reach(distance: float, tol: float = 1.0) -> float:
    """About how many env steps the PD needs to close ``distance`` to within ``tol``.

    Critically damped from rest: the remaining error is ``d (1 + x) exp(-x)`` after ``x``
    env steps (the natural frequency is 10/s and a step is 0.1 s).
    """
    ratio = tol / max(distance, tol)
    x = 0.0
    while (1.0 + x) * np.exp(-x) > ratio and x < 30.0:
        x += 0.25
    return x


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

    def push_trace(
        self, start: np.ndarray, direction: np.ndarray, length: float, max_steps: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Push from rest at ``start`` towards ``start + length * direction``.

        Returns the agent's travel along ``direction`` (N,) and the block pose (N, 3) after
        each substep, until the agent is within 0.5 px of the end or ``max_steps`` pass.
        """
        self.agent.position = (float(start[0]), float(start[1]))
        self.agent.velocity = (0.0, 0.0)
        end = start + length * direction
        target = (float(end[0]), float(end[1]))
        travel, poses = [], []
        dx, dy = float(direction[0]), float(direction[1])
        sx, sy = float(start[0]), float(start[1])
        block = self.block
        for _ in range(max_steps * SUBSTEPS):
            self.substep(target)
            pos = self.agent.position
            along = (pos.x - sx) * dx + (pos.y - sy) * dy
            bp = block.position
            travel.append(along)
            poses.append((bp.x, bp.y, block.angle))
            if along >= length - 0.5:
                break
        return np.asarray(travel), np.asarray(poses)
