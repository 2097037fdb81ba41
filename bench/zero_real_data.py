"""Zero-real-data imitation learning, and policy evaluation inside the world model,
measured with lerobot's own tools. One command, resumable stage by stage:

    .venv/bin/python bench/zero_real_data.py            # the experiment (2-core CPU; wall_s)
    .venv/bin/python bench/zero_real_data.py --tiny     # a smoke run of every stage (minutes)

Run it from the repository root; rerun the same command after an interruption. Stages:

- **R**: N real expert demonstrations (``factory collect --generator expert`` in gym-pusht,
  seeds 300000+; the first N successful ones, by seed).
- **G**: N demonstrations generated inside the model (``factory generate --generator expert
  --only-success``, kept by the model's own success reading, made stricter than the task's
  by ``--g-success-score``: ``generate --success-score``, and with ``--g-robust-keep``
  only when that many noisy replays in the model still succeed: ``generate
  --robust-keep``; the only real input is the seeded reset). Rounds of N fresh seeds
  until N are kept or ``--max-rounds`` are spent.
- **transfer**: G's demos replayed open loop in the ground truth from the same seeded
  reset (``factory eval transfer``): how many generated successes are real ones.
- **null**: the floor of each world: a policy that holds the agent still.
- **M**: N/2 of R and N/2 of G (other start seeds than the R half), merged into one store.
- Two policy **arms**, each with its own export, training and evaluation stages:
  - ``state`` (primary): lerobot's state observations (``--obs
    environment_state_agent_pos``: the T's 8 keypoints and the agent; for G and M's
    generated half the keypoints come from the model's own block pose), trained with
    ``factory policy train`` (lerobot's policy in RAM; ``--state-policy``, a name in
    ``bench/zero_real_policies.py``) on R and G at every ``--sizes`` and on M. N demos
    train ``--state-steps``, k demos k/N as many (the same epochs), each checkpointed at
    the ``--state-saves`` fractions and at its end: the checkpoints of the agreement.
  - ``image``: the image ACT of the seed, trained with ``lerobot-train`` on R, G and M at N,
    at the CPU budget of ``--image-steps``.
- **eval**: ``lerobot-eval`` of every checkpoint on the same held-out seeds (500000 +
  episode index) in the ground truth (``--env.type=pusht``) and inside the model
  (``--env.type=demofactory``), with the arm's ``--env.obs_type``.
- **report**: ``docs/results/zero_real_data.json`` (``arms.state``, ``arms.image``, ``g``,
  the targets), its plot and G's contact sheet, and the tables in ``docs/RESULTS.md``
  (between ``zero_real_markdown``'s markers; ``--results-md``).

``WORK/state.json`` records the config, every command as it ran (exit status, wall time,
log under ``WORK/logs/``) and each stage's wall time; a finished stage, export, checkpoint
or evaluation is never redone. A work directory made with other shared settings is
refused (exit 2); one whose arm's settings changed is refused too unless
``--restart-arm ARM`` redoes that arm (its old runs and scores move to
``WORK/superseded/``; the demos, exports and the other arm are kept). ``--jobs`` runs
that many of a stage's trainings or evaluations at once, each with its share of the cores
(``bench/train_jobs_bench.py`` measures what that buys). The policy settings were chosen
on R alone (docs/RESULTS.md), never on G or M.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zero_real_report as report
from zero_real_arms import stage_eval, stage_export, stage_train
from zero_real_demos import stage_g, stage_m, stage_null, stage_r, stage_transfer
from zero_real_markdown import write_into
from zero_real_policies import state_policy
from zero_real_run import BIN, Plan, Run, StageError, score_rows

from factory.envs.scoring import check_success_score
from factory.errors import FactoryError
from factory.eval.contact_sheet import contact_sheet
from factory.gen.robustness import RobustConfig

log = logging.getLogger("zero_real_data")
REPO = Path(__file__).resolve().parent.parent
ARM_STAGES = ("export", "train", "eval")
STAGES = (
    "R", "G", "transfer", "null", "M",
    *(f"{what}_{arm}" for arm in report.ARMS for what in ARM_STAGES),
    "report",
)  # fmt: skip

IMAGE_ACT = (
    "--policy.type=act --policy.pretrained_backbone_weights=null --policy.dim_model=256 "
    "--policy.n_heads=8 --policy.dim_feedforward=1024 --policy.n_encoder_layers=2 "
    "--policy.n_decoder_layers=1 --policy.chunk_size=20 --policy.n_action_steps=10 "
    "--policy.use_vae=false --policy.optimizer_lr=1e-4 --policy.optimizer_lr_backbone=1e-4"
)
IMAGE_ACT_TINY = (
    "--policy.type=act --policy.pretrained_backbone_weights=null --policy.dim_model=64 "
    "--policy.n_heads=2 --policy.dim_feedforward=128 --policy.n_encoder_layers=1 "
    "--policy.n_decoder_layers=1 --policy.chunk_size=8 --policy.n_action_steps=8"
)
JOBS = 2  # commands of a training or evaluation stage run at once (--jobs)
FULL: dict[str, Any] = dict(
    work="runs/zero_real_data",
    n=100,
    sizes=(30, 100),
    episodes=50,
    eval_batch=50,
    episode_length=300,
    state_policy="diffusion_small_lr3",
    state_steps=11000,
    state_saves=(0.5, 0.75),
    state_batch=64,
    image_policy=IMAGE_ACT,
    image_steps=500,
    image_lengths=1,
    image_batch=32,
    num_workers=2,
    g_success_score=0.97,
)
TINY: dict[str, Any] = dict(
    work="runs/zero_real_data_tiny",
    n=2,
    sizes=(2,),
    episodes=2,
    eval_batch=2,
    episode_length=30,
    state_policy="diffusion_tiny",
    state_steps=4,
    state_saves=(0.5,),
    state_batch=4,
    image_policy=IMAGE_ACT_TINY,
    image_steps=2,
    image_lengths=1,
    image_batch=2,
    num_workers=0,
    g_success_score=None,
)


# ---------------------------------------------------------------- command line
def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _fracs(text: str) -> tuple[float, ...]:
    out = tuple(float(x) for x in text.split(",") if x.strip())
    if not all(0 < f < 1 for f in out):
        raise argparse.ArgumentTypeError(f"fractions in (0, 1) expected, got {text!r}")
    return out


def _options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--tiny", action="store_true", help="smoke run: N=2, a few steps, 2 episodes")
    ap.add_argument("--work", help=f"work dir (default {FULL['work']}; --tiny {TINY['work']})")
    ap.add_argument("--n", type=int, help="demos in R, G and M (100; --tiny 2); even")
    ap.add_argument("--sizes", type=_ints, help="state arm: R and G sizes (30,100)")
    ap.add_argument("--episodes", type=int, help="eval episodes per checkpoint (50; --tiny 2)")
    ap.add_argument("--eval-batch", type=int, help="lerobot-eval batch (50; --tiny 2)")
    ap.add_argument("--episode-length", type=int, help="eval steps per episode (300)")
    ap.add_argument("--state-policy", help="state arm: a policy of bench/zero_real_policies.py "
                    f"(default {FULL['state_policy']}; --tiny {TINY['state_policy']})")  # fmt: skip
    ap.add_argument("--state-steps", type=int, help="state arm: training steps at N demos; "
                    "k demos train k/N as many (11000)")  # fmt: skip
    ap.add_argument("--state-saves", type=_fracs, help="state arm: also checkpoint at these "
                    "fractions of each run (0.5,0.75)")  # fmt: skip
    ap.add_argument("--state-batch", type=int, help="state arm: batch (64)")
    ap.add_argument("--image-policy", help="image arm: lerobot-train policy flags")
    ap.add_argument("--image-steps", type=int, help="image arm: lerobot-train steps (500)")
    ap.add_argument("--image-lengths", type=int, help="image arm: checkpoints per run (1)")
    ap.add_argument("--image-batch", type=int, help="image arm: batch (32)")
    ap.add_argument("--num-workers", type=int, help="lerobot-train data workers (2)")
    ap.add_argument("--eval-seed", type=int, default=500000, help="first held-out eval seed")
    ap.add_argument("--demo-seed", type=int, default=300000, help="first demo start seed")
    ap.add_argument("--demo-steps", type=int, default=300, help="max steps per demo")
    ap.add_argument("--max-rounds", type=int, default=2, help="rounds of N seeds for R and G")
    ap.add_argument("--gen-batch", type=int, default=16, help="factory generate --batch-size")
    ap.add_argument("--train-seed", type=int, default=1000, help="policy training seed")
    ap.add_argument("--device", default="cpu", help="cpu | cuda (training, eval, generation)")
    ap.add_argument("--model", help="world model dir (default: the shipped models/pusht)")
    ap.add_argument("--action-noise", type=float, default=0.0,
                    help="DART: px std of noise on the demos' executed actions; the policies "
                    "learn the expert's clean labels (0: none)")  # fmt: skip
    ap.add_argument("--g-success-score", type=float,
                    help="G: keep a demo only when the model reads a score at least this "
                    "high (generate --success-score; 0.97; --tiny: the task's 0.95)")  # fmt: skip
    ap.add_argument("--g-robust-keep", type=float,
                    help="G: keep a demo only when at least this fraction of its noisy "
                    "replays in the model succeed (generate --robust-keep, with its other "
                    "defaults; default none; 0.9 keeps about a third, so raise "
                    "--max-rounds to 4)")  # fmt: skip
    ap.add_argument("--g-robust-judges", nargs="+", default=(), metavar="DIR",
                    help="G, with --g-robust-keep: judges, other dynamics trained like the "
                    "model's, that replay every success too (generate --robust-judge; "
                    "trained by factory train dynamics --seed; none ships)")  # fmt: skip
    g_all = "keep failed generated demos too (plumbing check, not the experiment)"
    ap.add_argument("--g-all", action="store_true", help=g_all)
    ap.add_argument("--arms", type=lambda t: tuple(t.split(",")), default=report.ARMS,
                    help="arms to run now (state,image); not part of the config")  # fmt: skip
    ap.add_argument("--restart-arm", type=lambda t: tuple(t.split(",")), default=(),
                    help="redo these arms when their settings changed (their old runs and "
                    "scores move to WORK/superseded/; demos and exports are kept)")  # fmt: skip
    ap.add_argument("--out", help="results JSON (default docs/results/zero_real_data.json; "
                    "--tiny: WORK/zero_real_data.json); the plot goes beside it")  # fmt: skip
    ap.add_argument("--results-md", help="the markdown whose tables the report stage rewrites "
                    "between zero_real_markdown's markers (default docs/RESULTS.md with the "
                    "default --out, else none; '' for none)")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=JOBS, help="trainings and evaluations run at "
                    f"once, each with an equal share of the cores (default {JOBS}); not part "
                    "of the config")  # fmt: skip
    ap.add_argument("--stop-after", choices=STAGES, help="stop after this stage")
    ap.add_argument(
        "--eval-ahead",
        action="store_true",
        help="only score the checkpoints that exist now (beside a running experiment, "
        "into the same folders; its commands go to WORK/eval_ahead.json), and write the "
        "report of every score so far to WORK/partial.json",
    )


def _check(plan: Plan, arms: tuple[str, ...], restart: tuple[str, ...]) -> None:
    if plan.n < 2 or plan.n % 2 or any(k < 1 or k > plan.n for k in plan.sizes):
        raise ValueError(
            f"--n must be even and >= 2 and --sizes in 1..n, got {plan.n}, {plan.sizes}"
        )
    if plan.n not in plan.sizes:
        raise ValueError(f"--sizes must include --n ({plan.n}): R and G at N are the results")
    if plan.image_lengths < 1 or plan.image_steps % plan.image_lengths:
        raise ValueError(f"--image-steps {plan.image_steps} must be a multiple of --image-lengths")
    if min(plan.state_batch, plan.image_batch, plan.episodes, plan.eval_batch) < 1:
        raise ValueError("batch sizes and episodes must be positive")
    if min(plan.episode_length, plan.max_rounds, plan.state_steps, plan.image_steps) < 1:
        raise ValueError("episode length, rounds and steps must be positive")
    if not (plan.action_noise >= 0 and plan.action_noise < float("inf")):
        raise ValueError(f"--action-noise must be a finite number >= 0, got {plan.action_noise}")
    try:
        check_success_score("pusht", plan.g_success_score, "--g-success-score")
    except FactoryError as err:
        raise ValueError(str(err)) from None
    try:
        if plan.g_robust_keep is not None:
            RobustConfig(keep=plan.g_robust_keep)
    except FactoryError as err:
        raise ValueError(str(err).replace("--robust-keep", "--g-robust-keep")) from None
    if plan.g_robust_judges and plan.g_robust_keep is None:
        raise ValueError("--g-robust-judges goes with --g-robust-keep")
    for judge in plan.g_robust_judges:
        if not Path(judge, "config.json").is_file():
            raise ValueError(f"--g-robust-judges: {judge} is not a model directory")
    for flag, names in (("--arms", arms), ("--restart-arm", restart)):
        if not set(names) <= set(report.ARMS):
            raise ValueError(
                f"{flag} must be among {', '.join(report.ARMS)}, got {','.join(names)}"
            )
    state_policy(plan.state_policy)  # a known name
    for exe in ("factory", "lerobot-train", "lerobot-eval"):
        if not (BIN / exe).is_file():
            raise ValueError(f"{BIN / exe} not found: run `python3 -m uv sync --locked` first")


def parse(argv: list[str] | None) -> tuple[Plan, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _options(ap)
    a = ap.parse_args(argv)
    base = TINY if a.tiny else FULL
    pick = {k: getattr(a, k) if getattr(a, k) is not None else v for k, v in base.items()}
    fixed = ("eval_seed", "demo_seed", "demo_steps", "max_rounds", "gen_batch", "train_seed",
             "device", "model", "g_all", "action_noise", "g_robust_keep")  # fmt: skip
    judges = tuple(str(Path(j).resolve()) for j in a.g_robust_judges)
    plan = Plan(**pick, **{k: getattr(a, k) for k in fixed}, g_robust_judges=judges)
    _check(plan, a.arms, a.restart_arm)
    if a.results_md is None:
        a.results_md = "" if a.tiny or a.out is not None else str(REPO / "docs" / "RESULTS.md")
    if a.out is None:
        a.out = (
            str(plan.path("zero_real_data.json"))
            if a.tiny
            else str(REPO / "docs" / "results" / "zero_real_data.json")
        )
    if a.jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {a.jobs}")
    if a.results_md and not Path(a.results_md).is_file():
        raise ValueError(f"--results-md {a.results_md}: no such file")
    return plan, a


def write_report(
    plan: Plan, state: dict[str, Any], out: Path, partial: bool = False, results_md: str = ""
) -> dict[str, str]:
    """The results JSON, its plot and G's contact sheet from the scores WORK holds now,
    and their tables in ``results_md`` (none when empty; a document without the markers
    is left as it is, with a warning). ``partial``: an unfinished run's
    (``--eval-ahead``), with the stages still to run under ``partial`` and no targets,
    since those are the whole default run's."""
    ahead = plan.path("eval_ahead.json")
    state = dict(state)
    if ahead.is_file():  # evaluations run beside the experiment (--eval-ahead)
        state["commands"] = state["commands"] + json.loads(ahead.read_text())["commands"]
    res = report.build(score_rows(plan), state)
    if partial:
        done = {k for k, v in state["stages"].items() if v.get("status") == "done"}
        res["partial"] = {"stages_to_run": [s for s in STAGES if s not in done]}
        res["targets"] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1, allow_nan=False) + "\n")
    report.draw_plot(res, out.with_suffix(".png"))
    files = {"json": str(out), "plot": str(out.with_suffix(".png"))}
    g_store = plan.path("stores", "G.zarr")
    if g_store.exists():  # what the model showed the expert in G's demos
        sheet = out.with_name(out.stem + "_g_frames.png")
        if contact_sheet(g_store, sheet):
            files["g_frames"] = str(sheet)
    if results_md:
        try:
            write_into(Path(results_md), res)
            files["tables"] = results_md
        except ValueError as err:
            log.warning("%s: tables not written: %s", results_md, err)
    return files


def stage_report(out: Path, results_md: str = "") -> Callable[[Run], dict[str, Any]]:
    def go(run: Run) -> dict[str, Any]:
        return write_report(run.plan, run.state, out, results_md=results_md)

    return go


def eval_ahead(plan: Plan, arms: tuple[str, ...]) -> int:
    """Score every checkpoint that exists now and has no score yet, in both worlds, and
    write the report of every score so far to ``WORK/partial.json`` (no targets). The
    scores are those the eval stage would write (same command, seeds and folders); only
    the wall times differ when this shares the CPU with the running experiment."""
    if not plan.path("state.json").is_file():
        raise ValueError(f"{plan.work} has no experiment to evaluate ahead of")
    run = Run(plan, "eval_ahead.json")
    try:
        for arm in arms:
            stage_eval(arm, report.WORLDS)(run)
    except StageError as e:
        print(f"zero_real_data: {e}", file=sys.stderr)
        return 1
    state = json.loads(plan.path("state.json").read_text())
    files = write_report(plan, state, plan.path("partial.json"), partial=True)
    log.info("the scores so far: %s", files["json"])
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        plan, a = parse(argv)
        if a.eval_ahead:
            return eval_ahead(plan, a.arms)
        run = Run(plan, restart=a.restart_arm, jobs=a.jobs)
    except ValueError as e:
        print(f"zero_real_data: {e}", file=sys.stderr)
        return 2
    fns: dict[str, Callable[[Run], Any]] = {
        "R": stage_r,
        "G": stage_g,
        "transfer": stage_transfer,
        "null": stage_null,
        "M": stage_m,
        "report": stage_report(Path(a.out), a.results_md),
    }
    for arm in report.ARMS:
        fns[f"export_{arm}"] = stage_export(arm)
        fns[f"train_{arm}"] = stage_train(arm)
        fns[f"eval_{arm}"] = stage_eval(arm, report.WORLDS)
    skip = {f"{what}_{arm}" for arm in report.ARMS if arm not in a.arms for what in ARM_STAGES}
    try:
        for name in STAGES:
            if name not in skip:
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
    arms = {
        arm: {k: v.get(k) for k in ("real_success", "model_success", "g_over_r", "agreement")}
        for arm, v in summary.get("arms", {}).items()
    }
    keys = ("g", "targets", "wall_s")
    out = {"work": plan.work, **(done or {}), "arms": arms, **{k: summary.get(k) for k in keys}}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
