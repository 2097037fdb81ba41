"""Two models' open-loop transfer on the same seeds, compared seed by seed.

``factory eval transfer STORE --json`` writes, per episode, its seed, whether the model
read success and whether the replay succeeded in the real env. Two such files from the
same generator and seeds (the same ``factory generate ... --seed S`` inside models ``A``
and ``B``) pair up by seed: each model's episode starts from the same real layout, so a
seed where only one replay succeeds is evidence of a difference, and a seed where both (or
neither) succeed is not. This bench pairs the seeds that both models read as successes and
reports each model's rate on them, the discordant counts and the exact two-sided McNemar
p-value (a binomial test on the discordant seeds), with a normal 95% interval on the paired
difference. Several files per side (``--a F1 --a F2``, seed sets that do not overlap) pool.

    .venv/bin/python bench/transfer_compare.py --a tr_v8_200000.json --a tr_v8_700000.json \\
        --b tr_v9_200000.json --b tr_v9_700000.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any


def episodes(paths: list[str]) -> dict[int, dict[str, Any]]:
    """The per-episode rows of one side's transfer files, keyed by seed (seeds must not
    repeat across that side's files)."""
    rows: dict[int, dict[str, Any]] = {}
    for path in paths:
        try:
            per_episode = json.loads(Path(path).read_text())["per_episode"]
            # an episode reset from a recorded config (no seed) has nothing to pair by
            seeded = {int(r["seed"]): r for r in per_episode if r["seed"] is not None}
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(
                f"{path}: not a transfer JSON of factory eval transfer ({err!r})"
            ) from err
        if len(seeded) < sum(r["seed"] is not None for r in per_episode) or seeded.keys() & rows:
            raise ValueError(f"a seed appears twice among {paths}")
        rows.update(seeded)
    return rows


def binomial_two_sided(k: int, n: int) -> float:
    """Exact two-sided p of ``k`` of ``n`` discordant seeds going one way under p = 0.5."""
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def compare(a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Paired transfer over the seeds both sides hold and both models read as successes."""
    common = a.keys() & b.keys()
    seeds = sorted(s for s in common if a[s]["model_success"] and b[s]["model_success"])
    n = len(seeds)
    ra = [bool(a[s]["real_success"]) for s in seeds]
    rb = [bool(b[s]["real_success"]) for s in seeds]
    only_a = sum(x and not y for x, y in zip(ra, rb, strict=True))
    only_b = sum(y and not x for x, y in zip(ra, rb, strict=True))
    both = sum(x and y for x, y in zip(ra, rb, strict=True))
    diff = (only_b - only_a) / n if n else float("nan")
    # variance of a paired difference of proportions
    var = ((only_a + only_b) / n - diff**2) / n if n else float("nan")
    half = 1.96 * math.sqrt(max(var, 0.0))
    return {
        "seeds_common": len(common),
        "paired": n,
        "transfer_a": sum(ra) / n if n else None,
        "transfer_b": sum(rb) / n if n else None,
        "both": both,
        "only_a": only_a,
        "only_b": only_b,
        "neither": n - both - only_a - only_b,
        "b_minus_a": diff,
        "b_minus_a_ci95": [diff - half, diff + half],
        "mcnemar_p": binomial_two_sided(only_a, only_a + only_b),
        "median_steps_a": statistics.median(a[s]["steps"] for s in seeds) if n else None,
        "median_steps_b": statistics.median(b[s]["steps"] for s in seeds) if n else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", action="append", required=True, help="model A's transfer JSON")
    ap.add_argument("--b", action="append", required=True, help="model B's transfer JSON")
    args = ap.parse_args()
    try:
        a, b = episodes(args.a), episodes(args.b)
    except ValueError as err:
        ap.exit(2, f"transfer_compare: {err}\n")
    print(json.dumps({"a": args.a, "b": args.b, **compare(a, b)}))


if __name__ == "__main__":
    main()
