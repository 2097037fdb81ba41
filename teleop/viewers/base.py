"""What a viewer shows and the interface every viewer implements."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Hud:
    """The heads-up display beside the frame.

    episode: the number (1-based, this session) of the episode recording or next;
    elapsed_s: time since it started (0 when idle); fps: the loop's measured rate;
    score: the world's last score (the probe's, inside a model); message: the last event.
    """

    device: str
    episode: int
    saved: int
    recording: bool
    elapsed_s: float
    frames: int
    fps: float
    score: float
    message: str = ""

    def lines(self) -> list[str]:
        """Two or three short lines of text."""
        state = "REC" if self.recording else "idle"
        first = f"{state}  episode {self.episode}  {self.elapsed_s:5.1f} s  {self.frames} frames"
        second = f"{self.fps:4.1f} fps  score {self.score:.2f}  saved {self.saved}  [{self.device}]"
        return [first, second, self.message] if self.message else [first, second]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@runtime_checkable
class Viewer(Protocol):
    """Shows frames to the operator and feeds their input to the event bus."""

    @property
    def location(self) -> str:
        """Where to look: ``"window"``, ``"http://127.0.0.1:8765/?token=..."``, ``""``
        (headless)."""
        ...

    def open(self) -> None:
        """Open the window or start the server; raises FactoryError when it cannot."""
        ...

    def show(self, frame: np.ndarray, hud: Hud) -> float:
        """Show frame (H, W, 3) uint8; returns ``time.perf_counter()`` once it is out."""
        ...

    def close(self) -> None:
        """Close (idempotent)."""
        ...


class NullViewer:
    """Headless: shows nothing."""

    location = ""

    def open(self) -> None:
        pass

    def show(self, frame: np.ndarray, hud: Hud) -> float:
        return time.perf_counter()

    def close(self) -> None:
        pass
