"""Operator input events and the thread-safe bus that carries them.

A viewer (the local window, the web page's server) turns native input into these events
and puts them on an :class:`EventBus`; the keyboard, mouse and web sources drain it once
per tick. Every event carries ``t``, the ``time.perf_counter()`` at which it was received.

Key names are normalised (:func:`teleop.sources.keyboard.normalise_key`): ``"up"``,
``"space"``, ``"enter"``, ``"escape"``, ``"backspace"``, lower-case letters, ...
"""

from __future__ import annotations

import queue
from dataclasses import dataclass


@dataclass(frozen=True)
class KeyEvent:
    """A key went down (``down``) or up."""

    key: str
    down: bool
    t: float


@dataclass(frozen=True)
class PointerEvent:
    """The pointer is at (u, v) in [0, 1]^2 over the frame (outside: beyond that range);
    ``buttons`` is the pressed-button bitmask (1: primary)."""

    u: float
    v: float
    buttons: int
    t: float


@dataclass(frozen=True)
class AxesEvent:
    """A gamepad stick at (x, y) in [-1, 1]^2, +x right, +y down."""

    x: float
    y: float
    t: float


@dataclass(frozen=True)
class ConnectionEvent:
    """The operator's window or page connected or went away; ``clients`` still open."""

    connected: bool
    clients: int
    t: float


InputEvent = KeyEvent | PointerEvent | AxesEvent | ConnectionEvent


class EventBus:
    """A thread-safe FIFO of :data:`InputEvent`; producers ``put``, one consumer drains."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[InputEvent] = queue.SimpleQueue()

    def put(self, event: InputEvent) -> None:
        self._queue.put(event)

    def drain(self) -> list[InputEvent]:
        """Every event queued so far, oldest first."""
        out: list[InputEvent] = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out
