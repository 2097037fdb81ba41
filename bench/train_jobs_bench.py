"""The experiment's commands one at a time on every core, against several side by side with
a share of the cores each (``bench/zero_real_data.py --jobs``, issue 20's 3-hour budget).

    W=~/.cache/demofactory/runs/zero_real_data
    .venv/bin/python bench/train_jobs_bench.py --work $W --dataset R100 --steps 1000
    .venv/bin/python bench/train_jobs_bench.py --work $W --what eval --world real|model
    .venv/bin/python bench/train_jobs_bench.py --work $W --what image --steps 100

``--jobs`` copies of one of the experiment's commands, built by its own stages' builders
from the default settings and WORK's exports and checkpoints, run through its own
:meth:`zero_real_run.Run.cmds`: first with ``jobs=1`` (one after another, torch's own
thread count: ``sequential``), then with ``jobs=--jobs`` (all at once, each with
:func:`zero_real_run.threads_per_job` threads: ``side_by_side``). The command is
``--what``:

- ``train``: ``factory policy train`` of the state policy on ``--dataset``'s export,
  ``--steps`` steps, one checkpoint at the end;
- ``eval``: ``lerobot-eval`` of ``--dataset``'s last state checkpoint on ``--episodes``
  evaluation seeds, in the ground truth or inside the shipped model (``--world``);
- ``image``: ``lerobot-train`` of the image ACT on ``--dataset``'s image export,
  ``--steps`` steps.

``ratio`` is the sequential wall time over the side-by-side one: above 1 means side by
side does more work per second. Start-up (imports, the dataset or model read) is inside
both. The runs' logs go to a temporary folder. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import zero_real_data
from zero_real_arms import eval_args, image_train_args, state_train_args
from zero_real_run import LEROBOT_ENV, Plan, Run, StageError, checkpoints

Command = tuple[str, Callable[[Path], list[str]]]  # (executable, arguments given an output)


def _command(ap: argparse.ArgumentParser, a: argparse.Namespace) -> Command:
    """The command to time; exit 2 on bad input."""
    if a.steps < 1 or a.episodes < 1 or a.jobs < 2:
        ap.exit(2, "train_jobs_bench: --steps and --episodes must be >= 1 and --jobs >= 2\n")
    plan = zero_real_data.parse(["--work", str(a.work)])[0]
    d = a.dataset
    if a.what == "image":
        p = dataclasses.replace(plan, image_steps=a.steps, image_lengths=1)
        _need(
            ap, p.path("lerobot", "image", d, "meta", "info.json"), f"{a.work}: no image export {d}"
        )
        return "lerobot-train", lambda out: image_train_args(p, d, out)
    if a.what == "eval":
        p = dataclasses.replace(plan, episodes=a.episodes, eval_batch=min(a.episodes, 50))
        found = checkpoints(p.path("train", "state", d))
        if not found:
            ap.exit(2, f"train_jobs_bench: {a.work} has no state checkpoint of {d}\n")
        last = found[max(found)]
        return "lerobot-eval", lambda out: eval_args(p, "state", last, a.world, out)
    _need(
        ap, plan.path("lerobot", "state", d, "meta", "info.json"), f"{a.work}: no state export {d}"
    )
    return "factory", lambda out: state_train_args(plan, d, out, a.steps, [a.steps])


def _need(ap: argparse.ArgumentParser, path: Path, why: str) -> None:
    if not path.is_file():
        ap.exit(2, f"train_jobs_bench: {why}\n")


def timed(plan: Plan, exe: str, arg_lists: list[list[str]], jobs: int) -> float:
    """Wall seconds of the commands through :meth:`Run.cmds` with ``jobs`` (logs under
    ``plan.work``); exit 1 when one fails."""
    run = Run(plan, jobs=jobs)
    t0 = time.monotonic()
    try:
        run.cmds("bench", exe, arg_lists, env=LEROBOT_ENV)
    except StageError as err:
        sys.exit(f"train_jobs_bench: {err}")
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="the experiment's WORK")
    ap.add_argument("--what", choices=("train", "eval", "image"), default="train")
    ap.add_argument("--dataset", default="R100", help="one of WORK's datasets (R100, R30, ...)")
    ap.add_argument("--steps", type=int, default=300, help="train, image: steps per run")
    ap.add_argument("--episodes", type=int, default=50, help="eval: episodes per run")
    ap.add_argument("--world", choices=("real", "model"), default="real", help="eval: where")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    exe, args = _command(ap, a)
    with tempfile.TemporaryDirectory(prefix="train_jobs_") as tmp:
        walls = {}
        for name, jobs in (("sequential", 1), ("side_by_side", a.jobs)):
            plan = zero_real_data.parse(["--work", str(Path(tmp, name))])[0]
            outs = [Path(tmp, name, f"out{i}") for i in range(a.jobs)]
            walls[name] = timed(plan, exe, [args(o) for o in outs], jobs)
    res = {
        "what": a.what,
        "dataset": a.dataset,
        "world": a.world if a.what == "eval" else None,
        "steps_each": None if a.what == "eval" else a.steps,
        "episodes_each": a.episodes if a.what == "eval" else None,
        "jobs": a.jobs,
        "cpus": os.cpu_count(),
        "sequential_wall_s": round(walls["sequential"], 1),
        "side_by_side_wall_s": round(walls["side_by_side"], 1),
        "ratio": round(walls["sequential"] / walls["side_by_side"], 3),
    }
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
