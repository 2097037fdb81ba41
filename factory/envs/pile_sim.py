"""The pile-sweeping physics in plain pymunk: a pusher disk and a pile of small discs.

The board is PushT's: 512 x 512 px, walled, controlled at 10 Hz with 10 physics substeps of
0.01 s. The agent is gym-pusht's: a kinematic disk (radius 15) whose action is an absolute
target position, driven by the same PD law (``v += (kp (target - x) - kv v) dt`` every
substep, kp = 100, kv = 20). The discs (radius 10, mass 1) are dynamic; the table's
friction is a strong velocity damping (a disc keeps ``DAMPING ** t`` of its speed after
``t`` seconds), and a disc slower than ``REST_SPEED`` after a control step is stopped, so
an unpushed disc is exactly still. The walls are thick static boxes (their inner faces at 5
and 507 px), so a disc squeezed by the kinematic agent cannot tunnel out of the board.

Every reset builds a fresh space, so the same seed (or configuration) and the same actions
give bit-identical episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pymunk

from factory.envs import pile_geometry as geo
from factory.errors import FactoryError

KP, KV = 100.0, 20.0  # gym-pusht's PD gains
DT = 0.01  # physics substep (s)
SUBSTEPS = 10  # substeps per 10 Hz control step
DAMPING = 0.002  # fraction of a free disc's speed left after one second
REST_SPEED = 3.0  # px/s: a disc slower than this after a control step is stopped
DISC_MASS = 1.0
DISC_FRICTION = 0.3
WALL_THICKNESS = 200.0
N_DISCS_RANGE = (20, 40)


@dataclass(frozen=True)
class PileParams:
    """Knobs of the pile scene: ``n_discs`` in [20, 40]."""

    n_discs: int = 30

    def __post_init__(self) -> None:
        lo, hi = N_DISCS_RANGE
        if not (isinstance(self.n_discs, int | np.integer) and lo <= self.n_discs <= hi):
            raise FactoryError(f"n_discs must be an integer in [{lo}, {hi}], got {self.n_discs!r}")

    @property
    def config_dim(self) -> int:
        """Agent xy plus every disc's xy."""
        return 2 + 2 * int(self.n_discs)


def pile_layout(seed: int, n_discs: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded initial scene: (agent xy (2,), disc centres (N, 2)).

    The discs form a loose, non-overlapping cluster (a Gaussian of spread about
    ``7 sqrt(N)`` px) whose centre lies in a ring around the goal, every disc fully
    outside the goal and off the walls; the agent starts anywhere clear of the discs.
    """
    rng = np.random.default_rng(seed)
    r = geo.DISC_RADIUS
    sigma = 7.0 * np.sqrt(n_discs)
    lo, hi = geo.WALL + r + 15.0, geo.BOARD_SIZE - geo.WALL - r - 15.0
    while True:
        centre = rng.uniform(lo + 1.5 * sigma, hi - 1.5 * sigma, size=2)
        if np.max(np.abs(centre - geo.GOAL_CENTER)) >= geo.GOAL_HALF + sigma:
            break
    discs: np.ndarray = np.empty((0, 2))
    fails = 0
    while len(discs) < n_discs:
        p = centre + rng.normal(0.0, sigma, size=2)
        ok = bool(np.all((p >= lo) & (p <= hi)))
        ok = ok and float(np.max(np.abs(p - geo.GOAL_CENTER))) > geo.GOAL_HALF + r
        if ok and len(discs):
            ok = float(np.min(np.linalg.norm(discs - p, axis=1))) >= 2 * r + 1.0
        if ok:
            discs = np.vstack([discs, p])
        else:
            fails += 1
            if fails % 200 == 0:
                sigma *= 1.1
    while True:
        agent = rng.uniform(geo.WALL + 40.0, geo.BOARD_SIZE - geo.WALL - 40.0, size=2)
        if float(np.min(geo.agent_disc_gaps(agent, discs))) >= 10.0:
            return agent, discs


def _add_walls(space: pymunk.Space) -> None:
    w, t, b = geo.WALL, WALL_THICKNESS, geo.BOARD_SIZE
    boxes = [
        (-t, -t, w, b + t),  # left: x in [-t, w]
        (b - w, -t, b + t, b + t),  # right
        (-t, -t, b + t, w),  # top (y small)
        (-t, b - w, b + t, b + t),  # bottom
    ]
    for x0, y0, x1, y1 in boxes:
        verts = [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]
        shape = pymunk.Poly(space.static_body, verts)
        shape.friction = DISC_FRICTION
        space.add(shape)


class PileSim:
    """One pile scene: reset from a seed or an explicit state, stepped with targets."""

    def __init__(self, params: PileParams | None = None) -> None:
        self.params = params or PileParams()
        self._build(np.full(2, geo.BOARD_SIZE / 2), pile_layout(0, self.params.n_discs)[1])

    def _build(self, agent_xy: np.ndarray, discs: np.ndarray) -> None:
        space = pymunk.Space()
        space.gravity = (0.0, 0.0)
        space.damping = DAMPING
        _add_walls(space)
        agent = pymunk.Body(body_type=pymunk.Body.KINEMATIC)
        agent.position = (float(agent_xy[0]), float(agent_xy[1]))
        space.add(agent, pymunk.Circle(agent, geo.AGENT_RADIUS))
        moment = pymunk.moment_for_circle(DISC_MASS, 0.0, geo.DISC_RADIUS)
        bodies = []
        for x, y in np.asarray(discs, dtype=np.float64).tolist():
            body = pymunk.Body(DISC_MASS, moment)
            body.position = (x, y)
            shape = pymunk.Circle(body, geo.DISC_RADIUS)
            shape.friction = DISC_FRICTION
            space.add(body, shape)
            bodies.append(body)
        self.space, self.agent, self.discs = space, agent, bodies

    def reset(self, seed: int) -> None:
        """A seeded scene (:func:`pile_layout`), everything at rest."""
        self._build(*pile_layout(int(seed), self.params.n_discs))

    def reset_to(self, agent_xy: np.ndarray, discs: np.ndarray) -> None:
        """Exactly the given scene: agent xy (2,), disc centres (N, 2), at rest."""
        discs = np.asarray(discs, dtype=np.float64)
        if discs.shape != (self.params.n_discs, 2):
            raise FactoryError(f"need {self.params.n_discs} disc centres, got shape {discs.shape}")
        self._build(np.asarray(agent_xy, dtype=np.float64), discs)

    def step(self, target: np.ndarray) -> None:
        """One 10 Hz control step (10 substeps) with the PD pulling the agent to ``target``."""
        tx, ty = float(target[0]), float(target[1])
        agent, space = self.agent, self.space
        for _ in range(SUBSTEPS):
            pos, vel = agent.position, agent.velocity
            agent.velocity = (
                vel.x + (KP * (tx - pos.x) - KV * vel.x) * DT,
                vel.y + (KP * (ty - pos.y) - KV * vel.y) * DT,
            )
            space.step(DT)
        for body in self.discs:
            v = body.velocity
            if v.x * v.x + v.y * v.y < REST_SPEED * REST_SPEED:
                body.velocity = (0.0, 0.0)
                body.angular_velocity = 0.0

    def agent_xy(self) -> np.ndarray:
        """The agent centre (2,) float64."""
        p = self.agent.position
        return np.array([p.x, p.y])

    def agent_velocity(self) -> np.ndarray:
        """The agent velocity (2,) float64, px/s."""
        v = self.agent.velocity
        return np.array([v.x, v.y])

    def disc_xy(self) -> np.ndarray:
        """The disc centres (N, 2) float64."""
        return np.array([tuple(b.position) for b in self.discs], dtype=np.float64)
