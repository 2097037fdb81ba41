"""Perturbations of replayed action sequences: Gaussian noise and time warps."""

from __future__ import annotations

import numpy as np


def perturb_actions(
    actions: np.ndarray,
    rng: np.random.Generator,
    *,
    noise: float = 0.0,
    time_warp: float = 0.0,
    low: float = 0.0,
    high: float = 512.0,
) -> np.ndarray:
    """A perturbed copy of ``actions`` (T, A) float32 -> (T', A) float32.

    ``time_warp`` w: the sequence is replayed at a speed drawn from U(1 - w, 1 + w) (linear
    interpolation between the recorded actions, so T' = round(T / speed)); ``noise``:
    i.i.d. Gaussian noise of that std (action units, PushT: board px) on every action.
    The result is clipped to [low, high]. w = 0 and noise = 0 give the actions unchanged.
    """
    acts = np.asarray(actions, dtype=np.float64)
    if acts.ndim != 2 or len(acts) < 1:
        raise ValueError(f"actions must be (T, A) with T >= 1, got {acts.shape}")
    if not 0.0 <= time_warp < 1.0:
        raise ValueError(f"time_warp must be in [0, 1), got {time_warp}")
    if noise < 0.0:
        raise ValueError(f"noise must be >= 0, got {noise}")
    if time_warp > 0.0 and len(acts) > 1:
        speed = rng.uniform(1.0 - time_warp, 1.0 + time_warp)
        n = max(1, round(len(acts) / speed))
        t = np.minimum(np.arange(n) * speed, len(acts) - 1)
        lo = np.floor(t).astype(np.int64)
        hi = np.minimum(lo + 1, len(acts) - 1)
        frac = (t - lo)[:, None]
        acts = acts[lo] * (1.0 - frac) + acts[hi] * frac
    if noise > 0.0:
        acts = acts + rng.normal(0.0, noise, size=acts.shape)
    return np.clip(acts, low, high).astype(np.float32)
