"""``factory generate | bench generate``: datasets made inside the world model, on Ray.

factory generate --generator expert --episodes 100 --out runs/gen.zarr
factory generate --generator replay --source runs/play.zarr --noise 4 --out runs/rp.zarr
factory generate --episodes 1000 --workers 4 --ray-address auto --append --out runs/g.zarr
factory bench generate --json
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipelines.cli_app import (
    ActionNoise,
    ActionNoiseCorr,
    GeneratorParams,
    app,
    bench_app,
    generator_params,
)
from pipelines.console import LazyBar, err_console, print_json, user_errors


@app.command()
@user_errors
def generate(
    out: Annotated[Path, typer.Option("--out", help="Output episode store (a .zarr folder).")],
    generator: Annotated[str, typer.Option(help="play | expert | replay | policy.")] = "expert",
    episodes: Annotated[int, typer.Option(help="Episodes (seeds S..S+N-1) to have.")] = 10,
    model: Annotated[Path | None, typer.Option(help="Model dir (default: shipped).")] = None,
    source: Annotated[Path | None, typer.Option(help="replay: store to replay.")] = None,
    policy: Annotated[Path | None, typer.Option(help="policy: LeRobot checkpoint dir.")] = None,
    steps: Annotated[int, typer.Option(help="Steps per episode (replay: its length).")] = 200,
    batch_size: Annotated[int, typer.Option(help="Episodes per forward pass, per worker.")] = 16,
    workers: Annotated[int, typer.Option(help="Ray actors, one model replica each.")] = 1,
    gpus_per_worker: Annotated[
        float | None,
        typer.Option(
            help="GPUs each worker asks Ray for (0.25: four share a GPU; 0: CPU workers). "
            "Default: one where the cluster has GPUs."
        ),
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster (HOST:6379 or auto); default: local.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Episode i uses seed S+i.")] = 0,
    only_success: Annotated[
        bool, typer.Option(help="Keep only episodes the model scores successful.")
    ] = False,
    success_score: Annotated[
        float | None,
        typer.Option(
            help="A stricter success reading in the model: a score at least this high "
            "(PushT: coverage, from 0.95 to 1), so that kept demos hold a margin."
        ),
    ] = None,
    robust_keep: Annotated[
        float | None,
        typer.Option(
            help="Keep only successful episodes at least this robust (0 to 1): the fraction "
            "of --robust-k replays of their actions in the model, with noise on each moving "
            "object, that still succeed (needs --only-success and a model of the state)."
        ),
    ] = None,
    robust_k: Annotated[int, typer.Option(help="Robustness: noisy replays each.")] = 16,
    robust_step_px: Annotated[
        float,
        typer.Option(
            help="Robustness: noise std (px) on each moving object (block, disc) per step."
        ),
    ] = 0.3,
    robust_start_px: Annotated[
        float, typer.Option(help="Robustness: noise std (px) on each object's start position.")
    ] = 0.0,
    robust_start_deg: Annotated[
        float, typer.Option(help="Robustness: noise std (deg) on the start block angle (PushT).")
    ] = 0.0,
    robust_judge: Annotated[
        list[Path] | None,
        typer.Option(
            help="Robustness: a judge, another dynamics trained like the model's, that "
            "replays every success too (repeatable; see factory.gen.judges)."
        ),
    ] = None,
    mean_dynamics: Annotated[
        list[Path] | None,
        typer.Option(
            help="Generate in the mean of the model's dynamics and this judge's (repeatable; "
            "an object_state model; see factory.gen.judges.MeanDynamics)."
        ),
    ] = None,
    append: Annotated[
        bool, typer.Option(help="Add to an existing store, skip done seeds.")
    ] = False,
    noise: Annotated[float, typer.Option(help="replay: action noise std (px).")] = 0.0,
    time_warp: Annotated[float, typer.Option(help="replay: speed in U(1-w, 1+w).")] = 0.0,
    context: Annotated[int, typer.Option(help="replay: real context frames.")] = 1,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda.")] = "auto",
    fsync: Annotated[
        bool, typer.Option("--fsync", help="Durable store: fsync every commit (slower).")
    ] = False,
    action_noise: ActionNoise = 0.0,
    action_noise_corr: ActionNoiseCorr = 0.0,
    param: GeneratorParams = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Generate episodes inside the world model on Ray workers, into one store."""
    from factory.gen.placement import check_gpus_per_worker
    from factory.gen.plan import GenerateConfig
    from factory.gen.robustness import RobustConfig
    from factory.gen.writer import GenProgress
    from pipelines.generate import execute_generate, prepare_generate, summary_line

    check_gpus_per_worker(gpus_per_worker, device)
    cfg = GenerateConfig(
        out=out,
        generator=generator,
        episodes=episodes,
        model=model,
        source=source,
        policy=policy,
        steps=steps,
        batch_size=batch_size,
        workers=workers,
        ray_address=ray_address,
        seed=seed,
        only_success=only_success,
        success_score=success_score,
        robust=None
        if robust_keep is None
        else RobustConfig(
            k=robust_k,
            step_px=robust_step_px,
            start_px=robust_start_px,
            start_deg=robust_start_deg,
            keep=robust_keep,
            judges=tuple(str(j.resolve()) for j in robust_judge or ()),
        ),
        mean_dynamics=tuple(str(j.resolve()) for j in mean_dynamics or ()),
        append=append,
        fsync=fsync,
        replay_noise=noise,
        replay_time_warp=time_warp,
        context=context,
        device=device,
        gpus_per_worker=gpus_per_worker,
        generator_params=generator_params(param, action_noise, action_noise_corr),
    )
    plan = prepare_generate(cfg)
    with LazyBar(f"generate {generator}") as bar:

        def on_progress(p: GenProgress) -> None:
            secs = max(p.elapsed_s, 1e-9)
            info = f"{p.tried / secs:.2f} ep/s  {p.frames / secs:.0f} frames/s  kept {p.written}"
            bar.update(p.tried, p.total, info)

        summary = execute_generate(plan, on_progress)
    if json_out:
        print_json(summary)
    else:
        err_console.print(summary_line(summary, out))


@bench_app.command("generate")
@user_errors
def bench_generate(
    model: Annotated[Path | None, typer.Option(help="Model dir (default: shipped).")] = None,
    episodes: Annotated[int, typer.Option(help="Episodes in each measured run.")] = 128,
    steps: Annotated[int, typer.Option(help="Steps per episode.")] = 50,
    batch_size: Annotated[int, typer.Option(help="Batched runs: slots per worker.")] = 16,
    generator: Annotated[str, typer.Option(help="play | expert.")] = "play",
    threads: Annotated[int, typer.Option(help="Torch threads per process / worker.")] = 1,
    resolution: Annotated[
        int | None, typer.Option(help="Time a random-weight copy at this size (px).")
    ] = None,
    device: Annotated[str, typer.Option(help="cpu | cuda.")] = "cpu",
    repeats: Annotated[
        int, typer.Option(help="Interleaved play/expert pairs; expert_vs_play is their median.")
    ] = 3,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Batched generation frames/s against a batch-1 loop, and 1 vs 2 Ray workers."""
    from pipelines.bench_generate import BenchConfig, render_bench, run_bench

    cfg = BenchConfig(
        model=model,
        episodes=episodes,
        steps=steps,
        batch_size=batch_size,
        generator=generator,
        threads=threads,
        resolution=resolution,
        device=device,
        repeats=repeats,
    )
    with LazyBar("bench generate") as bar:
        result = run_bench(cfg, lambda done, total, name: bar.update(done, total, name))
    if json_out:
        print_json(result)
    else:
        render_bench(result)
