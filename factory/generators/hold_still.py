"""The hold-still floor: a generator that never moves the agent."""

from __future__ import annotations

from typing import Any

import numpy as np

from factory.errors import FactoryError
from factory.world import Observation


class HoldStill:
    """Every action is the same target: ``target`` (A,) when given, else the agent's
    position at reset (the robot state, for worlds whose action is an absolute position
    target of it, as PushT's is). Any success or score gain it sees comes from the world
    moving by itself (in a world model: the model drifting)."""

    name = "hold_still"

    def __init__(self, target: Any = None) -> None:
        self.target: np.ndarray | None = None
        if target is not None:
            self.target = np.asarray(target, np.float32).reshape(-1)
        if self.target is not None and not np.isfinite(self.target).all():
            raise FactoryError("generator 'hold_still': target contains NaN or inf")
        self._hold = self.target

    def params(self) -> dict[str, Any]:
        return {} if self.target is None else {"target": [float(v) for v in self.target]}

    def reset(self, seed: int, obs: Observation) -> None:
        self._hold = (
            np.asarray(obs.state, np.float32).copy() if self.target is None else self.target
        )

    def act(self, obs: Observation) -> np.ndarray:
        if self._hold is None:
            raise FactoryError("generator 'hold_still': act() before reset()")
        return self._hold.copy()
