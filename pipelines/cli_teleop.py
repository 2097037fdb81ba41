"""``factory teleop``: record demonstrations by driving the robot inside the world model.

factory teleop --device keyboard --out runs/teleop.zarr --task "push the T onto the goal"
factory teleop --device web --out runs/teleop.zarr     # open the printed URL (with ?token=)
factory teleop --world pusht --device scripted --headless --episodes 3 --out runs/t.zarr --json
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import urlsplit

import typer

from pipelines.cli_app import app
from pipelines.console import err_console, print_json, user_errors

if TYPE_CHECKING:
    from pipelines.teleop import TeleopConfig, TeleopSession


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
    token: Annotated[
        str | None,
        typer.Option(
            envvar="FACTORY_TELEOP_TOKEN",
            show_envvar=False,
            help="--device web: the page's token (default: a new random one per session).",
        ),
    ] = None,
    no_token: Annotated[
        bool, typer.Option("--no-token", help="--device web: ask for no token (loopback only).")
    ] = False,
    speed: Annotated[float, typer.Option(help="Target speed, board px/s at full tilt.")] = 256.0,
    deadzone: Annotated[float, typer.Option(help="Stick/SpaceMouse deadzone, 0-1.")] = 0.1,
    compute: Annotated[str, typer.Option(help="Model device: auto | cpu | cuda[:N].")] = "auto",
    threads: Annotated[int, typer.Option(help="Torch CPU threads for the model.")] = 1,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Drive the robot inside the world model (or the ground truth) and record episodes."""
    from pipelines.teleop import TeleopConfig, run_teleop

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
        token=token,
        no_token=no_token,
        speed=speed,
        deadzone=deadzone,
        compute=compute,
        threads=threads,
    )

    summary = run_teleop(cfg, lambda session: _announce(session, cfg))
    _report(summary, cfg, json_out)


def _announce(session: TeleopSession, cfg: TeleopConfig) -> None:
    """What the operator is driving and how: one line on stderr once the session is up
    (with ``--device web`` its address and any warnings about serving it)."""
    device = cfg.device
    where = f"; open {session.viewer.location}" if device == "web" else ""
    keys = "" if device == "scripted" else "; space start, enter/n save, x discard, q quit"
    text = f"teleop: {device} in {session.world.spec.name}{where}{keys}"
    err_console.print(text, soft_wrap=True, highlight=False, markup=False)
    if device == "web":
        served = urlsplit(session.viewer.location).port or cfg.port
        for line in web_warnings(cfg.host, served, cfg.no_token):
            err_console.print(f"[yellow]warning:[/] {line}", soft_wrap=True, highlight=False)


def _report(summary: dict[str, Any], cfg: TeleopConfig, json_out: bool) -> None:
    """The session's summary (JSON or one line); exit 2 when the device was unplugged
    (the episodes saved before stay), 130 when interrupted."""
    if json_out:
        print_json(summary)
    else:
        err_console.print(
            f"saved {summary['episodes']} episodes ({summary['frames']} frames) to {cfg.out}: "
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


DRIVE = (
    "open the page and drive the robot (other web sites still cannot: the websocket "
    "checks its Origin)"
)


def web_warnings(host: str, port: int, no_token: bool, exposed: str = DRIVE) -> list[str]:
    """What the user of a served page should know: no token (``exposed``: what anyone on
    this machine can then do), or not on loopback. ``factory view`` warns the same way."""
    from teleop.viewers.access import is_loopback

    lines = []
    if no_token:
        lines.append(f"--no-token: any program or user on this machine can {exposed}")
    if not is_loopback(host):
        lines.append(
            f"serving on {host}, not loopback: the traffic (the token too) is not encrypted; "
            f"the safe way in is ssh -L {port}:127.0.0.1:{port} with the default --host"
        )
    return lines
