"""``factory export lerobot | import lerobot``: LeRobot v3.0 datasets in and out.

factory export lerobot runs/play.zarr runs/play_lerobot --repo-id local/play
factory export lerobot runs/play.zarr runs/ok --repo-id local/ok --only-success --images
factory import lerobot runs/play_lerobot runs/back.zarr --camera observation.image
factory policy train runs/state_lerobot runs/act --repo-id local/state --steps 4000
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pipelines.cli_app import export_app, import_app, policy_app
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
    obs: Annotated[
        str,
        typer.Option(
            help="What to write besides action: all | pixels_agent_pos (cameras + state) | "
            "environment_state_agent_pos (the T's 16 keypoint coordinates + state, no cameras)."
        ),
    ] = "all",
    actions: Annotated[
        str,
        typer.Option(
            help="What action holds: executed (the store's action) | label (a store recorded "
            "with --action-noise: the expert's clean actions, the ones to imitate)."
        ),
    ] = "executed",
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Write a store's episodes as a LeRobotDataset v3.0 (lerobot's own writer); a PushT
    store's also get next.reward, next.success and next.done, scored from task_state."""
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
        obs=obs,
        actions=actions,
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


@policy_app.command("train")
@user_errors
def policy_train_cmd(
    root: Annotated[Path, typer.Argument(help="State-only LeRobot dataset (export --obs ...).")],
    out: Annotated[Path, typer.Argument(help="Run folder: checkpoints/<step>/pretrained_model.")],
    repo_id: Annotated[str, typer.Option("--repo-id", help="The dataset's id, e.g. local/NAME.")],
    policy: Annotated[str, typer.Option(help="lerobot policy type: act | diffusion | ...")] = "act",
    config: Annotated[
        str, typer.Option(help="Policy config overrides as JSON, e.g. '{\"chunk_size\": 16}'.")
    ] = "{}",
    steps: Annotated[int, typer.Option(help="Optimizer steps.")] = 4000,
    batch_size: Annotated[int, typer.Option(help="Samples per step.")] = 64,
    save: Annotated[str, typer.Option(help="Also checkpoint at these steps, e.g. 1000,2000.")] = "",
    seed: Annotated[int, typer.Option(help="Torch and sampling seed.")] = 1000,
    device: Annotated[str, typer.Option(help="cpu | cuda.")] = "cpu",
    lr_schedule: Annotated[
        str, typer.Option(help="preset (the policy's own) | cosine (warm-up, cosine decay).")
    ] = "preset",
    ema: Annotated[
        float,
        typer.Option(help="Checkpoint an EMA of the weights with this largest decay (0: off)."),
    ] = 0.0,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Train a lerobot policy on a state-only dataset, in RAM; lerobot-eval loads the result."""
    import json

    from factory.errors import FactoryError
    from policies.train import PolicyTrainConfig, train_policy

    try:
        overrides = json.loads(config)
        saves = [int(x) for x in save.split(",") if x.strip()]
    except ValueError as err:
        raise FactoryError(f"--config must be a JSON object and --save integers: {err}") from None
    if not isinstance(overrides, dict):
        raise FactoryError(f"--config must be a JSON object, got {config!r}")
    cfg = PolicyTrainConfig(root=root, repo_id=repo_id, out=out, policy=policy,
                            overrides=overrides, steps=steps, batch_size=batch_size,
                            save_steps=saves, seed=seed, device=device,
                            lr_schedule=lr_schedule, ema=ema)  # fmt: skip
    with LazyBar(f"policy train {policy}") as bar:
        info = train_policy(cfg, lambda s, n, loss: bar.update(s, n, f"loss {loss:.3f}"))
    if json_out:
        print_json(info)
    else:
        err_console.print(
            f"[bold green]done[/]: {len(info['checkpoints'])} checkpoints in {out}/checkpoints "
            f"({info['wall_s']:.0f} s); score with: lerobot-eval --policy.path=CKPT ..."
        )
