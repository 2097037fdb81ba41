"""Pick the state policy on R alone (issue 20): candidates, one budget, one evaluation.

Every candidate is a lerobot ACT config (and a learning-rate schedule) from ``CANDIDATES``,
trained by ``factory policy train`` on the real demos' state export (``--data``, by default
the experiment's R100) with the same steps, batch and seed, checkpointed at ``--saves``,
and scored by ``lerobot-eval`` in the ground truth on ``--episodes`` selection seeds from
``--eval-seed`` (600000: disjoint from the experiment's 500000.., the demos' 300000.. and
the expert's 100000..). Prints one JSON object: per candidate and checkpoint, real success
and mean max reward, and each run's training wall and CPU seconds. Resumable: finished
runs and evaluations are kept (``--work``, one folder per candidate and step budget).

    .venv/bin/python bench/zero_real_select.py --candidates act128,act128_vae --steps 12000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import zero_real_report as report

BIN = Path(sys.executable).parent
ENV = {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
NORM = {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ENV": "MEAN_STD", "ACTION": "MEAN_STD"}
ACT128: dict[str, Any] = {
    "normalization_mapping": NORM, "dim_model": 128, "n_heads": 4, "dim_feedforward": 512,
    "n_encoder_layers": 2, "n_decoder_layers": 1, "chunk_size": 16, "n_action_steps": 16,
    "use_vae": False, "optimizer_lr": 3e-4,
}  # fmt: skip
VAE = {"use_vae": True, "n_vae_encoder_layers": 1}
CANDIDATES: dict[str, tuple[dict[str, Any], str]] = {
    "act128": (ACT128, "preset"),  # the experiment's default state policy
    "act128_vae": ({**ACT128, **VAE}, "preset"),
    "act128_cosine": (ACT128, "cosine"),
    "act128_vae_cosine": ({**ACT128, **VAE}, "cosine"),
}
HOME = Path.home() / ".cache" / "demofactory" / "runs"


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
    overrides, schedule = CANDIDATES[name]
    saves = ",".join(str(s) for s in a.saves)
    argv = [str(BIN / "factory"), "policy", "train", str(a.data), str(folder),
            "--repo-id", a.repo_id, "--policy", "act", "--config", json.dumps(overrides),
            "--steps", str(a.steps), "--batch-size", str(a.batch), "--save", saves,
            "--seed", str(a.seed), "--device", "cpu", "--lr-schedule", schedule,
            "--json"]  # fmt: skip
    folder.parent.mkdir(parents=True, exist_ok=True)
    return dict(json.loads(_run(argv, folder.with_suffix(".log"))))


def evaluate(a: argparse.Namespace, ckpt: Path, out: Path) -> dict[str, float]:
    """``lerobot-eval`` of one checkpoint in the ground truth (kept when done)."""
    if not (out / "eval_info.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(BIN / "lerobot-eval"), f"--policy.path={ckpt}", "--policy.device=cpu",
                "--env.type=pusht", "--eval.use_async_envs=false",
                "--env.obs_type=environment_state_agent_pos",
                f"--env.episode_length={a.episode_length}", f"--eval.n_episodes={a.episodes}",
                "--eval.batch_size=10", f"--seed={a.eval_seed}", f"--output_dir={out}"]  # fmt: skip
        _run(argv, out.with_suffix(".log"))
    return report.read_eval(out / "eval_info.json")


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    results: dict[str, Any] = {}
    for name in a.candidates:
        folder = a.work / f"{name}-{a.steps}"
        info = train(a, name, folder)
        scores = {}
        for step in sorted({*a.saves, a.steps}):
            ckpt = folder / "checkpoints" / f"{step:06d}" / "pretrained_model"
            scores[str(step)] = evaluate(a, ckpt, a.work / "eval" / folder.name / str(step))
        results[name] = {
            "overrides": CANDIDATES[name][0],
            "lr_schedule": CANDIDATES[name][1],
            "train_wall_s": info.get("wall_s"),
            "train_cpu_s": info.get("cpu_s"),
            "real": scores,
        }
    keys = ("data", "steps", "saves", "batch", "seed", "episodes", "eval_seed")
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
    ap.add_argument("--eval-seed", type=int, default=600000, help="first selection seed")
    ap.add_argument("--episode-length", type=int, default=300)
    a = ap.parse_args(argv)
    unknown = [c for c in a.candidates if c not in CANDIDATES]
    if unknown:
        ap.error(f"unknown candidates {unknown}; valid: {', '.join(CANDIDATES)}")
    if not (a.data / "meta" / "info.json").is_file():
        ap.error(f"{a.data} is not a LeRobot dataset; run bench/zero_real_data.py first")
    return a


if __name__ == "__main__":
    main()
