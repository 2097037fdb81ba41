"""Contact-rich exploratory play, like a person's unscripted play data.

The action (the agent's target) is a smooth cursor: it chases a goal point with a speed
limit and a low-pass on its velocity, plus a little smooth noise, so it never jumps. Goals
come from a small state machine:

- ``approach``: walk (around the block if needed) to a point just off a random spot on the
  T's outline, usually one whose push sends the block towards a random spot of the board
  (so the block roams the board instead of piling up at a wall);
- ``push``: drive through that spot along the surface normal for a random length;
- ``wander``: now and then, free motion to a random point.

After a push it often keeps going from a nearby spot of the same outline, as people do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from factory.envs import pusht_geometry as geo
from factory.generators.base import agent_and_block, board_clip, params_dict
from factory.generators.cursor import SmoothCursor
from factory.generators.push_router import Contact, Router, make_contacts
from factory.world import Observation

R = geo.AGENT_RADIUS


@dataclass(frozen=True)
class PlayParams:
    """Knobs of the play generator (pixels, env steps, probabilities)."""

    max_speed: float = 40.0  # px/step the cursor may move while travelling
    push_speed_min: float = 5.0  # px/step of the cursor while pushing
    push_speed_max: float = 13.0
    push_len_min: float = 40.0  # px driven past first touch
    push_len_max: float = 140.0
    smoothing: float = 0.5  # low-pass on the cursor velocity (0: none)
    noise: float = 1.5  # px/step of smooth cursor noise
    standoff: float = 6.0  # px off the outline where a push starts
    wander_prob: float = 0.12  # chance that the next segment is free motion
    follow_prob: float = 0.6  # chance to continue from a nearby spot after a push
    aim_prob: float = 0.75  # chance to pick a spot that pushes towards a random target
    margin: float = 20.0  # the cursor stays in [margin, 512 - margin]^2
    max_segment_steps: int = 30  # a segment is abandoned after this many steps


class PlayGenerator:
    """Smooth, contact-rich random play."""

    name = "play"

    def __init__(self, params: PlayParams | None = None) -> None:
        self.p = params or PlayParams()
        self.contacts = make_contacts(5.0)
        self._rng = np.random.default_rng(0)
        self._cursor = SmoothCursor()
        self._last_contact: int | None = None
        self._new_segment_state()

    def params(self) -> dict[str, Any]:
        return params_dict(self.p)

    def _new_segment_state(self) -> None:
        self._mode = "idle"
        self._contact: int | None = None
        self._path: list[np.ndarray] = []
        self._goal: np.ndarray = np.zeros(2)
        self._speed = self.p.max_speed
        self._steps = 0

    def reset(self, seed: int, obs: Observation) -> None:
        self._rng = np.random.default_rng(seed)
        agent, _ = agent_and_block(obs)
        self._cursor.reset(agent)
        self._last_contact = None
        self._new_segment_state()

    def act(self, obs: Observation) -> np.ndarray:
        agent, pose = agent_and_block(obs)
        goal = self._segment_goal(agent, pose)
        p = self.p
        self._cursor.move(goal, self._speed, p.smoothing, p.noise, p.margin, self._rng)
        return board_clip(self._cursor.pos, self.p.margin).astype(np.float32)

    # -- segments -------------------------------------------------------------------------
    def _segment_goal(self, agent: np.ndarray, pose: np.ndarray) -> np.ndarray:
        self._steps += 1
        if self._mode == "idle" or self._steps > self.p.max_segment_steps:
            self._start_segment(agent, pose)
        if self._mode == "approach":
            assert self._contact is not None
            point, normal = self._world_contact(self.contacts[self._contact], pose)
            start = point + normal * (R + self.p.standoff)
            while self._path and np.linalg.norm(self._cursor.pos - self._path[0]) < 15.0:
                self._path.pop(0)
            if self._path:
                return self._path[0]
            if (
                np.linalg.norm(self._cursor.pos - start) < 8.0
                and np.linalg.norm(agent - start) < 25
            ):
                self._start_push(point, normal)
            return start
        if np.linalg.norm(self._cursor.pos - self._goal) < 2.0:
            self._mode = "idle"
        return self._goal

    def _start_segment(self, agent: np.ndarray, pose: np.ndarray) -> None:
        rng = self._rng
        self._new_segment_state()
        if rng.random() < self.p.wander_prob:
            self._mode = "wander"
            lo, hi = self.p.margin + 20.0, geo.BOARD_SIZE - self.p.margin - 20.0
            self._goal = rng.uniform(lo, hi, size=2)
            self._speed = float(rng.uniform(0.5, 1.0) * self.p.max_speed)
            return
        self._mode = "approach"
        self._contact = self._pick_contact(pose)
        point, normal = self._world_contact(self.contacts[self._contact], pose)
        start = point + normal * (R + self.p.standoff)
        router = Router(pose, R + 4.0)
        self._path = router.route(self._cursor.pos, start, point, normal)[:-1]

    def _pick_contact(self, pose: np.ndarray) -> int:
        rng = self._rng
        n = len(self.contacts)
        last = self._last_contact
        if last is not None and rng.random() < self.p.follow_prob:
            near = [
                i
                for i, c in enumerate(self.contacts)
                if np.linalg.norm(c.point - self.contacts[last].point) < 25.0
            ]
            return int(rng.choice(near))
        if rng.random() >= self.p.aim_prob:
            return int(rng.integers(n))
        aim = rng.uniform(120.0, geo.BOARD_SIZE - 120.0, size=2)
        towards = aim - geo.cog_position(pose)
        towards /= max(float(np.linalg.norm(towards)), 1e-6)
        options = rng.choice(n, size=8, replace=False)
        rot = geo.rotation(pose[2])
        scores = [float(-(rot @ self.contacts[i].normal) @ towards) for i in options]
        return int(options[int(np.argmax(scores))])

    def _start_push(self, point: np.ndarray, normal: np.ndarray) -> None:
        rng = self._rng
        length = rng.uniform(self.p.push_len_min, self.p.push_len_max)
        self._mode = "push"
        self._goal = board_clip(point + normal * (R - length), self.p.margin)
        self._speed = float(rng.uniform(self.p.push_speed_min, self.p.push_speed_max))
        self._last_contact = self._contact
        self._steps = 0

    @staticmethod
    def _world_contact(contact: Contact, pose: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return geo.to_world(contact.point, pose), geo.rotation(pose[2]) @ contact.normal
