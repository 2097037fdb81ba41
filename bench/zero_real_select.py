"""Pick the state policy on R alone (issue 20): candidates, one budget, one evaluation.

Every candidate is a lerobot policy config (ACT, or a small diffusion policy that sees two
observation steps, so the agent's velocity too), a learning-rate schedule and an EMA
(``zero_real_policies.CANDIDATES``), trained by ``factory policy train`` on the real
demos' state export (``--data``, by default the experiment's R100) with the same steps,
batch and seed, checkpointed at ``--saves``, and scored by ``lerobot-eval`` in the ground
truth on ``--episodes`` selection seeds from ``--eval-seed`` (600000: disjoint from the
experiment's 500000.., the demos' 300000.. and the expert's 100000..). Prints one JSON
object: per candidate and checkpoint, real success and mean max reward, and each run's
training wall and CPU seconds. Resumable: finished runs and evaluations are kept
(``--work``, one folder per candidate and step budget).

The demonstrations are a candidate too. With ``--demos-noise`` or ``--expert-param`` the
bench records its own 100 real demos instead of reading ``--data``: the expert from seed
300000 (``factory collect``, rounds of 120 seeds until 100 succeed), with DART noise
injection (``--action-noise``: the expert's clean labels are exported as the actions)
and/or the expert's knobs changed (``--param``), into ``WORK/demos-<tag>/``; runs then go
to ``WORK/<tag>/``.

    .venv/bin/python bench/zero_real_select.py --candidates act128,act128_vae --steps 12000
    .venv/bin/python bench/zero_real_select.py --candidates act128 --demos-noise 6
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import zero_real_report as report
from zero_real_policies import CANDIDATES
from zero_real_run import usable

BIN = Path(sys.executable).parent
ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
HOME = Path.home() / ".cache" / "demofactory" / "runs"
SELECTION_SEED = 600000  # the selection seeds' first: disjoint from every other seed range


def _run(argv: list[str], log: Path) -> str:
    with log.open("w") as err:
        out = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=err, text=True, env={**os.environ, **ENV}
        )
    if out.returncode != 0:
        raise SystemExit(f"command failed (exit {out.returncode}); see {log}")
    return out.stdout


def train(a: argparse.Namespace, name: str, folder: Path) -> dict[str, Any]:
    """One candidate's run (kept when its ``train_info.json`` exists)."""
    info = folder / "train_info.json"
    if info.is_file():
        return dict(json.loads(info.read_text()))
    saves = ",".join(str(s) for s in a.saves)
    argv = [str(BIN / "factory"), "policy", "train", str(a.data), str(folder),
            "--repo-id", a.repo_id, *CANDIDATES[name].train_args(),
            "--steps", str(a.steps), "--batch-size", str(a.batch), "--save", saves,
            "--seed", str(a.seed), "--device", "cpu", "--json"]  # fmt: skip
    folder.parent.mkdir(parents=True, exist_ok=True)
    return dict(json.loads(_run(argv, folder.with_suffix(".log"))))


def evaluate(a: argparse.Namespace, ckpt: Path, out: Path) -> dict[str, float]:
    """``lerobot-eval`` of one checkpoint in the ground truth (kept when done), with its
    wall time (``wall_s``, kept in ``out/wall.json``)."""
    if not (out / "eval_info.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(BIN / "lerobot-eval"), f"--policy.path={ckpt}", "--policy.device=cpu",
                "--env.type=pusht", "--eval.use_async_envs=false",
                "--env.obs_type=environment_state_agent_pos",
                f"--env.episode_length={a.episode_length}", f"--eval.n_episodes={a.episodes}",
                f"--eval.batch_size={a.eval_batch}", f"--seed={a.eval_seed}",
                f"--output_dir={out}", *(f"--policy.{item}" for item in a.eval_policy)]  # fmt: skip
        t0 = time.monotonic()
        _run(argv, out.with_suffix(".log"))
        (out / "wall.json").write_text(json.dumps({"wall_s": round(time.monotonic() - t0, 1)}))
    wall = out / "wall.json"
    took = json.loads(wall.read_text()) if wall.is_file() else {}
    return {**report.read_eval(out / "eval_info.json"), **took}


def demos_tag(a: argparse.Namespace) -> str | None:
    """The demonstrations' folder tag (``noise6``, ``settle_tol4``, ...), None for ``--data``."""
    parts = [f"noise{a.demos_noise:g}"] if a.demos_noise else []
    parts += [item.replace("=", "").replace(".", "p") for item in a.expert_param]
    return "-".join(parts) or None


def record_demos(a: argparse.Namespace, tag: str) -> Path:
    """The bench's own 100 real expert demos (kept when exported), their state export."""
    folder = a.work / f"demos-{tag}"
    export, store = folder / "R100", folder / "R.zarr"
    if (export / "meta" / "info.json").is_file():
        return export
    folder.mkdir(parents=True, exist_ok=True)
    knobs = [x for item in a.expert_param for x in ("--param", item)]
    noise = ["--action-noise", str(a.demos_noise)] if a.demos_noise else []
    for r in range(3):
        if len(usable(store, True)) >= 100:
            break
        argv = [str(BIN / "factory"), "collect", "--env", "pusht", "--generator", "expert",
                "--episodes", str(120 * (r + 1)), "--steps", "300", "--seed", "300000",
                *noise, *knobs, "--out", str(store), "--json",
                *(["--append"] if store.exists() else [])]  # fmt: skip
        _run(argv, folder / f"collect{r}.log")
    picked = sorted(i for _, i in usable(store, True)[:100])
    if len(picked) < 100:
        raise SystemExit(f"only {len(picked)} of 360 demos succeeded; see {folder}")
    argv = [str(BIN / "factory"), "export", "lerobot", str(store), str(export),
            "--repo-id", f"local/zero_real_select_{tag}", "--obs", "environment_state_agent_pos",
            "--actions", "label" if a.demos_noise else "executed",
            "--episodes", ",".join(map(str, picked)), "--overwrite", "--json"]  # fmt: skip
    _run(argv, folder / "export.log")
    return export


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    tag = demos_tag(a)
    if tag is not None:
        a.data, a.repo_id = record_demos(a, tag), f"local/zero_real_select_{tag}"
        a.work = a.work / tag
    results: dict[str, Any] = {}
    for name in a.candidates:
        folder = a.work / f"{name}-{a.steps}"
        info = train(a, name, folder)
        scores = {}
        for step in sorted({*a.saves, a.steps}):
            ckpt = folder / "checkpoints" / f"{step:06d}" / "pretrained_model"
            tail = "".join(f"-{x.replace('=', '')}" for x in a.eval_policy)
            tail += "" if a.eval_batch == 10 else f"-batch{a.eval_batch}"  # 10: the old runs
            tail += "" if a.eval_seed == SELECTION_SEED else f"-seed{a.eval_seed}"
            out = a.work / "eval" / folder.name / f"{step}{tail}"
            scores[f"{step}{tail}"] = evaluate(a, ckpt, out)
        results[name] = {
            **CANDIDATES[name].record(),
            "train_wall_s": info.get("wall_s"),
            "train_cpu_s": info.get("cpu_s"),
            "real": scores,
        }
    keys = ("data", "steps", "saves", "batch", "seed", "episodes", "eval_seed", "demos_noise",
            "expert_param", "eval_policy", "eval_batch")  # fmt: skip
    setup = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items() if k in keys}
    print(json.dumps({"setup": setup, "candidates": results}, indent=1))


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", type=lambda t: t.split(","), default=list(CANDIDATES),
                    help=f"comma-separated, of {', '.join(CANDIDATES)}")  # fmt: skip
    ap.add_argument("--data", type=Path, default=HOME / "zero_real_data/lerobot/state/R100")
    ap.add_argument("--repo-id", default="local/zero_real_state_R100")
    ap.add_argument("--work", type=Path, default=HOME / "zr_select")
    ap.add_argument("--steps", type=int, default=12000, help="training steps (12000)")
    ap.add_argument("--saves", type=lambda t: [int(x) for x in t.split(",")],
                    default=[4000, 8000], help="also checkpoint at (4000,8000)")  # fmt: skip
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--episodes", type=int, default=50, help="selection episodes (50)")
    ap.add_argument("--eval-seed", type=int, default=SELECTION_SEED, help="first selection seed")
    ap.add_argument("--episode-length", type=int, default=300)
    ap.add_argument("--eval-batch", type=int, default=10, help="lerobot-eval's batch (10)")
    ap.add_argument("--eval-policy", action="append", default=[], metavar="KEY=VALUE",
                    help="evaluate with this policy setting changed (lerobot-eval "
                    "--policy.KEY=VALUE, e.g. n_action_steps=4; repeatable)")  # fmt: skip
    ap.add_argument(
        "--demos-noise",
        type=float,
        default=0.0,
        help="record the bench's own demos with DART noise of this px std",
    )
    ap.add_argument(
        "--expert-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="record the bench's own demos with this expert knob (repeatable)",
    )
    a = ap.parse_args(argv)
    unknown = [c for c in a.candidates if c not in CANDIDATES]
    if unknown:
        ap.error(f"unknown candidates {unknown}; valid: {', '.join(CANDIDATES)}")
    if not (a.demos_noise >= 0 and a.demos_noise < float("inf")):
        ap.error(f"--demos-noise must be a finite number >= 0, got {a.demos_noise}")
    if demos_tag(a) is None and not (a.data / "meta" / "info.json").is_file():
        ap.error(f"{a.data} is not a LeRobot dataset; run bench/zero_real_data.py first")
    return a


if __name__ == "__main__":
    main()
