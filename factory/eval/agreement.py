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
    level: float = 0.9,
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """N, Pearson with its bootstrap interval at ``level``, Spearman, MMRV and the mean
    bias (sim minus real), JSON-ready: undefined values are ``None`` rather than nan."""
    s, r = _pair(sim, real)
    lo, hi = bootstrap_ci(s, r, pearson, level=level, n_boot=n_boot, seed=seed)
    return {
        "n_checkpoints": int(s.size),
        "pearson": _finite(pearson(s, r)),
        "pearson_ci": [_finite(lo), _finite(hi)],
        "ci_level": level,
        "spearman": _finite(spearman(s, r)),
        "mmrv": _finite(mmrv(s, r)),
        "bias": _finite(float(np.mean(s - r))),
    }


def paired(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Score rows of checkpoints to one pair per checkpoint scored in both worlds.

    Each row has ``dataset`` and ``step`` (the checkpoint), ``world`` (``real`` or
    ``model``) and the score ``key``; the pairs are ``{dataset, step, real, model}``,
    sorted by checkpoint. A checkpoint scored in one world only is left out.
    """
    got: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        cell = got.setdefault((row["dataset"], row["step"]), {})
        cell[row["world"]] = row[key]
    return [
        {"dataset": d, "step": s, "real": c["real"], "model": c["model"]}
        for (d, s), c in sorted(got.items())
        if "real" in c and "model" in c
    ]


def checkpoint_agreement(
    pairs: list[dict[str, Any]], *, level: float = 0.95, n_boot: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """:func:`agreement` over :func:`paired` checkpoints (``model`` is the simulated score),
    with ``real_success_range``, the real scores' [min, max]. Under two checkpoints every
    statistic is ``None`` (no ranking to agree on), as is the range of none."""
    real = [p["real"] for p in pairs]
    out: dict[str, Any] = {
        "n_checkpoints": len(pairs),
        "pearson": None,
        "pearson_ci": [None, None],
        "ci_level": level,
        "spearman": None,
        "mmrv": None,
        "bias": None,
        "real_success_range": [min(real), max(real)] if real else [None, None],
    }
    if len(pairs) >= 2:
        sim = [p["model"] for p in pairs]
        out.update(agreement(sim, real, level=level, n_boot=n_boot, seed=seed))
    return out


def at_least(x: float | None, bound: float) -> bool:
    """A target met only when computed: ``x`` None (undefined) never meets it."""
    return x is not None and x >= bound


def at_most(x: float | None, bound: float) -> bool:
    """A target met only when computed: ``x`` None (undefined) never meets it."""
    return x is not None and x <= bound


def _finite(x: float) -> float | None:
    return None if not math.isfinite(x) else round(float(x), 6)
