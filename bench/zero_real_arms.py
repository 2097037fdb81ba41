"""The policy arms of ``bench/zero_real_data.py``: each arm's export, training and
``lerobot-eval`` stages. ``state`` trains with ``factory policy train`` (lerobot's policy in
RAM), ``image`` with ``lerobot-train``; both are scored by the same ``lerobot-eval``."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zero_real_policies import state_policy
from zero_real_run import LEROBOT_ENV, Plan, Run, checkpoints, datasets, picked

OBS = {"state": "environment_state_agent_pos", "image": "pixels_agent_pos"}
Stage = Callable[[Run], None]


def stage_export(arm: str) -> Stage:
    def go(run: Run) -> None:
        p = run.plan
        for d in datasets(run, arm):
            out = p.path("lerobot", arm, d)
            if (out / "meta" / "info.json").is_file():
                continue
            sel = picked(run, d)
            assert sel is not None
            args = [
                "export", "lerobot", str(p.path("stores", f"{d[0]}.zarr")), str(out),
                "--repo-id", f"local/zero_real_{arm}_{d}", "--obs", OBS[arm],
                "--actions", p.actions,
                "--episodes", ",".join(str(i) for i in sel), "--overwrite", "--json",
            ]  # fmt: skip
            run.cmd(f"export_{arm}", "factory", args)

    return go


def _state_args(run: Run, d: str) -> list[str] | None:
    """``factory policy train``'s arguments for dataset ``d`` (None: already trained)."""
    p = run.plan
    run_dir = p.path("train", "state", d)
    steps, saves = p.state_schedule(d)
    if steps in checkpoints(run_dir):
        return None
    return state_train_args(p, d, run_dir, steps, saves)


def state_train_args(p: Plan, d: str, run_dir: Path, steps: int, saves: list[int]) -> list[str]:
    """``factory policy train``'s arguments for the state policy on dataset ``d``: ``steps``
    updates into ``run_dir``, checkpointed at ``saves`` (and the last step)."""
    return [
        "policy", "train", str(p.path("lerobot", "state", d)), str(run_dir),
        "--repo-id", f"local/zero_real_state_{d}", *state_policy(p.state_policy).train_args(),
        "--steps", str(steps), "--batch-size", str(p.state_batch),
        "--save", ",".join(str(s) for s in saves), "--seed", str(p.train_seed),
        "--device", p.device, "--json",
    ]  # fmt: skip


def _image_args(run: Run, d: str) -> list[str] | None:
    """``lerobot-train``'s arguments for dataset ``d``: a resume from its last checkpoint,
    or a fresh run (a started one without a checkpoint is removed); None: already trained."""
    p = run.plan
    run_dir = p.path("train", "image", d)
    if p.image_steps in checkpoints(run_dir):
        return None
    last = run_dir / "checkpoints" / "last" / "pretrained_model" / "train_config.json"
    if last.is_file():
        return [f"--config_path={last}", "--resume=true"]
    if run_dir.exists():
        shutil.rmtree(run_dir)  # started, no checkpoint yet
    return image_train_args(p, d, run_dir)


def image_train_args(p: Plan, d: str, run_dir: Path) -> list[str]:
    """``lerobot-train``'s arguments for a fresh image run on dataset ``d`` into ``run_dir``."""
    return [
        f"--dataset.repo_id=local/zero_real_image_{d}",
        f"--dataset.root={p.path('lerobot', 'image', d)}",
        "--dataset.video_backend=pyav",
        *shlex.split(p.image_policy),
        f"--policy.device={p.device}",
        "--policy.push_to_hub=false",
        f"--steps={p.image_steps}",
        f"--save_freq={p.image_steps // p.image_lengths}",
        f"--batch_size={p.image_batch}",
        f"--num_workers={p.num_workers}",
        "--log_freq=50",
        f"--seed={p.train_seed}",
        "--wandb.enable=false",
        f"--output_dir={run_dir}",
    ]


def stage_train(arm: str) -> Stage:
    """Train the arm's datasets that lack their last checkpoint, ``run.jobs`` at a time."""

    def go(run: Run) -> None:
        pending = {}
        for d in datasets(run, arm):
            args = (_state_args if arm == "state" else _image_args)(run, d)
            if args is not None:
                pending[d] = args
        names = list(pending)

        def record(i: int, info: Any) -> None:  # the state runs' own timing and loss
            runs = run.stage("train_state").setdefault("runs", {})
            runs[names[i]] = {
                k: info.get(k) for k in ("wall_s", "cpu_s", "loss_last_100", "frames")
            }
            run.save()

        exe = "factory" if arm == "state" else "lerobot-train"
        run.cmds(f"train_{arm}", exe, list(pending.values()), env=LEROBOT_ENV,
                 on_done=record if arm == "state" else None)  # fmt: skip

    return go


def eval_args(p: Plan, arm: str, policy: Path, world: str, out: Path) -> list[str]:
    """``lerobot-eval`` of one checkpoint in the ground truth or inside the model."""
    env = (
        ["--env.type=pusht", "--eval.use_async_envs=false"]
        if world == "real"
        else [
            "--env.type=demofactory",
            f"--env.device={p.device}",
            *([f"--env.model={p.model}"] if p.model else []),
        ]
    )
    return [
        f"--policy.path={policy}",
        f"--policy.device={p.device}",
        *env,
        f"--env.obs_type={OBS[arm]}",
        f"--env.episode_length={p.episode_length}",
        f"--eval.n_episodes={p.episodes}",
        f"--eval.batch_size={p.eval_batch}",
        f"--seed={p.eval_seed}",
        f"--output_dir={out}",
    ]


def stage_eval(arm: str, worlds: tuple[str, ...]) -> Stage:
    """Score every checkpoint without its ``eval_info.json`` in each world, ``run.jobs``
    at a time."""

    def go(run: Run) -> None:
        p = run.plan
        pending = []
        for d in datasets(run, arm):
            for step, policy in sorted(checkpoints(p.path("train", arm, d)).items()):
                for world in worlds:
                    out = p.path("eval", arm, d, str(step), world)
                    if (out / "eval_info.json").is_file():
                        continue
                    if out.exists():
                        shutil.rmtree(out)
                    pending.append(eval_args(p, arm, policy, world, out))
        run.cmds(f"eval_{arm}", "lerobot-eval", pending, env=LEROBOT_ENV)

    return go
