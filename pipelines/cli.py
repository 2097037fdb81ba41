"""``factory``: the demofactory command line.

    factory collect --env pusht --generator play --episodes 20 --out runs/play.zarr
    factory collect --env pusht --generator expert --episodes 10 --out runs/expert.zarr --workers 2
    factory collect --generator replay --source runs/play.zarr --episodes 5 --out runs/rp.zarr
    factory inspect runs/play.zarr
    factory inspect runs/play.zarr --json

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
    workers: Annotated[int, typer.Option(help="Env processes.")] = 2,
) -> None:
    """The main job on shipped defaults: collect PushT play + expert episodes, then inspect."""
    from factory.store import EpisodeStore
    from pipelines.collect import CollectConfig, execute_collect, prepare_collect
    from pipelines.demo import DemoConfig, demo_dir
    from pipelines.inspect_view import render_summary

    cfg = DemoConfig(out=out, workers=workers)
    folder = demo_dir(cfg)
    store_path = folder / "episodes.zarr"
    runs = [("play", cfg.play_episodes, 0), ("expert", cfg.expert_episodes, 1000)]
    with progress() as bar:
        for generator, episodes, seed in runs:
            plan = prepare_collect(
                CollectConfig(
                    out=store_path,
                    generator=generator,
                    episodes=episodes,
                    seed=seed,
                    steps=cfg.steps,
                    workers=workers,
                    append=store_path.exists(),
                )
            )
            task = bar.add_task(f"collect {generator}", total=len(plan.jobs), info="")
            execute_collect(plan, _advance(bar, task))
    with EpisodeStore.open(store_path) as store:
        render_summary(store.summary())
    err_console.print(f"[bold green]done[/]: episode store at {store_path}")


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


def _advance(bar: Progress, task: TaskID) -> Callable[[int, int, object], None]:
    """An ``on_episode`` callback that moves ``task`` to the number of episodes done."""

    def on_episode(done: int, _total: int, _result: object) -> None:
        bar.update(task, completed=done)

    return on_episode


def main() -> None:
    app()


if __name__ == "__main__":
    main()
