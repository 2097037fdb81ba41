"""How operator input becomes a planar target action (PushT's action space).

Velocity devices (a SpaceMouse's translation, held arrow keys, a gamepad stick) give a
deflection in [-1, 1] per axis, in image axes: +x right, +y down the screen (PushT's board
y grows downwards in its frames). The deflection, after a deadzone, is integrated at the
loop rate into the target: ``target += deflection * speed * dt``, clipped to the board.
Pointer devices (a mouse, a browser pointer) give a position (u, v) in [0, 1]^2 over the
frame, mapped to the board directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from factory.world import WorldSpec
from teleop.sources.base import DeviceError

PLANAR_DIM = 2


@dataclass(frozen=True)
class PlanarMapping:
    """Knobs of the planar mapping.

    speed: board units per second at full deflection; deadzone: the share of full scale
    below which a deflection counts as zero (the rest is rescaled to start from 0).
    """

    speed: float = 256.0
    deadzone: float = 0.1

    def __post_init__(self) -> None:
        if not (self.speed > 0 and np.isfinite(self.speed)):
            raise DeviceError(f"--speed must be a positive number, got {self.speed}")
        if not 0.0 <= self.deadzone < 1.0:
            raise DeviceError(f"--deadzone must be in [0, 1), got {self.deadzone}")


def check_planar(spec: WorldSpec, device: str) -> tuple[np.ndarray, np.ndarray]:
    """The board bounds (low (2,), high (2,)) if ``spec`` takes a planar target action."""
    if spec.action_dim != PLANAR_DIM or len(spec.action_low) != PLANAR_DIM:
        raise DeviceError(
            f"--device {device} drives a 2-D planar target (PushT: agent x, y) but the world "
            f"{spec.name!r} takes {spec.action_dim}-D actions ({spec.action_meaning}); "
            "use a PushT world or model, or --device scripted"
        )
    return np.asarray(spec.action_low, np.float64), np.asarray(spec.action_high, np.float64)


def apply_deadzone(deflection: np.ndarray, deadzone: float) -> np.ndarray:
    """deflection: (2,) in [-1, 1] -> (2,) with |d| < deadzone zeroed, the rest rescaled."""
    d = np.clip(np.asarray(deflection, np.float64), -1.0, 1.0)
    mag = np.maximum(np.abs(d) - deadzone, 0.0) / (1.0 - deadzone)
    return np.sign(d) * mag


class PlanarTarget:
    """The integrated target point of one episode, clipped to [low, high]."""

    def __init__(self, low: np.ndarray, high: np.ndarray, mapping: PlanarMapping) -> None:
        self.low = np.asarray(low, np.float64)
        self.high = np.asarray(high, np.float64)
        self.mapping = mapping
        self._xy = (self.low + self.high) / 2

    def reset(self, xy: np.ndarray) -> None:
        """Put the target at ``xy`` (2,), e.g. the agent's position at episode start."""
        self._xy = np.clip(np.asarray(xy, np.float64)[:PLANAR_DIM], self.low, self.high)

    def move(self, deflection: np.ndarray, dt: float) -> None:
        """Integrate a deflection (2,) in [-1, 1] over ``dt`` seconds."""
        step = apply_deadzone(deflection, self.mapping.deadzone) * self.mapping.speed * dt
        self._xy = np.clip(self._xy + step, self.low, self.high)

    def place(self, uv: np.ndarray) -> None:
        """Put the target at frame position ``uv`` (2,) in [0, 1]^2."""
        uv = np.clip(np.asarray(uv, np.float64), 0.0, 1.0)
        self._xy = self.low + uv * (self.high - self.low)

    @property
    def value(self) -> np.ndarray:
        """(2,) float32."""
        return self._xy.astype(np.float32)
