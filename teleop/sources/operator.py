"""The event-driven operator source behind the keyboard, mouse and web devices.

It drains an :class:`~teleop.sources.events.EventBus` each tick: keys give commands
and (optionally) target motion, the pointer places the target, a gamepad stick moves it.
Which of these a device uses is its :class:`OperatorProfile`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from factory.world import Observation, WorldSpec
from teleop.sources.base import Action, Command, DeviceError, InitialCondition
from teleop.sources.events import (
    AxesEvent,
    ConnectionEvent,
    EventBus,
    InputEvent,
    KeyEvent,
    PointerEvent,
)
from teleop.sources.keyboard import KeyState
from teleop.sources.mapping import PlanarMapping, PlanarTarget, check_planar
from teleop.sources.mouse import PointerState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorProfile:
    """What a device's events do.

    keys_move: arrows/WASD move the target; pointer: ``"off"``, ``"hover"`` (the target
    follows the pointer) or ``"drag"`` (only while the primary button is held); gamepad: a
    stick moves the target; on_close: the command when the operator's window or last page
    goes away (``QUIT`` for a local window, ``LOST`` for a browser).
    """

    device: str
    keys_move: bool = True
    pointer: str = "off"
    gamepad: bool = False
    on_close: Command = Command.QUIT


class OperatorSource:
    """An :class:`~teleop.sources.base.ActionSource` fed by operator input events."""

    needs_operator = True

    def __init__(self, profile: OperatorProfile, bus: EventBus, mapping: PlanarMapping) -> None:
        if profile.pointer not in ("off", "hover", "drag"):
            raise DeviceError(f"pointer mode must be off, hover or drag, got {profile.pointer!r}")
        self.profile = profile
        self.device = profile.device
        self.name = profile.device
        self.bus = bus
        self.mapping = mapping
        self._keys = KeyState()
        self._pointer = PointerState(drag=profile.pointer == "drag")
        self._axes: np.ndarray = np.zeros(2)
        self._fresh: float | None = None  # receipt time of the newest motion input
        self._target: PlanarTarget | None = None

    def params(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self.mapping), **dataclasses.asdict(self.profile)}

    def open(self, spec: WorldSpec) -> None:
        low, high = check_planar(spec, self.device)
        self._target = PlanarTarget(low, high, self.mapping)

    def poll(self) -> list[Command]:
        commands: list[Command] = []
        for event in self.bus.drain():
            command = self._feed(event)
            if command is not None:
                commands.append(command)
        return commands

    def _feed(self, event: InputEvent) -> Command | None:
        if isinstance(event, KeyEvent):
            command = self._keys.feed(event)
            if command is None and self.profile.keys_move:
                self._fresh = event.t
            return command
        if isinstance(event, PointerEvent):
            if self.profile.pointer != "off" and self._pointer.feed(event):
                self._fresh = event.t
            return None
        if isinstance(event, AxesEvent):
            if self.profile.gamepad:
                self._axes = np.clip(np.array([event.x, event.y], np.float64), -1.0, 1.0)
                self._fresh = event.t
            return None
        if isinstance(event, ConnectionEvent) and not event.connected and event.clients == 0:
            self._keys.release_all()
            self._axes = np.zeros(2)
            log.warning("%s: the operator's input went away", self.device)
            return self.profile.on_close
        return None

    def begin(self, obs: Observation, initial: InitialCondition) -> None:
        self._require().reset(np.asarray(obs.state)[:2])
        self._pointer.take()  # a pointer position from before the episode does not count

    def act(self, obs: Observation, dt: float) -> Action:
        target = self._require()
        deflection = self._axes.copy()
        if self.profile.keys_move:
            deflection += self._keys.deflection()
        target.move(np.clip(deflection, -1.0, 1.0), dt)
        uv = self._pointer.take()
        if uv is not None:
            target.place(uv)
        stamp, self._fresh = self._fresh, None
        return Action(value=target.value, stamp=time.perf_counter() if stamp is None else stamp)

    def end(self) -> None:
        self._keys.release_all()

    def close(self) -> None:
        pass

    def _require(self) -> PlanarTarget:
        if self._target is None:
            raise DeviceError(f"{self.device}: open() the source before using it")
        return self._target


def keyboard_source(bus: EventBus, mapping: PlanarMapping) -> OperatorSource:
    """Arrows/WASD move the target, keys drive episodes (a local window)."""
    return OperatorSource(OperatorProfile(device="keyboard"), bus, mapping)


def mouse_source(bus: EventBus, mapping: PlanarMapping) -> OperatorSource:
    """The target follows the pointer over the frame; keys drive episodes (a local window)."""
    profile = OperatorProfile(device="mouse", keys_move=False, pointer="hover")
    return OperatorSource(profile, bus, mapping)


def web_source(bus: EventBus, mapping: PlanarMapping) -> OperatorSource:
    """A browser page: keys, pointer drag and a gamepad; a closed page drops the episode."""
    profile = OperatorProfile(
        device="web", keys_move=True, pointer="drag", gamepad=True, on_close=Command.LOST
    )
    return OperatorSource(profile, bus, mapping)
