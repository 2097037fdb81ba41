"""Issue 14: zero-real-data imitation learning, and policy evaluation inside the world model,
measured with lerobot's own tools. One command, resumable stage by stage:

    .venv/bin/python bench/zero_real_data.py            # the experiment (about 1.5 h, 2-core CPU)
    .venv/bin/python bench/zero_real_data.py --tiny     # a smoke run of every stage (minutes)

Run it from the repository root; rerun the same command after an interruption. Stages:

- **R**: N real expert demonstrations (``factory collect --generator expert`` in gym-pusht,
  seeds 300000+; the first N successful ones, by seed).
- **G**: N demonstrations generated inside the model (``factory generate --generator expert
  --only-success``; the only real input is the seeded reset frame). Rounds of N fresh seeds
  until N are kept or ``--max-rounds`` rounds are spent; fewer is reported, not hidden.
- **transfer**: G's demos replayed open loop in the ground truth from the same seeded
  reset (``factory eval transfer``): how many generated successes are real ones.
- **null**: the floor of each world: a policy that holds the agent still, scored on the
  evaluation seeds in the ground truth and inside the model.
- **M**: N/2 of R and N/2 of G (other start seeds than the R half), merged into one store
  (``factory.store.merge_stores``).
- **export**: ``factory export lerobot`` of each (video, lerobot's default codec).
- **train**: one ``lerobot-train`` config, the same steps and seed on each, with a checkpoint
  every steps/lengths steps (4 training lengths -> 12 checkpoints over 3 datasets).
- **eval**: ``lerobot-eval`` of every checkpoint on the same held-out seeds (500000 +
  episode index, never used for demos or the shipped model's data) in the ground truth
  (``--env.type=pusht --eval.use_async_envs=false``) and inside the model
  (``--env.type=demofactory``).
- **report**: ``docs/results/zero_real_data.json`` (issue 14's keys, plus per-checkpoint rows,
  an agreement on mean max reward and the targets) and ``docs/results/zero_real_data.png``.

``WORK/state.json`` records the config, every command as it ran (with its exit status, wall
time and log under ``WORK/logs/``) and each stage's wall time; a finished stage, export,
checkpoint or evaluation is never redone, and an interrupted ``lerobot-train`` resumes from
its last checkpoint. A work directory made with other settings is refused (exit 2).

Defaults, sized by measurement on the quiet 2-core CPU (the pilot run, N=40 and 800 steps,
took 44 min: ``docs/results/zero_real_data_pilot.json``):

- Policy: ACT, ``dim_model`` 256, ``dim_feedforward`` 1024, 2 encoder layers, 1 decoder
  layer, chunk 20, no VAE, ResNet-18 from scratch, batch 32. Measured 0.43 to 0.45 s/step
  (about 73 samples/s) on a quiet machine; the issue's 1.3 s/step was measured under load, and
  diffusion was 1.7x slower per step with 100 denoising steps per action chunk at
  evaluation. ``n_action_steps`` 10: the policy replans every second, so it reacts to
  what each world shows it. Learning rate 1e-4 (ACT's preset 1e-5 is for fine-tuning a
  pretrained backbone over 100k steps; here the backbone starts from scratch). Not tuned
  on the evaluation seeds.
- Steps 2,000 per dataset (checkpoints at 500, 1,000, 1,500, 2,000): 3 x 2,000 steps took
  44 min; at batch 32 that is 64k samples, about 8 epochs of N=100 expert episodes
  of about 76 frames.
- N = 100 demonstrations per dataset: the scale of PushT's human-demo benchmarks (about
  200) halved. R collects 100 in about 25 s. G keeps 3 to 4% of the seeds it tries
  (the model's expert rarely succeeds inside it) at about 82 frames/s (batch 16), about
  6 min per 100 seeds: ``--max-rounds`` 2 caps it at 200 seeds, about 12.5 min.
- Evaluation: 50 episodes of at most 300 steps per checkpoint and world, batch 10: about
  51 s per checkpoint in the ground truth and 73 s inside the model, start-up
  included; 24 runs, 25 min.
- Total: about 1 h 30 min on a quiet machine; ``wall_s`` in the JSON says what it took.
  Under CPU contention the in-model evaluation slows far more than the ground truth's
  (torch threads fighting for the cores): run it alone.

"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zero_real_report as report
from zero_real_run import (
    BIN,
    LEROBOT_ENV,
    Plan,
    Run,
    StageError,
    checkpoints,
    datasets,
    hold_still,
    score_rows,
    usable,
)

from factory.store import EpisodeStore, merge_stores

log = logging.getLogger("zero_real_data")
REPO = Path(__file__).resolve().parent.parent
STAGES = ("R", "G", "transfer", "null", "M", "export", "train", "eval", "report")

ACT = (
    "--policy.type=act --policy.pretrained_backbone_weights=null --policy.dim_model=256 "
    "--policy.n_heads=8 --policy.dim_feedforward=1024 --policy.n_encoder_layers=2 "
    "--policy.n_decoder_layers=1 --policy.chunk_size=20 --policy.n_action_steps=10 "
    "--policy.use_vae=false --policy.optimizer_lr=1e-4 --policy.optimizer_lr_backbone=1e-4"
)
ACT_TINY = (
    "--policy.type=act --policy.pretrained_backbone_weights=null --policy.dim_model=64 "
    "--policy.n_heads=2 --policy.dim_feedforward=128 --policy.n_encoder_layers=1 "
    "--policy.n_decoder_layers=1 --policy.chunk_size=8 --policy.n_action_steps=8"
)
FULL: dict[str, Any] = dict(
    work="runs/zero_real_data",
    n=100,
    steps=2000,
    lengths=4,
    batch=32,
    episodes=50,
    eval_batch=10,
    episode_length=300,
    num_workers=2,
    policy=ACT,
)
TINY: dict[str, Any] = dict(
    work="runs/zero_real_data_tiny",
    n=2,
    steps=4,
    lengths=2,
    batch=4,
    episodes=2,
    eval_batch=2,
    episode_length=50,
    num_workers=0,
    policy=ACT_TINY,
)


# ---------------------------------------------------------------- demonstrations
def _rounds(
    run: Run, stage: str, store: Path, only_success: bool, base: list[str], env: dict[str, str]
) -> dict:
    """Rounds of N fresh seeds until N usable episodes or ``max_rounds`` rounds."""
    p, st = run.plan, run.stage(stage)
    while len(usable(store, only_success)) < p.n and st.get("rounds_done", 0) < p.max_rounds:
        r = st.get("rounds_done", 0)
        seed = p.demo_seed + r * p.n
        args = [
            *base,
            "--episodes",
            str(p.n),
            "--steps",
            str(p.demo_steps),
            "--seed",
            str(seed),
            "--out",
            str(store),
            "--json",
            *(["--append"] if store.exists() else []),
        ]
        run.cmd(stage, "factory", args, env=env)
        st["rounds_done"] = r + 1
        run.save()
    got = usable(store, only_success)
    stored = 0
    if store.exists():
        with EpisodeStore.open(store) as s:
            stored = s.n_episodes
    tried = st.get("rounds_done", 0) * p.n
    if len(got) < p.n:
        run.note(f"{stage}: {len(got)} usable demos of {p.n} after {tried} seeds tried")
    return {"seeds_tried": tried, "stored": stored, "usable": len(got), "used": min(p.n, len(got))}


def stage_r(run: Run) -> dict:
    base = ["collect", "--env", "pusht", "--generator", "expert"]
    return _rounds(run, "R", run.plan.path("stores", "R.zarr"), True, base, {})


def stage_g(run: Run) -> dict:
    p = run.plan
    base = [
        "generate",
        "--generator",
        "expert",
        "--batch-size",
        str(p.gen_batch),
        "--workers",
        "1",
        "--device",
        p.device,
        *([] if p.g_all else ["--only-success"]),
        *(["--model", p.model] if p.model else []),
    ]
    if p.g_all:
        run.note("G keeps failed generated episodes (--g-all): a plumbing check, not a result")
    return _rounds(run, "G", p.path("stores", "G.zarr"), not p.g_all, base, {})


def stage_transfer(run: Run) -> dict | None:
    """Replay G's demos open loop in the ground truth (``factory eval transfer``): do the
    generated successes succeed in the real task? Demos only, before any policy."""
    store = run.plan.path("stores", "G.zarr")
    if not usable(store, not run.plan.g_all):
        return None
    out = run.cmd("transfer", "factory", ["eval", "transfer", str(store), "--json"])
    keys = ("model_success", "real_success", "block_err_px_median", "angle_err_deg_median")
    return {k: out.get(k) for k in keys} | {"episodes": len(out.get("per_episode", []))}


def stage_null(run: Run) -> dict:
    """The floor in each world: a policy that holds the agent still, on the eval seeds."""
    return {world: hold_still(run.plan, world) for world in report.WORLDS}


def stage_m(run: Run) -> dict:
    p = run.plan
    r_store, g_store, m_store = (p.path("stores", f"{d}.zarr") for d in "RGM")
    half = p.n // 2
    r_pick = usable(r_store, True)[:half]
    taken = {seed for seed, _ in r_pick}
    g_pick = [x for x in usable(g_store, not p.g_all) if x[0] not in taken][: p.n - half]
    if not g_pick:
        run.note("M: no generated demos to mix; M not built")
        return {"skipped": True}
    if m_store.exists():
        shutil.rmtree(m_store)  # an interrupted merge
    sel = [[i for _, i in r_pick], [i for _, i in g_pick]]
    merge_stores([r_store, g_store], m_store, episodes=sel, attrs={"zero_real_data": "M"})
    run.state["commands"].append(
        {
            "stage": "M",
            "rc": 0,
            "wall_s": 0.0,
            "cmd": (
                f"python: factory.store.merge_stores([{str(r_store)!r}, {str(g_store)!r}], "
                f"{str(m_store)!r}, episodes={sel})"
            ),
        }
    )
    return {"real": len(r_pick), "generated": len(g_pick)}


# ---------------------------------------------------------------- lerobot
def stage_export(run: Run) -> None:
    p = run.plan
    for d in datasets(run):
        out = p.path("lerobot", d)
        if (out / "meta" / "info.json").is_file():
            continue
        args = [
            "export",
            "lerobot",
            str(p.path("stores", f"{d}.zarr")),
            str(out),
            "--repo-id",
            f"local/zero_real_{d}",
            "--json",
        ]
        if d in "RG":
            picked = usable(p.path("stores", f"{d}.zarr"), d == "R" or not p.g_all)[: p.n]
            args += ["--episodes", ",".join(str(i) for _, i in picked)]
        run.cmd("export", "factory", args)


def stage_train(run: Run) -> None:
    p = run.plan
    for d in datasets(run):
        run_dir = p.path("train", d)
        if p.steps in checkpoints(run_dir):
            continue
        last = run_dir / "checkpoints" / "last" / "pretrained_model" / "train_config.json"
        if last.is_file():
            resume = [f"--config_path={last}", "--resume=true"]
            run.cmd("train", "lerobot-train", resume, env=LEROBOT_ENV)
            continue
        if run_dir.exists():
            shutil.rmtree(run_dir)  # started, no checkpoint yet
        args = [
            f"--dataset.repo_id=local/zero_real_{d}",
            f"--dataset.root={p.path('lerobot', d)}",
            "--dataset.video_backend=pyav",
            *shlex.split(p.policy),
            f"--policy.device={p.device}",
            "--policy.push_to_hub=false",
            f"--steps={p.steps}",
            f"--save_freq={p.steps // p.lengths}",
            f"--batch_size={p.batch}",
            f"--num_workers={p.num_workers}",
            "--log_freq=50",
            f"--seed={p.train_seed}",
            "--wandb.enable=false",
            f"--output_dir={run_dir}",
        ]
        run.cmd("train", "lerobot-train", args, env=LEROBOT_ENV)


def eval_args(p: Plan, policy: Path, world: str, out: Path) -> list[str]:
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
        f"--env.episode_length={p.episode_length}",
        f"--eval.n_episodes={p.episodes}",
        f"--eval.batch_size={p.eval_batch}",
        f"--seed={p.eval_seed}",
        f"--output_dir={out}",
    ]


def stage_eval(run: Run) -> None:
    p = run.plan
    for d in datasets(run):
        for step, policy in sorted(checkpoints(p.path("train", d)).items()):
            for world in report.WORLDS:
                out = p.path("eval", d, str(step), world)
                if (out / "eval_info.json").is_file():
                    continue
                if out.exists():
                    shutil.rmtree(out)
                run.cmd("eval", "lerobot-eval", eval_args(p, policy, world, out), env=LEROBOT_ENV)


# ---------------------------------------------------------------- command line
def parse(argv: list[str] | None) -> tuple[Plan, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true", help="smoke run: N=2, 4 steps, 2 episodes")
    ap.add_argument("--work", help=f"work dir (default {FULL['work']}; --tiny {TINY['work']})")
    ap.add_argument("--n", type=int, help="demos per dataset (100; --tiny 2); even")
    ap.add_argument("--steps", type=int, help="lerobot-train steps (2000; --tiny 4)")
    ap.add_argument("--lengths", type=int, help="checkpoints per run (4; --tiny 2)")
    ap.add_argument("--batch", type=int, help="lerobot-train batch (32; --tiny 4)")
    ap.add_argument("--episodes", type=int, help="eval episodes per checkpoint (50; --tiny 2)")
    ap.add_argument("--eval-batch", type=int, help="lerobot-eval batch (10; --tiny 2)")
    ap.add_argument("--episode-length", type=int, help="eval steps per episode (300; --tiny 50)")
    ap.add_argument("--num-workers", type=int, help="lerobot-train data workers (2; --tiny 0)")
    ap.add_argument("--policy", help="lerobot-train policy flags (default: the ACT above)")
    ap.add_argument("--eval-seed", type=int, default=500000, help="first held-out eval seed")
    ap.add_argument("--demo-seed", type=int, default=300000, help="first demo start seed")
    ap.add_argument("--demo-steps", type=int, default=300, help="max steps per demo")
    ap.add_argument("--max-rounds", type=int, default=2, help="rounds of N seeds for R and G")
    ap.add_argument("--gen-batch", type=int, default=16, help="factory generate --batch-size")
    ap.add_argument("--train-seed", type=int, default=1000, help="lerobot-train --seed")
    ap.add_argument("--device", default="cpu", help="cpu | cuda (training, eval, generation)")
    ap.add_argument("--model", help="world model dir (default: the shipped models/pusht)")
    ap.add_argument(
        "--g-all",
        action="store_true",
        help="keep failed generated demos too (plumbing check, not the experiment)",
    )
    ap.add_argument(
        "--out",
        help="results JSON (default docs/results/zero_real_data.json; "
        "--tiny: WORK/zero_real_data.json); the plot goes beside it as .png",
    )
    ap.add_argument("--stop-after", choices=STAGES, help="stop after this stage")
    a = ap.parse_args(argv)
    base = TINY if a.tiny else FULL
    pick = {k: getattr(a, k) if getattr(a, k) is not None else v for k, v in base.items()}
    plan = Plan(
        **pick,
        eval_seed=a.eval_seed,
        demo_seed=a.demo_seed,
        demo_steps=a.demo_steps,
        max_rounds=a.max_rounds,
        gen_batch=a.gen_batch,
        train_seed=a.train_seed,
        device=a.device,
        model=a.model,
        g_all=a.g_all,
    )
    if plan.n < 2 or plan.n % 2:
        raise ValueError(f"--n must be even and at least 2, got {plan.n}")
    if plan.lengths < 1 or plan.steps % plan.lengths:
        raise ValueError(f"--steps {plan.steps} must be a multiple of --lengths {plan.lengths}")
    if min(plan.batch, plan.episodes, plan.eval_batch, plan.episode_length, plan.max_rounds) < 1:
        raise ValueError("batch sizes, episodes, episode length and rounds must be positive")
    for exe in ("factory", "lerobot-train", "lerobot-eval"):
        if not (BIN / exe).is_file():
            raise ValueError(f"{BIN / exe} not found: run `python3 -m uv sync --locked` first")
    if a.out is None:
        a.out = (
            str(plan.path("zero_real_data.json"))
            if a.tiny
            else str(REPO / "docs" / "results" / "zero_real_data.json")
        )
    return plan, a


def stage_report(out: Path) -> Callable[[Run], dict[str, Any]]:
    def go(run: Run) -> dict[str, Any]:
        res = report.build(score_rows(run.plan), run.state)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1, allow_nan=False) + "\n")
        report.draw_plot(res, out.with_suffix(".png"))
        done = {"json": str(out), "plot": str(out.with_suffix(".png"))}
        g_store = run.plan.path("stores", "G.zarr")
        if g_store.exists():  # what the model showed the expert in G's demos
            sheet = out.with_name(out.stem + "_g_frames.png")
            if report.contact_sheet(g_store, sheet):
                done["g_frames"] = str(sheet)
        return done

    return go


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        plan, a = parse(argv)
        run = Run(plan)
    except ValueError as e:
        print(f"zero_real_data: {e}", file=sys.stderr)
        return 2
    fns = {
        "R": stage_r,
        "G": stage_g,
        "transfer": stage_transfer,
        "null": stage_null,
        "M": stage_m,
        "export": stage_export,
        "train": stage_train,
        "eval": stage_eval,
        "report": stage_report(Path(a.out)),
    }
    try:
        for name in STAGES:
            run.do(name, fns[name])
            if name == a.stop_after:
                break
    except StageError as e:
        print(f"zero_real_data: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("zero_real_data: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    done = run.stage("report").get("info")
    summary = json.loads(Path(a.out).read_text()) if done else {}
    keys = ("real_success", "model_success", "g_over_r", "agreement", "wall_s")
    print(json.dumps({"work": plan.work, **(done or {}), **{k: summary.get(k) for k in keys}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
