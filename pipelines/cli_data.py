"""``factory collect | inspect | demo``: ground-truth episodes, store summaries, the main job.

factory collect --env pusht --generator play --episodes 20 --out runs/play.zarr
factory collect --env pusht --generator expert --episodes 10 --out runs/expert.zarr --workers 2
factory collect --generator replay --source runs/play.zarr --episodes 5 --out runs/rp.zarr
factory inspect runs/play.zarr --json
factory demo
factory demo --out runs/demo --episodes 16
factory demo --env pile
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import TaskID

from pipelines.cli_app import (
    ActionNoise,
    ActionNoiseCorr,
    GeneratorParams,
    app,
    generator_params,
)
from pipelines.console import err_console, print_json, progress, user_errors
from pipelines.demo import DEMO_ENVS

DEMO_STEPS = ", ".join(f"{name} {env.steps}" for name, env in DEMO_ENVS.items())


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
    fsync: Annotated[
        bool, typer.Option("--fsync", help="Durable store: fsync every commit (slower).")
    ] = False,
    action_noise: ActionNoise = 0.0,
    action_noise_corr: ActionNoiseCorr = 0.0,
    param: GeneratorParams = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Record episodes in the ground-truth env into a store."""
    from factory.record import EpisodeResult
    from pipelines.collect import CollectConfig, execute_collect, prepare_collect

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
        fsync=fsync,
        generator_params=generator_params(param, action_noise, action_noise_corr),
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
def migrate(
    store: Annotated[Path, typer.Argument(help="Episode store to bring to today's key names.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what, change nothing.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Rename a store's old keys in place (data/gt_state -> data/task_state); losing nothing.

    Old stores read as if renamed anyway; this makes it so on disk (an --append does too).
    """
    from factory.store.renames import migrate_store

    done = migrate_store(store, dry_run=dry_run)
    if json_out:
        print_json({"store": str(store), "dry_run": dry_run, "renamed": done})
        return
    verb = "would rename" if dry_run else "renamed"
    err_console.print(f"{store}: {verb} {', '.join(done)}" if done else f"{store}: up to date")


@app.command()
@user_errors
def demo(
    out: Annotated[
        Path | None, typer.Option("--out", help="Output folder (default ./demo-<time>).")
    ] = None,
    model: Annotated[
        Path | None, typer.Option(help="Model dir (default: the env's shipped one).")
    ] = None,
    env: Annotated[str, typer.Option(help=f"World: {' | '.join(DEMO_ENVS)}.")] = "pusht",
    episodes: Annotated[int, typer.Option(help="Episodes to generate.")] = 8,
    steps: Annotated[
        int | None, typer.Option(help=f"Steps per episode (default: {DEMO_STEPS}).")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """The main job: expert episodes in the shipped model (Ray) -> store -> LeRobot -> video."""
    from pipelines.demo import DemoConfig, execute_demo, prepare_demo

    plan = prepare_demo(DemoConfig(out=out, model=model, env=env, episodes=episodes, steps=steps))
    with progress() as bar:
        tasks: dict[str, TaskID] = {}

        def on_stage(stage: str, done: int, total: int, info: str) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total, info="")
            bar.update(tasks[stage], completed=done, total=total, info=info)

        summary = execute_demo(plan, on_stage)
    if json_out:
        print_json(summary)
        return
    err_console.print(
        f"[bold green]done[/]: {summary['episodes']} episodes ({summary['frames']} frames, "
        f"{summary['model_successes']} successes in the model) from {summary['model_id']} "
        f"({summary['env']}; cameras {', '.join(summary['cameras'])})"
    )
    for key in ("store", "lerobot", "preview"):
        err_console.print(f"  {key:8s} {summary[key]}")
    err_console.print(f"  summary  {summary['folder']}/summary.json")
    err_console.print(f"The preview shows {summary['preview_shows']}", highlight=False)
