"""A scripted generator (play, expert, replay, or a policy) driven as a virtual device.

It needs no operator: after each reset it starts an episode at once, and the node stops
it after ``--steps`` frames (a replay stops when its stored actions run out). It is what
demos and soak tests run with no hardware.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from factory.generators import ActionGenerator, make_generator
from factory.world import Observation, WorldSpec
from teleop.sources.base import Action, Command, DeviceError, InitialCondition


class ScriptedSource:
    """An :class:`~teleop.sources.base.ActionSource` over an action generator.

    ``generator`` is a registry name (``play``, ``expert``, ``replay``) with ``params``, or
    ``policy``, any :class:`~factory.generators.ActionGenerator` instance (a policy).
    ``replay`` replays the stored actions of each episode's initial condition.
    """

    device = "scripted"
    needs_operator = False

    def __init__(
        self,
        generator: str = "play",
        params: dict[str, Any] | None = None,
        policy: ActionGenerator | None = None,
    ) -> None:
        self.generator_name = policy.name if policy is not None else generator
        self.name = self.generator_name
        self._params = dict(params or {})
        self._policy = policy
        if policy is None and generator != "replay":
            self._policy = make_generator(generator, **self._params)
        self._active: ActionGenerator | None = None
        self._limit: int | None = None
        self._acted = 0

    def params(self) -> dict[str, Any]:
        if self._active is not None:
            return dict(self._active.params())
        return dict(self._policy.params()) if self._policy is not None else {}

    def open(self, spec: WorldSpec) -> None:
        pass

    def poll(self) -> list[Command]:
        if self._active is None:
            return [Command.START]
        if self._limit is not None and self._acted >= self._limit:
            return [Command.TOGGLE]  # the replay ran out: stop and save
        return []

    def begin(self, obs: Observation, initial: InitialCondition) -> None:
        if self.generator_name == "replay":
            if initial.actions is None:
                raise DeviceError(
                    "--generator replay replays stored episodes: pass --reset-from STORE"
                )
            config = initial.config if initial.config is not None else np.zeros(0)
            self._active = make_generator("replay", actions=initial.actions, config=config)
            self._limit = len(initial.actions)
        else:
            assert self._policy is not None
            self._active = self._policy
            self._limit = None
        self._active.reset(initial.seed, obs)
        self._acted = 0

    def act(self, obs: Observation, dt: float) -> Action:
        if self._active is None:
            raise DeviceError("scripted source: act() before begin()")
        stamp = time.perf_counter()
        value = np.asarray(self._active.act(obs), dtype=np.float32)
        self._acted += 1
        return Action(value=value, stamp=stamp)

    def end(self) -> None:
        self._active = None
        self._limit = None

    def close(self) -> None:
        pass
