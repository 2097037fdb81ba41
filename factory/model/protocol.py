"""The rollout protocol: what every model kind offers its consumers.

``generate``, ``teleop``, ``demo``, the lerobot plugins, ``ModelWorld`` and every
evaluation use a loaded model only through these members, so each runs on any kind
(:mod:`factory.model.registry`).

Shapes: ``B`` rollouts, ``K'`` context steps, ``H, W`` image size, ``A`` action dim, ``S``
the kind's world-state dim (object_state: agent x, y, block x, y, angle).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from factory.model.world_model import StepOutput


@runtime_checkable
class RolloutModel(Protocol):
    """A batched, autoregressive world model.

    - ``start(context_frames, context_actions, seed, states)``: begin B rollouts from real
      context frames (B, K', H, W, 3) uint8 and the actions applied at all but the last
      (B, K'-1, A), or None. ``states`` (B, K', S), where known (a seeded reset, a store
      with the object state), lets a kind that models the state start from it exactly; a
      kind that models pixels ignores it.
    - ``start_slots(slots, ...)`` / ``keep_slots(slots)``: restart or keep some rows.
    - ``step(actions)`` (B, A) -> :class:`StepOutput`; ``step_many(actions)`` (B, T, A).
    - ``last_reading(rows)``: the model's own (agent (n, 2), task state (n, 3)) at the
      last context step of ``rows`` (default all), after ``start``.
    - ``read_frames(frames)`` (B, H, W, 3) -> (agent (B, 2), task state (B, 3)): the
      model's reader of real frames.
    - ``reconstruct(frames, states)`` (N, H, W, 3), (N, S) or None -> (N, H, W, 3): the
      model's own re-rendering of real frames (``reconstructs`` names how: the latent
      kind's autoencoder, a state kind's renderer at the given states).
    - ``starts_from_states``: whether ``start`` uses ``states`` when given.
    - ``cameras``: the cameras a step renders (main first, the others in
      ``StepOutput.views``; ``()`` for one unnamed camera); ``last_views(rows)``: the
      others at the current state.
    """

    config: Any
    use_bf16: bool

    @property
    def device(self) -> torch.device: ...

    @property
    def kind(self) -> str: ...

    @property
    def context(self) -> int: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def has_task_reader(self) -> bool: ...

    @property
    def cameras(self) -> tuple[str, ...]: ...

    def last_views(self, rows: list[int] | None = None) -> dict[str, np.ndarray]: ...

    @property
    def task_reader(self) -> str: ...

    def check_compatible(
        self, action_dim: int | None = None, image_shape: tuple[int, ...] | None = None
    ) -> None: ...

    def start(
        self,
        context_frames: np.ndarray | Tensor | None = None,
        context_actions: np.ndarray | Tensor | None = None,
        seed: int = 0,
        states: np.ndarray | Tensor | None = None,
    ) -> None: ...

    def start_slots(
        self,
        slots: np.ndarray | list[int],
        context_frames: np.ndarray | Tensor | None = None,
        context_actions: np.ndarray | Tensor | None = None,
        states: np.ndarray | Tensor | None = None,
    ) -> None: ...

    def keep_slots(self, slots: np.ndarray | list[int]) -> None: ...

    def step(self, actions: np.ndarray | Tensor) -> StepOutput: ...

    def step_many(self, actions: np.ndarray | Tensor) -> list[StepOutput]: ...

    def last_reading(self, rows: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def read_frames(self, frames: np.ndarray | Tensor) -> tuple[np.ndarray, np.ndarray]: ...

    @property
    def reconstructs(self) -> str: ...

    @property
    def frame_reader(self) -> str: ...

    @property
    def starts_from_states(self) -> bool: ...

    def reconstruct(self, frames: np.ndarray, states: np.ndarray | None) -> np.ndarray: ...
