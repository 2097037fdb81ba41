"""What every kind's rollout model shares: device, compatibility checks, slot rows.

Subclasses hold ``config`` (with ``action_dim`` and ``image_shape``) and define
``batch_size``; see :mod:`factory.model.protocol` for the whole protocol.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from factory.errors import ModelError


class RolloutBase(nn.Module):
    """Device, ``check_compatible`` and slot-row validation for a rollout model; one
    unnamed camera unless a kind names its ``cameras``."""

    @property
    def cameras(self) -> tuple[str, ...]:
        """The cameras each step renders, the main one (``frames``) first and the others
        in ``StepOutput.views``; ``()``: one unnamed main camera."""
        return ()

    def last_views(self, rows: list[int] | None = None) -> dict[str, np.ndarray]:
        """Every camera after the main one at the current state of ``rows`` (default all),
        each (n, H, W, 3) uint8; empty for a model of one camera."""
        del rows
        return {}

    config: Any

    @property
    def device(self) -> torch.device:
        for p in self.parameters():
            return p.device
        return torch.device("cpu")

    @property
    def batch_size(self) -> int:
        raise NotImplementedError

    def check_compatible(
        self, action_dim: int | None = None, image_shape: tuple[int, ...] | None = None
    ) -> None:
        """Raise :class:`ModelError` unless the model fits this action dim and frame shape."""
        cfg = self.config
        if action_dim is not None and action_dim != cfg.action_dim:
            raise ModelError(
                f"model expects action_dim {cfg.action_dim}, the world has {action_dim}"
            )
        if image_shape is not None and tuple(image_shape) != cfg.image_shape:
            raise ModelError(
                f"model expects frames of shape {cfg.image_shape}, got {tuple(image_shape)}"
            )

    def _rows(self, slots: np.ndarray | list[int]) -> Tensor:
        """Slot indices (n,) as a long tensor on the device; ValueError if out of range or
        repeated."""
        rows = torch.as_tensor(np.asarray(slots, dtype=np.int64).reshape(-1))
        b = self.batch_size
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= b):
            raise ValueError(f"slots {rows.tolist()} out of range for a batch of {b}")
        if len(set(rows.tolist())) != len(rows):
            raise ValueError(f"slots {rows.tolist()} repeat a row")
        return rows.to(self.device)


def to_tensor(x: np.ndarray | Tensor, device: torch.device) -> Tensor:
    """numpy or torch -> a tensor on ``device``."""
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x)).to(device)
    return x.to(device)
