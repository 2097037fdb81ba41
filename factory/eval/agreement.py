"""Policy evaluation agreement (DESIGN §4): how well simulated scores rank policies.

Every function takes two equal-length 1-D sequences over N checkpoints: ``sim`` (the score
measured inside the world model, s_i) and ``real`` (the same checkpoint's score in the
ground truth, r_i). Pure numpy; undefined statistics (a constant input) are ``nan``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Stat = Callable[[np.ndarray, np.ndarray], float]


def _pair(
    sim: Sequence[float] | np.ndarray, real: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(sim, dtype=np.float64).reshape(-1)
    r = np.asarray(real, dtype=np.float64).reshape(-1)
    if s.shape != r.shape:
        raise ValueError(f"sim and real differ in length: {s.size} vs {r.size}")
    if s.size == 0:
        raise ValueError("agreement needs at least one checkpoint")
    if not (np.isfinite(s).all() and np.isfinite(r).all()):
        raise ValueError("agreement needs finite scores")
    return s, r


def pearson(sim: Sequence[float] | np.ndarray, real: Sequence[float] | np.ndarray) -> float:
    """Pearson correlation of s and r; nan when either is constant (or N < 2)."""
    s, r = _pair(sim, real)
    ds, dr = s - s.mean(), r - r.mean()
    den = math.sqrt(float(ds @ ds) * float(dr @ dr))
    if den <= 0.0:
        return math.nan
    return float(np.clip(float(ds @ dr) / den, -1.0, 1.0))


def ranks(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """1-based ranks of ``x`` (N,), ties sharing their average rank."""
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    order = np.argsort(a, kind="mergesort")
    out = np.empty(a.size, dtype=np.float64)
    i = 0
    while i < a.size:
        j = i
        while j + 1 < a.size and a[order[j + 1]] == a[order[i]]:
            j += 1
        out[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return out


def spearman(sim: Sequence[float] | np.ndarray, real: Sequence[float] | np.ndarray) -> float:
    """Spearman's rho: Pearson of the average ranks (ties averaged)."""
    s, r = _pair(sim, real)
    return pearson(ranks(s), ranks(r))


def mmrv(sim: Sequence[float] | np.ndarray, real: Sequence[float] | np.ndarray) -> float:
    """Mean maximum rank violation (SIMPLER), with strict ``>``.

    MMRV = (1/N) sum_i max_j |r_i - r_j| * 1[(s_i > s_j) != (r_i > r_j)]; 0 is a perfect
    ranking, lower is better.
    """
    s, r = _pair(sim, real)
    wrong = (s[:, None] > s[None, :]) != (r[:, None] > r[None, :])  # (N, N)
    cost = np.abs(r[:, None] - r[None, :]) * wrong
    return float(cost.max(axis=1).mean())


def bootstrap_ci(
    sim: Sequence[float] | np.ndarray,
    real: Sequence[float] | np.ndarray,
    stat: Stat = pearson,
    *,
    level: float = 0.9,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over checkpoints resampled in pairs.

    Resamples where ``stat`` is undefined (e.g. all one checkpoint) are dropped; with
    none left the interval is (nan, nan).
    """
    s, r = _pair(sim, real)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, s.size, size=(n_boot, s.size))  # (n_boot, N)
    vals = np.array([stat(s[i], r[i]) for i in idx])
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return math.nan, math.nan
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(vals, [tail, 1.0 - tail])
    return float(lo), float(hi)


def agreement(
    sim: Sequence[float] | np.ndarray,
    real: Sequence[float] | np.ndarray,
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """Pearson, Spearman, MMRV, N and Pearson's bootstrap 90% interval, JSON-ready.

    Undefined values are ``None`` (JSON null) rather than nan.
    """
    s, r = _pair(sim, real)
    lo, hi = bootstrap_ci(s, r, pearson, level=0.9, n_boot=n_boot, seed=seed)
    return {
        "pearson": _finite(pearson(s, r)),
        "spearman": _finite(spearman(s, r)),
        "mmrv": _finite(mmrv(s, r)),
        "n_checkpoints": int(s.size),
        "pearson_ci90": [_finite(lo), _finite(hi)],
    }


def _finite(x: float) -> float | None:
    return None if not math.isfinite(x) else round(float(x), 6)
