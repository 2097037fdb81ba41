"""Keyboard control: arrows or WASD move the target; keys drive the episode.

| key | does |
| --- | --- |
| arrows, W A S D | move the target (held: continuous, at the mapping's speed) |
| space | start recording |
| enter, Y | stop and save as a success |
| N, F | stop and save as a failure |
| X, backspace | discard the episode in progress |
| R | reset to the next initial state (discards the episode in progress) |
| escape, Q | quit (discards the episode in progress) |
"""

from __future__ import annotations

import numpy as np

from teleop.sources.base import Command
from teleop.sources.events import KeyEvent

MOTION_KEYS: dict[str, tuple[float, float]] = {
    "up": (0.0, -1.0),
    "w": (0.0, -1.0),
    "down": (0.0, 1.0),
    "s": (0.0, 1.0),
    "left": (-1.0, 0.0),
    "a": (-1.0, 0.0),
    "right": (1.0, 0.0),
    "d": (1.0, 0.0),
}
"""Key -> deflection (x, y) in image axes (+y down the screen)."""

COMMAND_KEYS: dict[str, Command] = {
    "space": Command.START,
    "enter": Command.STOP_SUCCESS,
    "y": Command.STOP_SUCCESS,
    "n": Command.STOP_FAILURE,
    "f": Command.STOP_FAILURE,
    "x": Command.DISCARD,
    "backspace": Command.DISCARD,
    "r": Command.RESET,
    "escape": Command.QUIT,
    "q": Command.QUIT,
}

_ALIASES = {
    " ": "space",
    "return": "enter",
    "keypad enter": "enter",
    "esc": "escape",
    "arrowup": "up",
    "arrowdown": "down",
    "arrowleft": "left",
    "arrowright": "right",
}


def normalise_key(name: str) -> str:
    """A native key name (pygame's ``key.name``, the browser's ``KeyboardEvent.key``)
    as the bus spells it: ``"ArrowUp"`` -> ``"up"``, ``"Return"`` -> ``"enter"``."""
    lowered = name.lower()
    return _ALIASES.get(lowered, lowered)


class KeyState:
    """Which motion keys are held, and the commands that key presses give."""

    def __init__(self) -> None:
        self._held: set[str] = set()
        self._tapped: set[str] = set()  # pressed since the last deflection(), maybe released

    def feed(self, event: KeyEvent) -> Command | None:
        """Update from one event; a key press that is a command returns it."""
        key = normalise_key(event.key)
        if key in MOTION_KEYS:
            if event.down:
                self._held.add(key)
                self._tapped.add(key)
            else:
                self._held.discard(key)
            return None
        return COMMAND_KEYS.get(key) if event.down else None

    def deflection(self) -> np.ndarray:
        """(2,) in [-1, 1]^2 from the held keys (a key tapped since the last call counts
        once, so a press shorter than a tick still moves the target)."""
        keys = self._held | self._tapped
        self._tapped.clear()
        total = np.zeros(2)
        for key in keys:
            total += MOTION_KEYS[key]
        return np.clip(total, -1.0, 1.0)

    def release_all(self) -> None:
        self._held.clear()
        self._tapped.clear()
