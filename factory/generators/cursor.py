"""The smooth, noisy cursor that the play generators steer (its position is the action)."""

from __future__ import annotations

import numpy as np

from factory.generators.base import board_clip


class SmoothCursor:
    """A cursor (2,) board px that moves towards a goal at most ``speed`` px per step, its
    velocity low-passed by ``smoothing`` and disturbed by smooth (AR(1)) noise."""

    def __init__(self) -> None:
        self.pos: np.ndarray = np.zeros(2)
        self.vel: np.ndarray = np.zeros(2)
        self.noise: np.ndarray = np.zeros(2)

    def reset(self, at: np.ndarray) -> None:
        self.pos = np.array(at, np.float64)
        self.vel = np.zeros(2)
        self.noise = np.zeros(2)

    def move(
        self,
        goal: np.ndarray,
        speed: float,
        smoothing: float,
        noise: float,
        margin: float,
        rng: np.random.Generator,
    ) -> None:
        """One step towards ``goal`` (2,); ``noise`` px/step, kept ``margin`` px inside."""
        delta = goal - self.pos
        dist = float(np.linalg.norm(delta))
        want = delta * min(1.0, speed / dist) if dist > 1e-9 else np.zeros(2)
        vel = smoothing * self.vel + (1.0 - smoothing) * want
        norm = float(np.linalg.norm(vel))
        if norm > speed:
            vel *= speed / norm
        self.noise = 0.7 * self.noise + rng.normal(0.0, noise, size=2)
        self.vel = vel
        self.pos = board_clip(self.pos + vel + 0.3 * self.noise, margin)
