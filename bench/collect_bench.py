"""Benchmark ``factory collect``: env steps/s with 1 and 2 workers, same episodes, same run.

    uv run python bench/collect_bench.py --episodes 16 --steps 100 --generator play

Prints one JSON object. Each timing includes the single writer's commits to a fresh store.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from pipelines.collect import CollectConfig, run_collect


def _time_collect(root: Path, workers: int, args: argparse.Namespace) -> dict[str, float]:
    cfg = CollectConfig(
        out=root / f"w{workers}.zarr",
        generator=args.generator,
        episodes=args.episodes,
        steps=args.steps,
        resolution=args.resolution,
        workers=workers,
        stop_on_success=False,
    )
    start = time.perf_counter()
    summary = run_collect(cfg)
    seconds = time.perf_counter() - start
    frames = summary["recorded_frames"]
    return {"seconds": seconds, "frames": frames, "steps_per_s": frames / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--resolution", type=int, default=96)
    parser.add_argument("--generator", default="play")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one = _time_collect(Path(tmp), 1, args)
        two = _time_collect(Path(tmp), 2, args)
    print(
        json.dumps(
            {
                "bench": "collect",
                "cpus": os.cpu_count(),
                "generator": args.generator,
                "episodes": args.episodes,
                "steps": args.steps,
                "resolution": args.resolution,
                "workers_1": one,
                "workers_2": two,
                "speedup_2_vs_1": two["steps_per_s"] / one["steps_per_s"],
            }
        )
    )


if __name__ == "__main__":
    main()
