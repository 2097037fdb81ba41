"""Random training windows that never cross episode boundaries."""

from __future__ import annotations

from typing import Any

import numpy as np


def episode_windows(
    ends: np.ndarray, length: int, batch_size: int, rng: np.random.Generator
) -> np.ndarray | None:
    """Start frames (batch_size,) of random ``length``-frame windows inside episodes.

    ``ends`` is the (E,) cumulative exclusive ``episode_ends``. Each valid window (all of its
    frames in one episode) is equally likely. Returns None when no episode has ``length``
    frames.
    """
    ends = np.asarray(ends, dtype=np.int64)
    starts0 = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    n_windows = np.maximum(ends - starts0 - length + 1, 0)  # (E,) valid starts per episode
    total = int(n_windows.sum())
    if total == 0:
        return None
    cum = np.cumsum(n_windows)  # (E,)
    flat = rng.integers(0, total, size=batch_size)  # (B,) index over all valid windows
    ep = np.searchsorted(cum, flat, side="right")  # (B,) episode of each window
    offset = flat - (cum[ep] - n_windows[ep])
    out: np.ndarray = starts0[ep] + offset
    return out


def read_rows(arr: Any, starts: np.ndarray, length: int) -> np.ndarray:
    """Read windows ``arr[s:s+length]`` for every s in ``starts`` (B,) -> (B, length, ...).

    One window is a plain slice. Several are one orthogonal selection of the union of their
    rows, so zarr fetches and decodes every chunk involved once, concurrently (measured
    ~1.6x more windows/s than a slice per window at batch 32, 96 px; slower at batch 1).
    """
    starts = np.asarray(starts, dtype=np.int64)
    if len(starts) == 1:
        s = int(starts[0])
        return np.asarray(arr[s : s + length])[None]
    rows = (starts[:, None] + np.arange(length)).ravel()  # (B * length,)
    unique, inverse = np.unique(rows, return_inverse=True)
    block = np.asarray(arr.get_orthogonal_selection((unique,)))  # (U, ...)
    out: np.ndarray = block[inverse].reshape(len(starts), length, *arr.shape[1:])
    return out
