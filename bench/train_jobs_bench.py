"""The experiment's commands one at a time on every core, against several side by side with
one torch thread each (``bench/zero_real_data.py --jobs``, issue 20's 3-hour budget).

    .venv/bin/python bench/train_jobs_bench.py --data WORK/lerobot/state/R30 \\
        --repo-id local/zero_real_state_R30 [--steps 300] [--jobs 2]
    .venv/bin/python bench/train_jobs_bench.py \\
        --eval WORK/train/state/R30/checkpoints/003300/pretrained_model [--world real|model]
    .venv/bin/python bench/train_jobs_bench.py --image WORK [--steps 100]

``--jobs`` copies of the same command, run first one after another with torch's own
thread count (``sequential``), then all at once with ``OMP_NUM_THREADS=1``
(``side_by_side``), in the same run of this bench. The command is ``factory policy
train`` of the default state policy (``--steps`` steps, batch 64) or, with ``--eval``,
the experiment's ``lerobot-eval`` of that checkpoint (state observations, ``--episodes``
held-out seeds at batch 50, in the ground truth or inside the shipped model) or, with
``--image WORK``, the experiment's ``lerobot-train`` of the image ACT on WORK's R100
export (its own settings, ``--steps`` steps). ``ratio``
is the sequential wall time over the side-by-side one: above 1 means side by side does
more work per second. Start-up (imports, the dataset or model read) is inside both.
Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zero_real_data
from zero_real_arms import image_train_args
from zero_real_data import FULL
from zero_real_policies import state_policy
from zero_real_run import BIN, LEROBOT_ENV


def command(data: Path, repo_id: str, out: Path, steps: int) -> list[str]:
    """``factory policy train`` of the default state policy into ``out``."""
    return [
        str(BIN / "factory"), "policy", "train", str(data), str(out), "--repo-id", repo_id,
        *state_policy(str(FULL["state_policy"])).train_args(), "--steps", str(steps),
        "--batch-size", str(FULL["state_batch"]), "--save", str(steps), "--seed", "1000",
        "--device", "cpu", "--json",
    ]  # fmt: skip


def eval_command(policy: Path, out: Path, episodes: int, world: str) -> list[str]:
    """The experiment's ``lerobot-eval`` of a state checkpoint into ``out``."""
    env = (["--env.type=pusht", "--eval.use_async_envs=false"] if world == "real"
           else ["--env.type=demofactory", "--env.device=cpu"])  # fmt: skip
    return [
        str(BIN / "lerobot-eval"), f"--policy.path={policy}", "--policy.device=cpu", *env,
        "--env.obs_type=environment_state_agent_pos", "--env.episode_length=300",
        f"--eval.n_episodes={episodes}", f"--eval.batch_size={min(episodes, 50)}",
        "--seed=500000", f"--output_dir={out}",
    ]  # fmt: skip


def run_all(cmds: list[list[str]], env: dict[str, str], at_once: bool) -> float:
    """Wall seconds of the commands, one after another or all at once; exit 1 on a failure."""
    t0 = time.monotonic()
    full_env = {**os.environ, **LEROBOT_ENV, **env}
    if at_once:
        procs = [subprocess.Popen(c, env=full_env, stdout=subprocess.DEVNULL) for c in cmds]
        codes = [p.wait() for p in procs]
    else:
        codes = [
            subprocess.run(c, env=full_env, stdout=subprocess.DEVNULL).returncode for c in cmds
        ]
    if any(codes):
        sys.exit(f"train_jobs_bench: a training failed (exit {max(codes)})")
    return time.monotonic() - t0


def _commands(ap: argparse.ArgumentParser, a: argparse.Namespace) -> Callable[[Path], list[str]]:
    """The command to time, as a function of its output folder; exit 2 on bad input."""
    if a.steps < 1 or a.episodes < 1 or a.jobs < 2:
        ap.exit(2, "train_jobs_bench: --steps and --episodes must be >= 1 and --jobs >= 2\n")
    if a.image is not None:
        plan = dataclasses.replace(zero_real_data.parse(["--work", str(a.image)])[0],
                                   image_steps=a.steps, image_lengths=1)  # fmt: skip
        if not plan.path("lerobot", "image", "R100", "meta", "info.json").is_file():
            ap.exit(2, f"train_jobs_bench: {a.image} has no image export R100\n")
        return lambda out: [str(BIN / "lerobot-train"), *image_train_args(plan, "R100", out)]
    if a.eval is not None:
        if not (a.eval / "config.json").is_file():
            ap.exit(2, f"train_jobs_bench: {a.eval} is not a policy checkpoint (no config.json)\n")
        return lambda out: eval_command(a.eval, out, a.episodes, a.world)
    if a.data is None or a.repo_id is None or not (a.data / "meta" / "info.json").is_file():
        ap.exit(2, "train_jobs_bench: --data must be a LeRobot dataset, with --repo-id\n")
    return lambda out: command(a.data, a.repo_id, out, a.steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="a state-only LeRobot export (training)")
    ap.add_argument("--repo-id", help="its repo id (training)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval", type=Path, help="a state checkpoint: time lerobot-eval instead")
    ap.add_argument("--image", type=Path, help="the experiment's WORK: time its image training")
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--world", choices=("real", "model"), default="real")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    cmd = _commands(ap, a)
    with tempfile.TemporaryDirectory(prefix="train_jobs_") as tmp:
        seq = run_all([cmd(Path(tmp, f"seq{i}")) for i in range(a.jobs)], {}, False)
        par = run_all([cmd(Path(tmp, f"par{i}")) for i in range(a.jobs)],
                      {"OMP_NUM_THREADS": "1"}, True)  # fmt: skip
    what = "policy train"
    if a.image is not None:
        what = "lerobot-train image ACT"
    elif a.eval is not None:
        what = f"lerobot-eval ({a.world}, {a.episodes} episodes)"
    res: dict[str, Any] = {
        "what": what,
        "jobs": a.jobs,
        "steps_each": None if a.eval is not None and a.image is None else a.steps,
        "cpus": os.cpu_count(),
        "sequential_wall_s": round(seq, 1),
        "side_by_side_wall_s": round(par, 1),
        "ratio": round(seq / par, 3),
    }
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
