"""Replay a stored episode's actions from its initial configuration."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from factory.errors import FactoryError
from factory.world import Observation


class ReplayGenerator:
    """Open-loop replay of ``actions`` (T, A); after the last one it holds it.

    ``config`` (C,) is the episode's initial configuration: reset the world to it
    (``world.reset(configs=gen.config[None])``) before replaying.
    """

    name = "replay"

    def __init__(self, actions: np.ndarray, config: np.ndarray) -> None:
        acts = np.asarray(actions, dtype=np.float32)
        if acts.ndim != 2 or acts.shape[0] < 1:
            raise FactoryError(
                f"replay needs actions of shape (T, A) with T >= 1, got {acts.shape}"
            )
        if not np.all(np.isfinite(acts)):
            raise FactoryError("replay actions contain non-finite values (NaN or inf)")
        cfg = np.asarray(config, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(cfg)):
            raise FactoryError("replay config contains non-finite values (NaN or inf)")
        self.actions = acts
        self.config = cfg
        self._t = 0

    def params(self) -> dict[str, Any]:
        digest = hashlib.sha256(np.ascontiguousarray(self.actions).tobytes()).hexdigest()
        return {
            "num_actions": int(self.actions.shape[0]),
            "config": [float(v) for v in self.config],
            "actions_sha256": digest[:16],
        }

    def reset(self, seed: int, obs: Observation) -> None:
        self._t = 0

    def act(self, obs: Observation) -> np.ndarray:
        action = self.actions[min(self._t, len(self.actions) - 1)].copy()
        self._t += 1
        return action
