"""Several runs of ``bench/zero_real_data.py`` side by side: is M >= R (and G >= R) more
than one run's training noise?

One run trains each dataset's policy once, from one ``--train-seed``. Runs of the same
default differ by more than the evaluation's standard error (docs/RESULTS.md), so one
run's sign of M - R says little. This reads the results JSON of several runs (other
``--train-seed`` values, or the same default on other machines) and prints, as JSON, each
run's final real success of R, G and M at N demos and, over the runs, the mean of each,
and of M - R and G - R their per-run values, mean, standard error and a Student-t 95%
interval::

    .venv/bin/python bench/zero_real_seeds.py RUN1/zero_real_data.json RUN2/... \\
        --labels "seed 1000,seed 1001"

A run is one sample of the whole recipe (demos, training, evaluation); the interval is
over runs, so it holds the training noise and the evaluation's binomial noise together.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

FAMILIES = ("R", "G", "M")
# Student-t 0.975 quantiles by degrees of freedom 1..30; beyond 30, 1.96 + 2.4 / df is
# within 0.005 of the true quantile.
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` >= 1 degrees of freedom."""
    return T975[df - 1] if df <= len(T975) else 1.96 + 2.4 / df


def spread(values: list[float]) -> dict[str, Any]:
    """Per-run values, their mean, standard error and t 95% interval (None below 2 runs)."""
    n = len(values)
    mean = sum(values) / n
    out: dict[str, Any] = {"per_run": [round(v, 4) for v in values], "mean": round(mean, 4)}
    if n < 2:
        return out | {"se": None, "ci95": None}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    se = sd / math.sqrt(n)
    half = t975(n - 1) * se
    return out | {
        "sd": round(sd, 4),
        "se": round(se, 4),
        "ci95": [round(mean - half, 4), round(mean + half, 4)],
    }


def read_run(path: Path, arm: str, label: str) -> dict[str, Any]:
    """One run's final real and in-model success of R, G and M; ValueError if absent."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        res = json.loads(text)
        real = res["arms"][arm]["real_success"]
        model = res["arms"][arm]["model_success"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path}: not a zero_real_data results JSON with arm {arm!r} ({exc})"
        ) from None
    if any(real.get(f) is None for f in FAMILIES):
        raise ValueError(f"{path}: arm {arm!r} lacks a final real success of R, G or M")
    cfg = res.get("config", {})
    return {
        "file": str(path),
        "label": label,
        "train_seed": cfg.get("train_seed"),
        "n": cfg.get("n"),
        "real_success": {f: real[f] for f in FAMILIES},
        "model_success": {f: model.get(f) for f in FAMILIES},
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over runs and the spread of M - R and G - R (real success)."""
    real = {f: [r["real_success"][f] for r in runs] for f in FAMILIES}
    m_r = [m - r for m, r in zip(real["M"], real["R"], strict=True)]
    g_r = [g - r for g, r in zip(real["G"], real["R"], strict=True)]
    return {
        "n_runs": len(runs),
        "mean_real_success": {f: round(sum(v) / len(v), 4) for f, v in real.items()},
        "m_minus_r": spread(m_r) | {"runs_m_at_least_r": sum(d >= 0 for d in m_r)},
        "g_minus_r": spread(g_r) | {"runs_g_at_least_r": sum(d >= 0 for d in g_r)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", nargs="+", type=Path, help="zero_real_data.json of each run")
    ap.add_argument("--arm", default="state", help="the policy arm (state)")
    ap.add_argument("--labels", default=None, help="comma-separated, one per results file")
    args = ap.parse_args(argv)
    labels = args.labels.split(",") if args.labels else [p.parent.name for p in args.results]
    if len(labels) != len(args.results):
        print(f"error: {len(labels)} labels for {len(args.results)} files", file=sys.stderr)
        return 2
    try:
        runs = [read_run(p, args.arm, lab) for p, lab in zip(args.results, labels, strict=True)]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sizes = sorted({str(r["n"]) for r in runs})
    if len(sizes) > 1:  # R, G and M of other sizes are other quantities
        print(
            f"error: the runs differ in N (demos per dataset): {', '.join(sizes)}", file=sys.stderr
        )
        return 2
    print(json.dumps({"arm": args.arm, "runs": runs, "summary": summary(runs)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
