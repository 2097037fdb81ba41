"""Mouse control: the pointer's position over the frame is the target.

As in the original PushT demonstrations, the agent follows the pointer. With
``drag=True`` (the browser page) it follows only while the primary button is held, so
that the keyboard and gamepad can drive it otherwise. Episode commands come from the
keys (:mod:`teleop.sources.keyboard`).
"""

from __future__ import annotations

import numpy as np

from teleop.sources.events import PointerEvent


class PointerState:
    """The newest pointer position that should move the target, if any since last read."""

    def __init__(self, drag: bool) -> None:
        self.drag = drag
        self._pending: np.ndarray | None = None

    def feed(self, event: PointerEvent) -> bool:
        """Take one event; True if it moves the target."""
        inside = 0.0 <= event.u <= 1.0 and 0.0 <= event.v <= 1.0
        if not inside or (self.drag and not event.buttons & 1):
            return False
        self._pending = np.array([event.u, event.v])
        return True

    def take(self) -> np.ndarray | None:
        """(2,) (u, v) in [0, 1]^2 of the newest moving event since the last call, or None."""
        uv, self._pending = self._pending, None
        return uv
