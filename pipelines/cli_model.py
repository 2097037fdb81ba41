"""``factory train | eval fidelity | bench rollout``: build and measure the world model.

factory train autoencoder --data data/pusht_play.zarr --out runs/model --minutes 20
factory train dynamics --data data/pusht_play.zarr --out runs/model --minutes 60
factory train decoder --data data/pusht_play.zarr --out runs/model --minutes 10
factory train probe --data data/pusht_play.zarr --out runs/model --minutes 10
factory train all --data data/pusht_play.zarr --out runs/all --minutes 60 --eval data/held.zarr
factory eval fidelity --model runs/model --data data/pusht_heldout.zarr --json --video fid.mp4
factory eval transfer data/pusht_gen.zarr --json
factory eval robustness data/pusht_gen.zarr --transfer transfer.json --json
factory eval ensemble --data data/pusht_heldout.zarr --judge judges/j1 --judge judges/j2 --json
factory bench rollout --json
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from factory.train.recipe_table import recipe_help
from pipelines.cli_app import app, bench_app, eval_app, model_app
from pipelines.console import LazyBar, err_console, print_json, user_errors

if TYPE_CHECKING:
    from pipelines.train import TrainRequest


@app.command()
@user_errors
def train(
    stage: Annotated[
        str,
        typer.Argument(
            help="all; latent_grid: autoencoder | dynamics | heads | decoder | probe; "
            "object_state: renderer | dynamics | reader"
        ),
    ],
    data: Annotated[Path, typer.Option("--data", help="Episode store to train on.")],
    out: Annotated[Path, typer.Option("--out", help="Model directory (all parts live here).")],
    minutes: Annotated[float | None, typer.Option(help="Budget in minutes (total).")] = None,
    steps: Annotated[int | None, typer.Option(help="Budget in optimiser steps (total).")] = None,
    cpu_minutes: Annotated[
        float | None,
        typer.Option(help="Budget in this process's CPU minutes (equal-compute ablations)."),
    ] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N].")] = "auto",
    resume: Annotated[bool, typer.Option(help="Continue from the directory's state.")] = False,
    recipe: Annotated[
        str | None,
        typer.Option(help=recipe_help()),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="SECTION.FIELD=VALUE override (repeatable): latent_grid's dynamics stage "
            "(dynamics, consistency, options, train), or a fresh state-kind model's parts "
            "(e.g. renderer.supersample=3).",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
    eval_data: Annotated[
        Path | None, typer.Option("--eval", help="all: held-out store for OUT/fidelity.json.")
    ] = None,
    eval_episodes: Annotated[int, typer.Option(help="all: episodes to evaluate.")] = 16,
    stability_frames: Annotated[int, typer.Option(help="all: closed-loop frames.")] = 9000,
    kind: Annotated[
        str | None,
        typer.Option(
            help="Model kind: latent_grid (pixels only) or object_state (needs the object "
            "state, data/task_state). Default: OUT's kind, else latent_grid (object_state "
            "for the renderer and reader stages)."
        ),
    ] = None,
    camera: Annotated[
        str | None,
        typer.Option(
            help="latent_grid: the store camera to train on, one model per camera (top: "
            "data/image; side: data/image_side). Default: OUT's, else top."
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="One stage: seed of the part's initialisation and batch order (an "
            "ensemble's members, one seed each). Default: the stage's own."
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(help="One stage: torch threads (two trainings side by side: 1 each)."),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            help="One stage: the batch size (default: the stage's own); the learning rate "
            "follows by the square root of the ratio, at most 2x."
        ),
    ] = None,
    compile_: Annotated[
        bool | None,
        typer.Option(
            "--compile/--no-compile",
            help="One stage, on the CPU: torch.compile the parts that pay it back (the "
            "object-set dynamics). Default: when the budget is at least 20 wall minutes.",
        ),
    ] = None,
) -> None:
    """Train one stage, or `all` of them (then pack OUT/model), into a model directory."""
    from factory.errors import FactoryError
    from pipelines.train import TrainRequest

    if stage == "all":
        from pipelines.cli_train_all import train_all
        from pipelines.train_all import TrainAllRequest

        if cpu_minutes is not None:
            raise FactoryError("--cpu-minutes goes with one stage; give `train all` --minutes")
        if any(v is not None for v in (seed, threads, batch_size, compile_)):
            raise FactoryError(
                "--seed, --threads, --batch-size and --compile go with one stage, not `train all`"
            )
        all_req = TrainAllRequest(
            data=data,
            out=out,
            minutes=minutes,
            steps=steps,
            device=device,
            resume=resume,
            eval_data=eval_data,
            eval_episodes=eval_episodes,
            stability_frames=stability_frames,
            overrides=tuple(set_ or ()),
            kind=kind,
            camera=camera,
        )
        if recipe is not None:
            all_req = dataclasses.replace(all_req, recipe=recipe)
        train_all(all_req, json_out)
        return
    if eval_data is not None:
        raise FactoryError("--eval goes with `factory train all`; use `factory eval fidelity`")
    req = TrainRequest(
        stage=stage,
        data=data,
        out=out,
        minutes=minutes,
        steps=steps,
        cpu_minutes=cpu_minutes,
        device=device,
        resume=resume,
        recipe=recipe,
        overrides=tuple(set_ or ()),
        kind=kind,
        camera=camera,
        seed=seed,
        threads=threads,
        batch_size=batch_size,
        compile=compile_,
    )
    _train_stage(req, json_out)


def _train_stage(req: TrainRequest, json_out: bool) -> None:
    """One stage, with a progress bar; its metrics as JSON or one line."""
    from pipelines.train import run_train

    with LazyBar(f"train {req.stage}") as bar:

        def on_progress(step: int, total: int | None, metrics: dict[str, float]) -> None:
            shown = "  ".join(f"{k} {v:.4g}" for k, v in list(metrics.items())[:4])
            bar.update(step, total, shown)

        metrics = run_train(req, on_progress)
    if json_out:
        print_json(metrics)
    else:
        err_console.print(
            f"[bold green]done[/]: {req.stage} in {req.out}: "
            + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        )


@eval_app.command("fidelity")
@user_errors
def eval_fidelity(
    data: Annotated[Path, typer.Option("--data", help="Held-out ground-truth episodes.")],
    model: Annotated[Path | None, typer.Option(help="Model dir (default: shipped).")] = None,
    side_model: Annotated[
        Path | None,
        typer.Option(
            help="Pile: a latent_grid model of the side camera (train --camera side) to "
            "replay beside --model, a top-camera one: side IoU and cross-view consistency."
        ),
    ] = None,
    episodes: Annotated[int, typer.Option(help="Episodes to replay.")] = 16,
    stability_frames: Annotated[int, typer.Option(help="Closed-loop rollout length.")] = 9000,
    video: Annotated[Path | None, typer.Option(help="Write real | generated mp4 here.")] = None,
    permanence_starts: Annotated[
        int, typer.Option(help="Starts of the block-at-rest permanence check (0: skip).")
    ] = 8,
    horizons: Annotated[
        str,
        typer.Option(
            help="Replay horizons, steps after the context (comma list); those no episode "
            "holds are skipped, with the reason."
        ),
    ] = "1,10,50,100",
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N].")] = "auto",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Frame, task-state and long-horizon fidelity against the ground truth."""
    from factory.eval.fidelity import parse_horizons
    from pipelines.eval_fidelity import FidelityRequest, run_fidelity

    req = FidelityRequest(
        data=data,
        model=model,
        side_model=side_model,
        episodes=episodes,
        video=video,
        stability_frames=stability_frames,
        permanence_starts=permanence_starts,
        device=device,
        horizons=parse_horizons(horizons),
    )
    with LazyBar("stability rollout") as bar:
        result = run_fidelity(req, lambda _n, done, total: bar.update(done, total))
    if json_out:
        print_json(result)
    else:
        from pipelines.eval_view import render_fidelity

        render_fidelity(result)


@eval_app.command("transfer")
@user_errors
def eval_transfer(
    store: Annotated[Path, typer.Argument(help="Episodes `factory generate` made from seeds.")],
    env: Annotated[
        str | None, typer.Option(help="Ground-truth env (default: the one recorded).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Replay generated episodes open loop in the ground truth: do the outcomes agree?"""
    from factory.eval.transfer import run_transfer

    with LazyBar("eval transfer") as bar:
        result = run_transfer(store, env, lambda done, total: bar.update(done, total))
    if json_out:
        print_json(result)
    else:
        from pipelines.eval_view import render_transfer

        render_transfer(result)


@eval_app.command("robustness")
@user_errors
def eval_robustness(
    store: Annotated[Path, typer.Argument(help="Episodes `factory generate` made.")],
    model: Annotated[Path | None, typer.Option(help="The model that made them.")] = None,
    transfer: Annotated[
        Path | None,
        typer.Option(help="`factory eval transfer STORE --json` output: adds the keep curve."),
    ] = None,
    k: Annotated[int, typer.Option(help="Noisy replays per episode.")] = 16,
    step_px: Annotated[float, typer.Option(help="Noise std (px) on each moving object.")] = 0.3,
    start_px: Annotated[float, typer.Option(help="Noise std (px) on each start object.")] = 0.0,
    start_deg: Annotated[float, typer.Option(help="Noise std (deg) on the start angle.")] = 0.0,
    keep: Annotated[float, typer.Option(help="The keep threshold to count.")] = 0.9,
    judge: Annotated[
        list[Path] | None,
        typer.Option(help="A judge: another dynamics that replays them too (repeatable)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Replay generated successes in the model with noise: how robust is each, and (with
    --transfer) does robustness predict the real outcome?"""
    from factory.eval.robust_curve import run_robustness
    from factory.gen.robustness import RobustConfig

    judges = tuple(str(j) for j in judge or ())
    cfg = RobustConfig(
        k=k, step_px=step_px, start_px=start_px, start_deg=start_deg, keep=keep, judges=judges
    )
    result = run_robustness(store, model, cfg, transfer)
    if json_out:
        print_json(result)
        return
    line = (
        f"{result['episodes']} successes, robustness mean {result['robustness_mean']:.2f}, "
        f"{result['kept_at_keep']} at least {keep}"
    )
    if "thresholds" in result:
        line += "; real success given kept: " + ", ".join(
            f">={t['keep']}: {t['kept']} kept, "
            + ("-" if t["real_success"] is None else f"{t['real_success']:.2f}")
            for t in result["thresholds"]
        )
    err_console.print(line)


@bench_app.command("rollout")
@user_errors
def bench_rollout(
    model: Annotated[Path | None, typer.Option(help="Model dir (default: shipped).")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N].")] = "auto",
    steps: Annotated[int, typer.Option(help="Timed steps per batch size.")] = 300,
    baseline: Annotated[
        Path | None, typer.Option(help="Another model dir timed at batch 1 in the same run.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Batch-1 interactive FPS (median step) and frames/s at batch 10, 16 and 64."""
    from pipelines.bench_rollout import RolloutBenchRequest, run_rollout_bench

    req = RolloutBenchRequest(model=model, device=device, steps=steps, baseline=baseline)
    with LazyBar("bench rollout") as bar:
        result = run_rollout_bench(req, lambda _n, done, total: bar.update(done, total, ""))
    if json_out:
        print_json(result)
    else:
        err_console.print(
            f"{result['device']}: batch 1 {result['fps_batch1']:.1f} FPS; "
            + ", ".join(f"batch {b} {v:.1f} frames/s" for b, v in result["throughput"].items())
            + (
                f"; {result['fps_ratio_vs_baseline']:.2f}x the baseline's batch 1"
                if "baseline" in result
                else ""
            )
        )


@model_app.command("pack")
@user_errors
def model_pack(
    out: Annotated[Path, typer.Argument(help="The model directory to write.")],
    source: Annotated[
        Path | None, typer.Option("--from", help="Training dir to take every part from.")
    ] = None,
    part: Annotated[
        list[str] | None,
        typer.Option("--part", help="PART=DIR: take one part from DIR (repeatable)."),
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing OUT.")] = False,
) -> None:
    """Write a shippable model dir (config, weights, provenance; no training state)."""
    from factory.errors import FactoryError
    from factory.model import read_config
    from factory.model.pack import pack_model

    sources: dict[str, Path] = {}
    if source is not None:
        sources = {p: source for p in read_config(source).parts}
    for item in part or []:
        name, sep, where = item.partition("=")
        if not sep or not where:
            raise FactoryError(f"--part takes PART=DIR, got {item!r}")
        sources[name] = Path(where)
    if not sources:
        raise FactoryError("nothing to pack: give --from DIR and/or --part PART=DIR")
    try:
        pack_model(sources, out, overwrite=overwrite)
    except FileNotFoundError as err:  # a config.json that lists a part whose file is gone
        raise FactoryError(f"cannot pack: {err.filename} is missing") from None
    size = sum(f.stat().st_size for f in out.iterdir()) / 2**20
    err_console.print(
        f"[bold green]packed[/] {', '.join(sorted(sources))} into {out} ({size:.1f} MB)"
    )


@eval_app.command("ensemble")
@user_errors
def eval_ensemble(
    data: Annotated[Path, typer.Option("--data", help="Held-out ground-truth episodes.")],
    judge: Annotated[
        list[Path], typer.Option(help="A judge: another dynamics of the model (repeatable).")
    ],
    model: Annotated[Path | None, typer.Option(help="The model (default: the shipped).")] = None,
    horizons: Annotated[str, typer.Option(help="Steps at which to score.")] = "10,50,100",
    episodes: Annotated[int, typer.Option(help="Episodes to roll out.")] = 40,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Open-loop block error of the model's dynamics, each judge's and their mean, driven
    by held-out episodes' real actions."""
    from factory.errors import FactoryError
    from factory.eval.ensemble import run_ensemble
    from factory.eval.fidelity import parse_horizons

    if episodes < 1:
        raise FactoryError(f"--episodes must be >= 1, got {episodes}")
    hs = parse_horizons(horizons)
    result = run_ensemble(data, model, [str(j) for j in judge], hs, episodes)
    if json_out:
        print_json(result)
        return
    for row in [*result["members"], {"member": "mean dynamics", **result["mean_dynamics"]}]:
        errs = ", ".join(f"h{h} {row[f'h{h}_median']:.2f} ({row[f'h{h}']:.2f})" for h in hs)
        err_console.print(f"{row['member']}: block error px, median (mean): {errs}")
