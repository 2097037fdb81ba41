"""``factory export lerobot | import lerobot``: LeRobot v3.0 datasets in and out.

factory export lerobot runs/play.zarr runs/play_lerobot --repo-id local/play
factory export lerobot runs/play.zarr runs/ok --repo-id local/ok --only-success --images
factory import lerobot runs/play_lerobot runs/back.zarr --camera observation.image
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipelines.cli_app import export_app, import_app
from pipelines.console import LazyBar, err_console, print_json, user_errors


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
