"""Validation of what a ground-truth world is given: seeds, configs and target actions.

Each returns the input as an array of the right shape or raises :class:`FactoryError` with
one line that says what was expected.
"""

from __future__ import annotations

import numpy as np

from factory.errors import FactoryError


def check_seeds(seeds: np.ndarray, batch_size: int) -> np.ndarray:
    """(B,) non-negative integer seeds."""
    arr = np.asarray(seeds).reshape(-1)
    if arr.shape != (batch_size,):
        raise FactoryError(
            f"reset needs {batch_size} seeds (one per episode), got shape {np.shape(seeds)}"
        )
    if not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 0):
        raise FactoryError(f"seeds must be non-negative integers, got {arr.tolist()}")
    return arr


def check_configs(configs: np.ndarray, batch_size: int, dim: int, meaning: str) -> np.ndarray:
    """(B, C) float64 finite configs (a single (C,) config is taken at batch size 1);
    ``meaning`` names the columns in the error."""
    try:
        arr = np.asarray(configs, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise FactoryError(f"configs must be a numeric (B, {dim}) array: {err}") from None
    if arr.shape == (dim,) and batch_size == 1:
        arr = arr[None]
    if arr.shape != (batch_size, dim):
        raise FactoryError(
            f"configs must have shape ({batch_size}, {dim}) ({meaning}), got {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise FactoryError("configs contain non-finite values (NaN or inf)")
    return arr


def check_target_actions(actions: np.ndarray, batch_size: int, high: float) -> np.ndarray:
    """(B, 2) float64 absolute target positions, finite, clipped to the board [0, high]."""
    try:
        arr = np.asarray(actions, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise FactoryError(f"actions must be a numeric (B, 2) array: {err}") from None
    if arr.shape != (batch_size, 2):
        raise FactoryError(
            f"actions must have shape ({batch_size}, 2) (target x, y per episode), got {arr.shape}"
        )
    bad = ~np.isfinite(arr)
    if bad.any():
        rows = sorted({int(i) for i in np.nonzero(bad)[0]})
        raise FactoryError(
            f"actions contain non-finite values (NaN or inf) for episode(s) {rows}: "
            f"{arr[rows].tolist()}"
        )
    return np.clip(arr, 0.0, high)
