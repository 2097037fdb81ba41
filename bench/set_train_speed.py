"""How much faster the object-set dynamics trains compiled (``--compile``) on this CPU.

Runs the real dynamics stage (:func:`factory.train.object_set.train_set_part`) of a fresh
model of ``--data`` for ``--steps`` steps, eager and compiled in turn (``--repeats``
pairs; the same seed, so the same windows in the same order), with the stage's unroll
schedule over those steps (2, 4 then 8). Per run: the seconds to the first logged step
(``--log-every``), which hold the compiler's warm-up, and the seconds from there to the
end. The first compiled run is cold (inductor's cache in a fresh temporary directory);
later ones run in the same process, which has compiled the network already (a second
training on the same machine finds its kernels in the cache, but pays for tracing again).

Reported: each run's times, the steady speed-up (eager seconds over compiled seconds from
the first logged step on, per pair) and the warm-up (the compiled run's seconds to its
first logged step minus the eager run's).

    .venv/bin/python bench/set_train_speed.py --data data/pile_play800.zarr --steps 100
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any


def one_run(args: argparse.Namespace, data: Any, compiled: bool, out: Path) -> dict[str, Any]:
    """One fresh dynamics stage of ``args.steps`` steps; its timings."""
    import torch

    from factory.train import object_set as stages
    from factory.train.loop import Budget

    torch.manual_seed(0)
    config = stages.store_set_config(args.data, data)
    tc = dataclasses.replace(stages.STAGE_TRAIN["dynamics"], compile=compiled,
                             threads=args.threads, log_every=args.log_every,
                             checkpoint_every_s=1e9)  # fmt: skip
    marks: list[tuple[int, float]] = []
    t0 = time.monotonic()
    metrics = stages.train_set_part(
        "dynamics", data, out, config, Budget(steps=args.steps), train_cfg=tc,
        on_progress=lambda step, _total, _m: marks.append((step, time.monotonic() - t0)),
    )  # fmt: skip
    total = time.monotonic() - t0
    first_step, first_s = marks[0]
    return {"compiled": compiled, "first_logged_step": first_step,
            "to_first_logged_s": round(first_s, 2), "rest_s": round(total - first_s, 2),
            "total_s": round(total, 2), "loss": round(metrics["loss"], 4)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="a pile store (disc states)")
    ap.add_argument("--steps", type=int, default=100, help="steps per run")
    ap.add_argument("--repeats", type=int, default=2, help="eager/compiled pairs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=10)
    args = ap.parse_args()
    if not args.data.is_dir():
        ap.error(f"{args.data} is not a store")
    if args.steps <= args.log_every:
        ap.error("--steps must exceed --log-every")
    runs, pairs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{tmp}/inductor"  # the first compile: cold
        from factory.train.data import load_episode_data

        data = load_episode_data(args.data, need_task_state=True, frames=False)
        for r in range(args.repeats):
            pair = {}
            for compiled in (False, True):
                run = one_run(args, data, compiled, Path(tmp) / f"{r}_{int(compiled)}")
                runs.append(run)
                pair[compiled] = run
            pairs.append({
                "steady_speedup": round(pair[False]["rest_s"] / pair[True]["rest_s"], 3),
                "warmup_s": round(pair[True]["to_first_logged_s"]
                                  - pair[False]["to_first_logged_s"], 1),
                "cache": "cold" if r == 0 else "warm (this process compiled it already)",
            })  # fmt: skip
    report = {"data": str(args.data), "steps": args.steps, "threads": args.threads,
              "runs": runs, "pairs": pairs}  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
