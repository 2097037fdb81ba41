"""Contact-rich exploratory play in the pile world, like a person's unscripted play data.

The action (the agent's target) is a smooth cursor: it chases a goal point with a speed
limit and a low-pass on its velocity, plus a little smooth noise, so it never jumps. Goals
come from a small state machine:

- ``approach``: walk straight to the spot behind a disc (a random one, or one near the
  last push) on the far side from a random push direction, mostly one that sends it
  towards a random spot of the board (so the discs roam instead of piling at a wall);
- ``push``: drive through that disc along the direction for a random length, sweeping
  whatever lies in front;
- ``wander``: now and then, free motion to a random point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from factory.envs import pile_geometry as geo
from factory.generators.base import board_clip, params_dict
from factory.generators.cursor import SmoothCursor
from factory.generators.pile_expert import CONTACT, discs_of_obs
from factory.world import Observation


@dataclass(frozen=True)
class PilePlayParams:
    """Knobs of the pile play generator (pixels, env steps, probabilities)."""

    max_speed: float = 40.0  # px/step the cursor may move while travelling
    push_speed_min: float = 6.0  # px/step of the cursor while pushing
    push_speed_max: float = 18.0
    push_len_min: float = 40.0  # px driven past first touch
    push_len_max: float = 180.0
    smoothing: float = 0.5  # low-pass on the cursor velocity (0: none)
    noise: float = 1.5  # px/step of smooth cursor noise
    standoff: float = 6.0  # px behind the contact point where a push starts
    wander_prob: float = 0.1  # chance that the next segment is free motion
    follow_prob: float = 0.5  # chance to pick a disc near the last push
    aim_prob: float = 0.75  # chance to push towards a random spot (else any direction)
    margin: float = 15.0  # the cursor stays in [margin, 512 - margin]^2
    max_segment_steps: int = 30  # a segment is abandoned after this many steps


def _around(cursor: np.ndarray, disc: np.ndarray, spot: np.ndarray) -> np.ndarray:
    """``spot`` (2,), or a waypoint beside ``disc`` (2,) when the straight way from the
    cursor (2,) to the spot would run into the disc."""
    seg = spot - cursor
    length = float(np.linalg.norm(seg))
    if length < 1e-6:
        return spot
    u = seg / length
    t = float((disc - cursor) @ u)
    normal = np.array([-u[1], u[0]])
    side = float((disc - cursor) @ normal)
    if not (0.0 < t < length) or abs(side) >= CONTACT + 4.0:
        return spot
    return disc - np.sign(side or 1.0) * normal * (CONTACT + 15.0)


class PilePlayGenerator:
    """Smooth, contact-rich random play with the pile."""

    name = "pile_play"

    def __init__(self, params: PilePlayParams | None = None) -> None:
        self.p = params or PilePlayParams()
        self._rng = np.random.default_rng(0)
        self._cursor = SmoothCursor()
        self._last: np.ndarray | None = None  # where the last push began
        self._new_segment()

    def params(self) -> dict[str, Any]:
        return params_dict(self.p)

    def _new_segment(self) -> None:
        self._mode = "idle"
        self._disc = -1
        self._dir: np.ndarray = np.zeros(2)
        self._goal: np.ndarray = np.zeros(2)
        self._speed = self.p.max_speed
        self._steps = 0

    def reset(self, seed: int, obs: Observation) -> None:
        self._rng = np.random.default_rng(seed)
        agent, _ = discs_of_obs(obs)
        self._cursor.reset(agent)
        self._last = None
        self._new_segment()

    def act(self, obs: Observation) -> np.ndarray:
        agent, discs = discs_of_obs(obs)
        self._steps += 1
        if self._mode == "idle" or self._steps > self.p.max_segment_steps:
            self._start_segment(discs)
        if self._mode == "approach":
            spot = discs[self._disc] - self._dir * (CONTACT + self.p.standoff)
            near = (
                np.linalg.norm(self._cursor.pos - spot) < 8.0 and np.linalg.norm(agent - spot) < 20
            )
            if near:
                self._start_push(discs[self._disc])
            goal = _around(self._cursor.pos, discs[self._disc], spot)
        else:
            goal = self._goal
            if np.linalg.norm(self._cursor.pos - goal) < 2.0:
                self._mode = "idle"
        p = self.p
        self._cursor.move(goal, self._speed, p.smoothing, p.noise, p.margin, self._rng)
        return board_clip(self._cursor.pos, self.p.margin).astype(np.float32)

    # -- segments -------------------------------------------------------------------------
    def _start_segment(self, discs: np.ndarray) -> None:
        rng = self._rng
        self._new_segment()
        if rng.random() < self.p.wander_prob:
            self._mode = "wander"
            lo, hi = self.p.margin + 20.0, geo.BOARD_SIZE - self.p.margin - 20.0
            self._goal = rng.uniform(lo, hi, size=2)
            self._speed = float(rng.uniform(0.5, 1.0) * self.p.max_speed)
            return
        self._mode = "approach"
        self._disc = self._pick_disc(discs)
        disc = discs[self._disc]
        if rng.random() < self.p.aim_prob:
            towards = rng.uniform(100.0, geo.BOARD_SIZE - 100.0, size=2) - disc
        else:
            angle = rng.uniform(-np.pi, np.pi)
            towards = np.array([np.cos(angle), np.sin(angle)])
        self._dir = towards / max(float(np.linalg.norm(towards)), 1e-6)

    def _pick_disc(self, discs: np.ndarray) -> int:
        rng = self._rng
        if self._last is not None and rng.random() < self.p.follow_prob:
            dist = np.linalg.norm(discs - self._last, axis=1)
            near = np.nonzero(dist < 60.0)[0]
            if len(near):
                return int(rng.choice(near))
        return int(rng.integers(len(discs)))

    def _start_push(self, disc: np.ndarray) -> None:
        rng = self._rng
        length = rng.uniform(self.p.push_len_min, self.p.push_len_max)
        self._mode = "push"
        self._goal = board_clip(disc + self._dir * (length - CONTACT), self.p.margin)
        self._speed = float(rng.uniform(self.p.push_speed_min, self.p.push_speed_max))
        self._last = disc.copy()
        self._steps = 0
