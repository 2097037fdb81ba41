"""``factory``: the demofactory command line.

    factory collect --env pusht --generator play --episodes 20 --out runs/play.zarr
    factory collect --env pusht --generator expert --episodes 10 --out runs/expert.zarr --workers 2
    factory collect --generator replay --source runs/play.zarr --episodes 5 --out runs/rp.zarr
    factory inspect runs/play.zarr
    factory inspect runs/play.zarr --json
    factory teleop --device keyboard --out runs/teleop.zarr --task "push the T onto the goal"
    factory teleop --world pusht --device scripted --headless --episodes 3 --out runs/t.zarr --json
    factory export lerobot runs/play.zarr runs/play_lerobot --repo-id local/play
    factory export lerobot runs/play.zarr runs/ok --repo-id local/ok --only-success --images
    factory import lerobot runs/play_lerobot runs/back.zarr --camera observation.image
    factory generate --model runs/model --generator expert --episodes 100 --out runs/gen.zarr
    factory generate --generator replay --source runs/play.zarr --noise 4 --out runs/rp.zarr
    factory generate --episodes 1000 --workers 4 --ray-address auto --append --out runs/g.zarr
    factory bench generate --model runs/model --json

Every bad input (a wrong path, a foreign store, an unknown generator, N <= 0) is one line
on stderr and exit code 2.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress, TaskID

from pipelines.console import LazyBar, err_console, print_json, progress, setup_logging, user_errors

app = typer.Typer(
    name="factory",
    help="demofactory: synthetic robot demonstrations from a learned world model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logs.")] = False):
    setup_logging(verbose)


@app.command()
@user_errors
def collect(
    out: Annotated[Path, typer.Option("--out", help="Output episode store (a .zarr folder).")],
    env: Annotated[str, typer.Option(help="Ground-truth env.")] = "pusht",
    generator: Annotated[str, typer.Option(help="play | expert | replay.")] = "play",
    episodes: Annotated[int, typer.Option(help="Episodes to have in the seed range.")] = 10,
    seed: Annotated[int, typer.Option(help="Episode i uses seed S+i.")] = 0,
    steps: Annotated[int, typer.Option(help="Steps per episode.")] = 200,
    resolution: Annotated[int, typer.Option(help="Image size in pixels.")] = 96,
    workers: Annotated[int, typer.Option(help="Env processes feeding the one writer.")] = 1,
    append: Annotated[
        bool, typer.Option(help="Add to an existing store, skip done seeds.")
    ] = False,
    source: Annotated[
        Path | None, typer.Option(help="Store whose episodes --generator replay replays.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Record episodes in the ground-truth env into a store."""
    from pipelines.collect import CollectConfig, execute_collect, prepare_collect
    from recorders.rollout import EpisodeResult

    cfg = CollectConfig(
        out=out,
        env=env,
        generator=generator,
        episodes=episodes,
        seed=seed,
        steps=steps,
        resolution=resolution,
        workers=workers,
        append=append,
        source=source,
    )
    plan = prepare_collect(cfg)
    with progress() as bar:
        task = bar.add_task(f"collect {generator}", total=len(plan.jobs), info="")

        def on_episode(done: int, total: int, result: EpisodeResult) -> None:
            score = result.meta.score or 0.0
            bar.update(task, completed=done, info=f"last score {score:.2f}")

        summary = execute_collect(plan, on_episode)
    if json_out:
        print_json(summary)
    else:
        s = summary["store"]
        err_console.print(
            f"recorded {summary['recorded']} episodes ({summary['skipped']} already there); "
            f"{out}: {s['episodes']} episodes, {s['frames']} frames, {s['successes']} successes"
        )


@app.command()
@user_errors
def inspect(
    store: Annotated[Path, typer.Argument(help="Episode store to describe.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Describe an episode store: episodes, frames, keys, sources, lengths, successes."""
    from factory.store import EpisodeStore
    from pipelines.inspect_view import render_summary

    with EpisodeStore.open(store, mode="r") as s:
        summary = s.summary()
    if json_out:
        print_json(summary)
    else:
        render_summary(summary)


@app.command()
@user_errors
def demo(
    out: Annotated[
        Path | None, typer.Option("--out", help="Output folder (default ./demo-<time>).")
    ] = None,
    model: Annotated[Path | None, typer.Option(help="Model dir (default: shipped).")] = None,
    episodes: Annotated[int, typer.Option(help="Episodes to generate.")] = 8,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """The main job: generate expert episodes in the shipped world model on Ray, store them,
    export a LeRobot dataset and a preview video."""
    from pipelines.demo import DemoConfig, run_demo

    cfg = DemoConfig(out=out, model=model, episodes=episodes)
    with progress() as bar:
        tasks: dict[str, TaskID] = {}

        def on_stage(stage: str, done: int, total: int, info: str) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total, info="")
            bar.update(tasks[stage], completed=done, total=total, info=info)

        summary = run_demo(cfg, on_stage)
    if json_out:
        print_json(summary)
        return
    err_console.print(
        f"[bold green]done[/]: {summary['episodes']} episodes ({summary['frames']} frames, "
        f"{summary['probe_successes']} probe successes) from {summary['model_id']}"
    )
    for key in ("store", "lerobot", "preview"):
        err_console.print(f"  {key:8s} {summary[key]}")
    err_console.print(f"  summary  {summary['folder']}/summary.json")


@app.command()
@user_errors
def train(
    stage: Annotated[str, typer.Argument(help="autoencoder | dynamics | decoder | probe")],
    data: Annotated[Path, typer.Option("--data", help="Episode store to train on.")],
    out: Annotated[Path, typer.Option("--out", help="Model directory (all parts live here).")],
    minutes: Annotated[float | None, typer.Option(help="Budget in minutes (total).")] = None,
    steps: Annotated[int | None, typer.Option(help="Budget in optimiser steps (total).")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N].")] = "auto",
    resume: Annotated[bool, typer.Option(help="Continue from the directory's state.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
) -> None:
    """Train one stage of the world model into a model directory."""
    from pipelines.train import TrainRequest, run_train

    req = TrainRequest(
        stage=stage, data=data, out=out, minutes=minutes, steps=steps, device=device, resume=resume
    )
    with LazyBar(f"train {stage}") as bar:

        def on_progress(step: int, total: int | None, metrics: dict[str, float]) -> None:
            shown = "  ".join(f"{k} {v:.4g}" for k, v in list(metrics.items())[:4])
            bar.update(step, total, shown)

        metrics = run_train(req, on_progress)
    if json_out:
        print_json(metrics)
    else:
        err_console.print(
            f"[bold green]done[/]: {stage} in {out}: "
            + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        )


eval_app = typer.Typer(help="Evaluate a world model.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")


@eval_app.command("fidelity")
@user_errors
def eval_fidelity(
    data: Annotated[Path, typer.Option("--data", help="Held-out ground-truth episodes.")],
    model: Annotated[Path | None, typer.Option(help="Model dir (default: shipped).")] = None,
    episodes: Annotated[int, typer.Option(help="Episodes to replay.")] = 16,
    stability_frames: Annotated[int, typer.Option(help="Closed-loop rollout length.")] = 9000,
    video: Annotated[Path | None, typer.Option(help="Write real | generated mp4 here.")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N].")] = "auto",
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Frame, task-state and long-horizon fidelity against the ground truth."""
    from pipelines.eval_fidelity import FidelityRequest, run_fidelity

    req = FidelityRequest(
        data=data,
        model=model,
        episodes=episodes,
        video=video,
        stability_frames=stability_frames,
        device=device,
    )
    with LazyBar("stability rollout") as bar:
        result = run_fidelity(req, lambda _n, done, total: bar.update(done, total))
    if json_out:
        print_json(result)
    else:
        from pipelines.eval_view import render_fidelity

        render_fidelity(result)


@app.command()
@user_errors
def teleop(
    out: Annotated[Path, typer.Option("--out", help="Store to append to (created if new).")],
    device: Annotated[
        str, typer.Option(help="spacemouse | keyboard | mouse | web | scripted.")
    ] = "keyboard",
    model: Annotated[Path | None, typer.Option(help="Model dir (default: shipped).")] = None,
    world: Annotated[
        str | None, typer.Option(help="Drive the ground truth instead (pusht).")
    ] = None,
    fps: Annotated[float, typer.Option(help="Loop rate (frames per second).")] = 15.0,
    task: Annotated[str, typer.Option(help="Task string stored with each episode.")] = "",
    episodes: Annotated[
        int | None, typer.Option(help="Stop after N saved episodes (default: on quit).")
    ] = None,
    steps: Annotated[int, typer.Option(help="Frames per episode at most.")] = 300,
    headless: Annotated[bool, typer.Option(help="No window (--device scripted).")] = False,
    seed: Annotated[int, typer.Option(help="Episode i starts from seed S+i.")] = 0,
    reset_from: Annotated[
        Path | None, typer.Option(help="Reset to the episodes of this store instead.")
    ] = None,
    generator: Annotated[
        str, typer.Option(help="--device scripted: play | expert | replay.")
    ] = "play",
    resolution: Annotated[int, typer.Option(help="--world: image size in pixels.")] = 96,
    host: Annotated[str, typer.Option(help="--device web: address to serve on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="--device web: port (0: any free one).")] = 8765,
    speed: Annotated[float, typer.Option(help="Target speed, board px/s at full tilt.")] = 256.0,
    deadzone: Annotated[float, typer.Option(help="Stick/SpaceMouse deadzone, 0-1.")] = 0.1,
    compute: Annotated[str, typer.Option(help="Model device: auto | cpu | cuda[:N].")] = "auto",
    threads: Annotated[int, typer.Option(help="Torch CPU threads for the model.")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Drive the robot inside the world model (or the ground truth) and record episodes."""
    from pipelines.teleop import TeleopConfig, TeleopSession, run_teleop

    cfg = TeleopConfig(
        out=out,
        device=device,
        model=model,
        world=world,
        fps=fps,
        task=task,
        episodes=episodes,
        steps=steps,
        headless=headless,
        seed=seed,
        reset_from=reset_from,
        generator=generator,
        resolution=resolution,
        host=host,
        port=port,
        speed=speed,
        deadzone=deadzone,
        compute=compute,
        threads=threads,
    )

    def ready(session: TeleopSession) -> None:
        where = f"; open {session.viewer.location}" if device == "web" else ""
        keys = "" if device == "scripted" else "; space start, enter/n save, x discard, q quit"
        text = f"teleop: {device} in {session.world.spec.name}{where}{keys}"
        err_console.print(text, soft_wrap=True, highlight=False)

    summary = run_teleop(cfg, ready)
    if json_out:
        print_json(summary)
    else:
        err_console.print(
            f"saved {summary['episodes']} episodes ({summary['frames']} frames) to {out}: "
            f"{summary['achieved_fps']:.1f} fps, {100 * summary['late_frac']:.1f}% late, "
            f"latency p99 {summary['latency_ms_p99']:.0f} ms",
            soft_wrap=True,
        )
    if summary["end_reason"] == "device_disconnected":
        message = f"[bold red]error:[/] {summary['message']}"
        err_console.print(message, highlight=False, soft_wrap=True)
        raise typer.Exit(code=2)
    if summary["end_reason"] == "interrupted":
        raise typer.Exit(code=130)


export_app = typer.Typer(help="Export a store to another format.", no_args_is_help=True)
app.add_typer(export_app, name="export")
import_app = typer.Typer(help="Import a dataset into a store.", no_args_is_help=True)
app.add_typer(import_app, name="import")


@export_app.command("lerobot")
@user_errors
def export_lerobot_cmd(
    store: Annotated[Path, typer.Argument(help="Episode store to export (read only).")],
    out: Annotated[Path, typer.Argument(help="New LeRobot dataset folder.")],
    repo_id: Annotated[str, typer.Option("--repo-id", help="Dataset id, e.g. local/NAME.")],
    task: Annotated[
        str | None, typer.Option(help="Task string for every episode (default: each episode's).")
    ] = None,
    video: Annotated[
        bool, typer.Option("--video/--images", help="Cameras as MP4 video or lossless PNG.")
    ] = True,
    vcodec: Annotated[str, typer.Option(help="libsvtav1 (AV1) | h264.")] = "libsvtav1",
    crf: Annotated[
        int | None, typer.Option(help="Video quality (default: libsvtav1 30, h264 23).")
    ] = None,
    only_success: Annotated[bool, typer.Option(help="Only successful episodes.")] = False,
    episodes: Annotated[
        str | None, typer.Option(help="Selection such as 0:10,15 (half-open ranges).")
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace OUT if it exists.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Write a store's episodes as a LeRobotDataset v3.0 (lerobot's own writer)."""
    from pipelines.export import ExportConfig, export_lerobot

    cfg = ExportConfig(
        store=store,
        out=out,
        repo_id=repo_id,
        task=task,
        video=video,
        vcodec=vcodec,
        crf=crf,
        only_success=only_success,
        episodes=episodes,
        overwrite=overwrite,
    )
    with LazyBar("export lerobot") as bar:
        summary = export_lerobot(cfg, lambda d, t, f: bar.update(d, t, f"{f} frames"))
    if json_out:
        print_json(summary)
    else:
        err_console.print(
            f"[bold green]done[/]: {summary['episodes']} episodes, {summary['frames']} frames "
            f"in {out} ({summary['frames_per_s']:.0f} frames/s); train with: lerobot-train "
            f"--dataset.repo_id={repo_id} --dataset.root={out} ..."
        )


@import_app.command("lerobot")
@user_errors
def import_lerobot_cmd(
    root: Annotated[Path, typer.Argument(help="LeRobot v3.0 dataset folder (read only).")],
    store: Annotated[Path, typer.Argument(help="New episode store.")],
    camera: Annotated[
        str | None, typer.Option(help="Import only this camera feature, as 'image'.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Turn a LeRobotDataset v3.0 into an episode store (to train the world model on it)."""
    from pipelines.export import ImportConfig, import_lerobot

    with LazyBar("import lerobot") as bar:
        summary = import_lerobot(
            ImportConfig(root=root, store=store, camera=camera),
            lambda d, t, f: bar.update(d, t, f"{f} frames"),
        )
    if json_out:
        print_json(summary)
    else:
        s = summary["store"]
        err_console.print(
            f"[bold green]done[/]: {store}: {s['episodes']} episodes, {s['frames']} frames, "
            f"keys {', '.join(s['keys'])}"
        )


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
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster (HOST:6379 or auto); default: local.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Episode i uses seed S+i.")] = 0,
    only_success: Annotated[
        bool, typer.Option(help="Keep only episodes the probe scores successful.")
    ] = False,
    append: Annotated[
        bool, typer.Option(help="Add to an existing store, skip done seeds.")
    ] = False,
    noise: Annotated[float, typer.Option(help="replay: action noise std (px).")] = 0.0,
    time_warp: Annotated[float, typer.Option(help="replay: speed in U(1-w, 1+w).")] = 0.0,
    context: Annotated[int, typer.Option(help="replay: real context frames.")] = 1,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda.")] = "auto",
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Generate episodes inside the world model on Ray workers, into one store."""
    from pipelines.generate import (
        GenerateConfig,
        GenProgress,
        execute_generate,
        prepare_generate,
        summary_line,
    )

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
        append=append,
        replay_noise=noise,
        replay_time_warp=time_warp,
        context=context,
        device=device,
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


bench_app = typer.Typer(help="Benchmarks (each prints JSON with --json).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("generate")
@user_errors
def bench_generate(
    model: Annotated[Path | None, typer.Option(help="Model dir (default: shipped).")] = None,
    episodes: Annotated[int, typer.Option(help="Episodes in each measured run.")] = 32,
    steps: Annotated[int, typer.Option(help="Steps per episode.")] = 50,
    batch_size: Annotated[int, typer.Option(help="Batched runs: slots per worker.")] = 16,
    generator: Annotated[str, typer.Option(help="play | expert.")] = "play",
    threads: Annotated[int, typer.Option(help="Torch threads per process / worker.")] = 1,
    resolution: Annotated[
        int | None, typer.Option(help="Time a random-weight copy at this size (px).")
    ] = None,
    device: Annotated[str, typer.Option(help="cpu | cuda.")] = "cpu",
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
    )
    with LazyBar("bench generate") as bar:
        result = run_bench(cfg, lambda done, total, name: bar.update(done, total, name))
    if json_out:
        print_json(result)
    else:
        render_bench(result)


@bench_app.command("rollout")
@user_errors
def bench_rollout(
    model: Annotated[Path | None, typer.Option(help="Model dir (default: shipped).")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda[:N].")] = "auto",
    steps: Annotated[int, typer.Option(help="Timed steps per batch size.")] = 300,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Batch-1 interactive FPS (median step) and frames/s at batch 16 and 64."""
    from pipelines.bench_rollout import RolloutBenchRequest, run_rollout_bench

    req = RolloutBenchRequest(model=model, device=device, steps=steps)
    with LazyBar("bench rollout") as bar:
        result = run_rollout_bench(req, lambda _n, done, total: bar.update(done, total, ""))
    if json_out:
        print_json(result)
    else:
        err_console.print(
            f"{result['device']}: batch 1 {result['fps_batch1']:.1f} FPS; "
            + ", ".join(f"batch {b} {v:.1f} frames/s" for b, v in result["throughput"].items())
        )


def _advance(bar: Progress, task: TaskID) -> Callable[[int, int, object], None]:
    """An ``on_episode`` callback that moves ``task`` to the number of episodes done."""

    def on_episode(done: int, _total: int, _result: object) -> None:
        bar.update(task, completed=done)

    return on_episode


def main() -> None:
    app()


if __name__ == "__main__":
    main()
