"""The scripted pile-sweeping expert: closed loop, from ``obs.state`` and ``obs.task_state``.

Repeatedly (a small state machine):

- ``plan``: pick the disc outside the goal that is cheapest to bring in: the cost of the
  path around the other discs to the spot behind it (on the far side from the goal
  centre), plus its distance to the goal centre; plan that path (:mod:`pile_planner`);
- ``approach``: follow the path (re-planned every few steps), its end tracking the spot;
- ``push``: drive through the disc towards the goal centre, re-aimed every step (the
  target leads the contact point along the push line and cancels the sideways error), until
  the disc is ``depth`` px inside the goal, or it slips off to the side;
- ``retreat``: back off along the push line for a few steps, then plan again.

Discs in front of the pushed one are swept along with it. Nothing here reads the simulator,
so the expert also runs inside a world model on a probe's noisy estimate of the discs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from factory.envs import pile_geometry as geo
from factory.generators.base import params_dict
from factory.generators.pile_planner import GridPlanner
from factory.world import Observation

CONTACT = geo.AGENT_RADIUS + geo.DISC_RADIUS  # centre distance of agent and disc in contact


@dataclass(frozen=True)
class PileExpertParams:
    """Knobs of the pile expert (pixels, env steps)."""

    standoff: float = 6.0  # px behind the contact point where an approach ends
    push_lead: float = 70.0  # px the target leads the contact point while pushing
    travel_lead: float = 100.0  # px the target leads the agent while travelling
    lateral_gain: float = 1.0  # how much of the sideways error one push step cancels
    max_lateral: float = 12.0  # px sideways off the push line before a push is given up
    depth: float = 15.0  # px inside the goal's edge where a push ends
    push_weight: float = 1.0  # weight of a disc's distance to the goal in its cost
    sweep_bonus: float = 1.0  # cost divided by 1 + this times the discs a push sweeps along
    arrive: float = 8.0  # px from the spot behind a disc where a push starts
    retreat_steps: int = 1
    replan_every: int = 5  # steps between re-plans of an approach
    max_approach_steps: int = 40
    max_push_steps: int = 40
    cell: float = 12.0  # planner grid (px)
    inflate: float = 30.0  # px around a disc centre that paths avoid
    penalty: float = 20.0  # cost factor of a path through crowded cells


def discs_of_obs(obs: Observation) -> tuple[np.ndarray, np.ndarray]:
    """The agent xy (2,) and disc centres (N, 2) of an observation, as float64."""
    return np.asarray(obs.state, np.float64)[:2], geo.discs_of(np.asarray(obs.task_state))


def push_line(disc: np.ndarray, standoff: float) -> tuple[np.ndarray, np.ndarray]:
    """The push direction (2,) that takes ``disc`` (2,) to the goal centre and the spot (2,)
    behind it where a push starts; a spot off the board is clipped onto it (and the
    direction turned to match)."""
    delta = geo.GOAL_CENTER - disc
    u = delta / max(float(np.linalg.norm(delta)), 1e-9)
    spot = np.clip(disc - u * (CONTACT + standoff), 2.0, geo.BOARD_SIZE - 2.0)
    back = disc - spot
    return back / max(float(np.linalg.norm(back)), 1e-9), spot


def _swept(discs: np.ndarray, dirs: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """How many of the other discs (N, 2) lie in the corridor that pushing each disc along
    its direction (N, 2) for ``reach`` (N,) px sweeps (within a contact distance of the
    line, ahead of the disc) -> (N,) int."""
    rel = discs[None, :, :] - discs[:, None, :]  # (N, N, 2): disc j seen from disc i
    ahead = np.einsum("ijk,ik->ij", rel, dirs)
    side = np.abs(rel[..., 0] * dirs[:, None, 1] - rel[..., 1] * dirs[:, None, 0])
    hit = (ahead > 0) & (ahead < reach[:, None]) & (side < CONTACT)
    return np.asarray(hit.sum(axis=1))


def _lead(agent: np.ndarray, point: np.ndarray, lead: float) -> np.ndarray:
    """A target towards ``point`` at most ``lead`` px from the agent."""
    delta = point - agent
    dist = float(np.linalg.norm(delta))
    return point if dist <= lead else agent + delta * (lead / dist)


class PileExpertGenerator:
    """Sweeps the discs into the goal one push at a time."""

    name = "pile_expert"

    def __init__(self, params: PileExpertParams | None = None) -> None:
        self.p = params or PileExpertParams()
        self.planner = GridPlanner(self.p.cell, self.p.inflate, self.p.penalty)
        self._start("plan")

    def params(self) -> dict[str, Any]:
        return params_dict(self.p)

    def _start(self, mode: str, disc: int = -1) -> None:
        self._mode, self._disc, self._steps = mode, disc, 0
        self._path: np.ndarray = np.zeros((0, 2))
        self._dir: np.ndarray = np.zeros(2)

    def reset(self, seed: int, obs: Observation) -> None:
        self._start("plan")

    def act(self, obs: Observation) -> np.ndarray:
        agent, discs = discs_of_obs(obs)
        target = None
        for _ in range(3):  # a mode that ends at once hands over within the same step
            self._steps += 1
            target = getattr(self, f"_{self._mode}")(agent, discs)
            if target is not None:
                break
        if target is None:
            target = agent
        return np.clip(target, 0.0, geo.BOARD_SIZE).astype(np.float32)

    # -- modes: each returns a target, or None after switching mode --------------------------
    def _plan(self, agent: np.ndarray, discs: np.ndarray) -> np.ndarray | None:
        outside = np.nonzero(~geo.inside_goal(discs))[0]
        if len(outside) == 0:
            self._start("plan")
            return agent  # all in: hold still
        crowded = self.planner.crowded(discs)
        field = self.planner.field(agent, crowded)
        lines = [push_line(discs[i], self.p.standoff) for i in outside]
        spots = np.stack([spot for _, spot in lines])
        dist = np.linalg.norm(discs[outside] - geo.GOAL_CENTER, axis=1)
        cost = field.at(spots) + self.p.push_weight * dist
        swept = _swept(discs[outside], np.stack([u for u, _ in lines]), dist)
        best = int(np.argmin(cost / (1.0 + self.p.sweep_bonus * swept)))
        self._start("approach", int(outside[best]))
        self._path = self.planner.path(field, spots[best])
        return None

    def _approach(self, agent: np.ndarray, discs: np.ndarray) -> np.ndarray | None:
        p = self.p
        disc = discs[self._disc]
        if geo.inside_goal(disc) or self._steps > p.max_approach_steps:
            self._start("plan")
            return None
        _, spot = push_line(disc, p.standoff)
        if np.linalg.norm(agent - spot) < p.arrive:
            self._start("push", self._disc)
            return None
        crowded = self.planner.crowded(discs)
        if self._steps % p.replan_every == 0:
            self._path = self.planner.path(self.planner.field(agent, crowded), spot)
        self._path[-1] = spot
        while len(self._path) > 1 and np.linalg.norm(self._path[0] - agent) < 1.5 * p.cell:
            self._path = self._path[1:]
        carrot = self.planner.carrot(self._path, agent, p.travel_lead, crowded)
        return _lead(agent, carrot, p.travel_lead)

    def _push(self, agent: np.ndarray, discs: np.ndarray) -> np.ndarray | None:
        p = self.p
        disc = discs[self._disc]
        u, _ = push_line(disc, p.standoff)
        self._dir = u
        contact = disc - u * CONTACT
        rel = agent - contact
        lateral = rel - float(rel @ u) * u
        deep = np.max(np.abs(disc - geo.GOAL_CENTER)) <= geo.GOAL_HALF - p.depth
        slipped = float(np.linalg.norm(lateral)) > p.max_lateral
        if deep or slipped or self._steps > p.max_push_steps:
            self._start("retreat", self._disc)
            self._dir = u
            return None
        return contact + u * p.push_lead - p.lateral_gain * lateral

    def _retreat(self, agent: np.ndarray, discs: np.ndarray) -> np.ndarray | None:
        if self._steps > self.p.retreat_steps:
            self._start("plan")
            return None
        return agent - self._dir * self.p.push_lead
