"""A scripted PushT expert: planned frictionless pushes, replanned after every stroke.

It reads only the block pose (``obs.task_state``) and the agent xy (``obs.state``). Each
stroke is chosen by :class:`~factory.generators.push_planner.PushPlanner`; the expert
walks the stroke's path around the block, settles at its start, pushes to its end, and then
plans again. If the block moves while the agent is only repositioning (an accidental bump),
it replans at once. After success it holds still.

The block pose may be a noisy estimate (a learned probe inside the world model), so the
expert filters it over the frames in which the block should be still and counts a move only
when it exceeds ``replan_sigmas`` times the estimate's noise, learnt online
(:class:`~factory.generators.pose_filter.PoseFilter`); planning itself is cached per block
pose (:class:`~factory.generators.push_planner.PushPlanner`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from factory.envs import pusht_geometry as geo
from factory.generators.base import agent_and_block, board_clip, params_dict
from factory.generators.pose_filter import PoseFilter
from factory.generators.push_planner import Push, PushPlanner
from factory.generators.pusht_sim import pd_step
from factory.world import Observation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExpertParams:
    """Knobs of the scripted expert (pixels and env steps)."""

    contact_spacing: float = 8.0  # px between candidate contact points on the outline
    standoff: float = 8.0  # px between disk and block where a stroke starts
    clearance: float = 6.0  # px kept between disk and block while repositioning
    overhead: float = 2.0  # env steps added to every stroke when rating it
    min_gain: float = 0.005  # smallest potential drop that counts as progress
    wall_weight: float = 0.5  # weight of the wall-crowding penalty in the potential
    wall_reach: float = 40.0  # px from a wall where crowding starts to count
    max_depth: float = 130.0  # px: the deepest stroke considered
    waypoint_radius: float = 14.0  # px: switch to the next waypoint this close
    settle_tol: float = 2.0  # px: how close to the stroke start before pushing
    settle_speed: float = 20.0  # px/s: ... and how slow (the agent's velocity, not observed)
    end_tol: float = 0.7  # px: a stroke ends this close to its end point
    max_stroke_steps: int = 12  # steps before a stroke is abandoned
    max_travel_steps: int = 30  # steps of repositioning before replanning
    replan_shift: float = 2.0  # px / (deg): the least unplanned block motion that replans
    replan_sigmas: float = 3.0  # ... and at least this many std of the pose estimate's noise
    filter_frames: int = 8  # the pose estimate is averaged over up to this many still frames
    hold_gap: float = 6.0  # px kept from the block while holding after success
    stall_steps: int = 40  # steps without a 2% error drop before a random push
    jitter: float = 0.0  # noise on stroke rates (diversity across seeds); ~0.01 is mild


class ExpertGenerator:
    """Closed-loop scripted expert for PushT."""

    name = "expert"

    def __init__(self, params: ExpertParams | None = None) -> None:
        self.p = params or ExpertParams()
        self.planner = PushPlanner(
            spacing=self.p.contact_spacing,
            standoff=self.p.standoff,
            clearance=self.p.clearance,
            max_depth=self.p.max_depth,
            overhead=self.p.overhead,
            min_gain=self.p.min_gain,
            wall_weight=self.p.wall_weight,
            wall_reach=self.p.wall_reach,
        )
        self._filter = PoseFilter(self.p.filter_frames, self.p.replan_sigmas, self.p.replan_shift)
        self._rng = np.random.default_rng(0)
        self._reset_state()

    def params(self) -> dict[str, Any]:
        return params_dict(self.p)

    def _reset_state(self) -> None:
        self._push: Push | None = None
        self._phase = "idle"
        self._plan_pose = np.zeros(3)
        self._plan_count = 1
        self._filter.reset()
        self._stroke_steps = 0
        self._travel_steps = 0
        self._vel = np.zeros(2)
        self._prev_agent: np.ndarray | None = None
        self._prev_action: np.ndarray | None = None
        self._hold: np.ndarray | None = None
        self._best_err = np.inf
        self._stall = 0
        self._settling = False

    def reset(self, seed: int, obs: Observation) -> None:
        self._rng = np.random.default_rng(seed)
        self._reset_state()

    def act(self, obs: Observation) -> np.ndarray:
        agent, raw = agent_and_block(obs)
        pose = self._filter.update(raw, still=self._phase != "push")
        self._track_velocity(agent)
        self._stall += 1
        self._settling = False
        if obs.success:
            target = self._hold_target(agent, pose)
        else:
            self._hold = None
            target = self._next_target(agent, pose)
        action = board_clip(target).astype(np.float32)
        self._prev_agent, self._prev_action = agent, action.astype(np.float64)
        return action

    def needs_precision(self) -> bool:
        """Whether the last action is the final approach to a stroke's start, where the
        expert waits for the agent to come to rest before it pushes: noise injection
        (:mod:`~factory.generators.dart`) leaves that step alone, since noise there only
        makes the expert wait (its demos then hover instead of push)."""
        return self._settling

    def executed(self, action: np.ndarray) -> None:
        """The action (2,) the world executed instead of the last one returned (under
        :mod:`~factory.generators.dart` noise): the velocity estimate's PD model uses it."""
        self._prev_action = np.asarray(action, np.float64).copy()

    def _hold_target(self, agent: np.ndarray, pose: np.ndarray) -> np.ndarray:
        """Hold still after success, a few pixels clear of the block so as not to nudge it."""
        self._push, self._phase = None, "idle"
        if self._hold is None:
            away = agent - geo.cog_position(pose)
            away /= max(float(np.linalg.norm(away)), 1e-6)
            gap = float(geo.distance_to_block(agent, pose)) - geo.AGENT_RADIUS
            self._hold = agent + away * max(0.0, self.p.hold_gap - gap)
        return self._hold

    def _track_velocity(self, agent: np.ndarray) -> None:
        """The agent's velocity, from the PD model of the last action (it is not observed)."""
        if self._prev_agent is None or self._prev_action is None:
            self._vel = np.zeros(2)
            return
        pos, vel = pd_step(self._prev_agent, self._vel, self._prev_action)
        if np.linalg.norm(pos - agent) > 5.0:  # the model disagrees: finite differences
            vel = (agent - self._prev_agent) * 10.0
        self._vel = vel

    def _next_target(self, agent: np.ndarray, pose: np.ndarray) -> np.ndarray:
        for _ in range(3):
            if self._push is None or self._moved_unexpectedly(pose):
                self._plan(agent, pose)
            push = self._push
            if push is None:
                return agent
            target = self._follow(push, agent)
            if target is not None:
                return target
            self._push = None  # stroke finished: plan the next one
        return agent

    def _moved_unexpectedly(self, pose: np.ndarray) -> bool:
        if self._phase != "travel":
            return False
        return self._filter.moved(pose, self._plan_pose, self._filter.count, self._plan_count)

    def _plan(self, agent: np.ndarray, pose: np.ndarray) -> None:
        err = geo.keypoint_error(pose)
        if err < 0.98 * self._best_err:
            self._best_err, self._stall = err, 0
        explore = self._stall > self.p.stall_steps
        if explore:
            self._stall = 0
        self._push = self.planner.plan(agent, pose, self._rng, self.p.jitter, explore)
        self._plan_pose = pose.copy()
        self._plan_count = self._filter.count
        self._phase = "travel"
        self._stroke_steps = 0
        self._travel_steps = 0
        if self._push is not None:
            self._push.path = list(self._push.path)
            log.debug(
                "push depth %.1f err %.2f -> %.2f gain %.3f",
                self._push.depth,
                geo.keypoint_error(pose),
                self._push.predicted_error,
                self._push.gain,
            )

    def _follow(self, push: Push, agent: np.ndarray) -> np.ndarray | None:
        """The target for this step, or None when the stroke is done."""
        if self._phase == "travel":
            self._travel_steps += 1
            if self._travel_steps > self.p.max_travel_steps:
                return None
            while len(push.path) > 1 and (
                np.linalg.norm(agent - push.path[0]) < self.p.waypoint_radius
            ):
                push.path.pop(0)
            if push.path:
                last = len(push.path) == 1
                settled = (
                    np.linalg.norm(agent - push.path[0]) < self.p.settle_tol
                    and np.linalg.norm(self._vel) < self.p.settle_speed
                )
                if not (last and settled):
                    near = np.linalg.norm(agent - push.path[0]) < self.p.waypoint_radius
                    self._settling = last and bool(near)
                    return push.path[0]
            self._phase = "push"
        self._stroke_steps += 1
        done = np.linalg.norm(agent - push.end) < self.p.end_tol and self._stroke_steps > 1
        if done or self._stroke_steps > self.p.max_stroke_steps:
            return None
        return push.end
