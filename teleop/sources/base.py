"""The action-source interface that operator devices and virtual devices share.

The recording node polls its source once per tick:

1. ``poll()`` returns the episode commands (start, stop, discard, reset, quit) that arrived
   since the last tick. It raises :class:`DeviceDisconnected` when the device went away.
2. While an episode records, ``act(obs, dt)`` returns the next action and the time its
   input was sampled, from which the node measures input-to-display latency.

``begin(obs, initial)`` starts an episode at its first observation; ``end()`` finishes it.
Operator devices (SpaceMouse, keyboard, mouse, browser) and virtual ones (a scripted
generator, a stored episode's replay, a policy) implement the same protocol.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from factory.errors import FactoryError
from factory.world import Observation, WorldSpec


class Command(enum.StrEnum):
    """Episode controls, whatever device they come from."""

    START = "start"  # start recording (ignored while recording)
    TOGGLE = "toggle"  # start when idle; stop and save when recording (success: the world's)
    STOP_SUCCESS = "stop_success"  # stop and save, labelled a success
    STOP_FAILURE = "stop_failure"  # stop and save, labelled a failure
    DISCARD = "discard"  # drop the episode in progress
    RESET = "reset"  # drop the episode in progress and reset to the next initial state
    QUIT = "quit"  # drop the episode in progress and end the session
    LOST = "lost"  # the operator's connection went away: drop the episode, keep serving


class DeviceError(FactoryError):
    """An input device is missing, unusable or does not fit the world's action space."""


class DeviceDisconnected(DeviceError):
    """The device went away while the node was running."""


@dataclass(frozen=True)
class Action:
    """One action and when its input was sampled.

    value: (A,) float32 in the world's action space; stamp: ``time.perf_counter()`` when
    the input behind ``value`` was read (the newest device report or event, or the poll).
    """

    value: np.ndarray
    stamp: float


@dataclass(frozen=True)
class InitialCondition:
    """Where an episode starts.

    ``seed`` seeds a random initial configuration (and the world's noise). ``config`` (C,)
    is an explicit one (PushT: agent x, y, block x, y, angle). ``frames`` (K, H, W, 3)
    uint8 are real context frames from a store, from which a world model starts directly.
    ``actions`` (T, A) float32 are the stored episode's actions (replay). ``label`` says
    where it came from (``"seed 3"``, ``"data/play.zarr#12"``).
    """

    seed: int
    config: np.ndarray | None = None
    frames: np.ndarray | None = None
    actions: np.ndarray | None = None
    label: str = ""


@runtime_checkable
class ActionSource(Protocol):
    """Where the node's actions and episode commands come from."""

    device: str  # "spacemouse", "keyboard", "mouse", "web", "scripted", ...
    name: str  # what recorded the actions (EpisodeMeta.generator): the device, or "play"
    needs_operator: bool  # False only for virtual devices that run unattended

    def params(self) -> dict[str, Any]:
        """JSON-able provenance: every knob that shapes the actions."""
        ...

    def open(self, spec: WorldSpec) -> None:
        """Check the world's action space fits and connect; raises :class:`DeviceError`."""
        ...

    def poll(self) -> list[Command]:
        """Commands since the last poll; raises :class:`DeviceDisconnected`."""
        ...

    def begin(self, obs: Observation, initial: InitialCondition) -> None:
        """An episode starts at ``obs``."""
        ...

    def act(self, obs: Observation, dt: float) -> Action:
        """The next action, ``dt`` seconds (one loop period) after the previous one."""
        ...

    def end(self) -> None:
        """The episode in progress ended (saved or dropped)."""
        ...

    def close(self) -> None:
        """Release the device (idempotent)."""
        ...
