"""``factory teleop``: drive the robot inside the world model and record demonstrations.

    factory teleop --device keyboard --out runs/teleop.zarr --task "push the T onto the goal"
    factory teleop --device spacemouse --model runs/v2 --out runs/teleop.zarr
    factory teleop --device web --out runs/teleop.zarr        # open the printed ?token= URL
    factory teleop --world pusht --device mouse --out runs/gt_teleop.zarr
    factory teleop --device scripted --generator expert --headless --episodes 5 \\
        --steps 200 --out runs/scripted.zarr --json

The world is the shipped model by default, any model with ``--model DIR``, or the
ground truth with ``--world pusht``. Episodes are appended to ``--out`` (created if new);
every finished one is committed at once, with its provenance and timing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from factory.envs import make_world
from factory.errors import FactoryError
from factory.store import EpisodeStore
from factory.world import World, WorldSpec
from teleop.node import NodeConfig, RecordingNode
from teleop.sources import (
    SOURCES,
    ActionSource,
    EventBus,
    InitialCondition,
    PlanarMapping,
    SourceOptions,
    make_source,
)
from teleop.sources.mapping import PLANAR_DIM
from teleop.viewers import Viewer, ViewerOptions, make_viewer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TeleopConfig:
    """What ``factory teleop`` does (see the module docstring)."""

    out: Path
    device: str = "keyboard"
    model: Path | None = None
    world: str | None = None
    fps: float = 15.0
    task: str = ""
    episodes: int | None = None
    steps: int = 300
    headless: bool = False
    seed: int = 0
    reset_from: Path | None = None
    generator: str = "play"
    resolution: int = 96
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    no_token: bool = False
    speed: float = 256.0
    deadzone: float = 0.1
    compute: str = "auto"
    threads: int = 1
    max_ticks: int | None = None


@dataclass
class TeleopSession:
    """Everything a session holds open; :meth:`close` releases it all."""

    cfg: TeleopConfig
    world: World
    source: ActionSource
    viewer: Viewer
    store: EpisodeStore
    initials: Iterator[InitialCondition]
    model_id: str | None
    bus: EventBus

    def close(self) -> None:
        for closer in (self.viewer.close, self.source.close, self.store.close, self.world.close):
            try:
                closer()
            except Exception:  # closing one part must not keep the others open
                log.exception("closing the teleop session")


def viewer_kind(cfg: TeleopConfig) -> str:
    """``web`` for the browser device, ``none`` when headless, else the local window."""
    if cfg.device == "web":
        return "web"
    return "none" if cfg.headless else "window"


def check_config(cfg: TeleopConfig) -> None:
    """Refuse contradictory or impossible settings before anything opens."""
    if cfg.device not in SOURCES:
        raise FactoryError(f"unknown --device {cfg.device!r}; valid devices: {', '.join(SOURCES)}")
    if cfg.model is not None and cfg.world is not None:
        raise FactoryError("pass --model DIR or --world NAME, not both")
    if cfg.headless and cfg.device not in ("scripted", "web"):
        raise FactoryError(
            f"--headless opens no window, so --device {cfg.device} has nothing to drive; "
            "only --device scripted runs unattended (--device web serves its own page)"
        )
    if cfg.device == "scripted" and cfg.generator == "replay" and cfg.reset_from is None:
        raise FactoryError("--generator replay replays stored episodes: pass --reset-from STORE")
    if cfg.threads < 1:
        raise FactoryError(f"--threads must be >= 1, got {cfg.threads}")
    if not 0 <= cfg.port <= 65535:
        raise FactoryError(f"--port must be in [0, 65535], got {cfg.port}")
    if cfg.device == "web":
        check_web_access(cfg)
    NodeConfig(fps=cfg.fps, steps=cfg.steps, episodes=cfg.episodes)  # validates them


def check_web_access(cfg: TeleopConfig) -> None:
    """``--token`` or ``--no-token`` (not both); no token only on a loopback ``--host``."""
    from teleop.viewers.access import check_token

    if cfg.no_token and cfg.token is not None:
        raise FactoryError("pass --token TOKEN or --no-token, not both")
    if cfg.no_token or cfg.token is not None:
        check_token(None if cfg.no_token else cfg.token, cfg.host)


def page_token(cfg: TeleopConfig) -> str | None:
    """The token the page asks for: ``--token``, none with ``--no-token``, else a new one."""
    from teleop.viewers.access import new_token

    if cfg.no_token:
        return None
    return cfg.token if cfg.token is not None else new_token()


def build_world(cfg: TeleopConfig) -> tuple[World, str | None]:
    """The ground truth (``--world``) or a model world (``--model``, default shipped)."""
    if cfg.world is not None:
        return make_world(cfg.world, batch_size=1, resolution=cfg.resolution), None
    import torch

    from factory.device import resolve_device
    from factory.envs.model_world import ModelWorld
    from factory.model.files import load_model

    device = resolve_device(cfg.compute)
    if device == "cpu":
        # Batch 1 on a shared CPU: more intra-op threads spin-wait on each other (a tiny
        # model's step, p50: 15 ms on 1 thread, 167 ms on 2, with the 2 cores loaded).
        torch.set_num_threads(cfg.threads)
    model, model_id = load_model(cfg.model, device=device)
    if model.config.action_dim != PLANAR_DIM:
        raise FactoryError(
            f"model {model_id} takes {model.config.action_dim}-D actions, but the teleop "
            f"devices drive PushT's 2-D target (agent x, y): pass a PushT model with --model"
        )
    return ModelWorld(model, batch_size=1, seed=cfg.seed, model_id=model_id), model_id


def initial_conditions(cfg: TeleopConfig, spec: WorldSpec) -> Iterator[InitialCondition]:
    """Seeds ``seed, seed+1, ...``, or the episodes of ``--reset-from`` in turn (their
    first frame when it fits the world, their initial config, their actions)."""
    if cfg.reset_from is None:
        return (
            InitialCondition(seed=cfg.seed + i, label=f"seed {cfg.seed + i}")
            for i in itertools.count()
        )
    stored = _stored_initials(cfg.reset_from, spec)
    if cfg.device == "scripted" and cfg.generator == "replay":
        for initial in stored:  # refused before the store opens, not by the first episode
            acts = initial.actions
            if acts is None or not np.isfinite(acts).all():
                what = "no actions" if acts is None else "non-finite actions (NaN or inf)"
                raise FactoryError(
                    f"{initial.label} has {what}; --generator replay needs finite ones"
                )
    return (
        dataclasses.replace(stored[i % len(stored)], seed=cfg.seed + i) for i in itertools.count()
    )


def _stored_initials(path: Path, spec: WorldSpec) -> list[InitialCondition]:
    with EpisodeStore.open(path, mode="r") as store:
        keys = store.schema.keys
        use_frames = "image" in keys and keys["image"].shape == spec.image_shape
        has_config = "state" in keys and "task_state" in keys
        if not (use_frames or has_config):
            raise FactoryError(
                f"{path} has neither frames of shape {spec.image_shape} nor state + task_state "
                "to reset from; pass a store recorded in this world"
            )
        out = []
        for ep in store:
            config = None
            if has_config:
                config = np.concatenate([ep["state"][0], ep["task_state"][0]]).astype(np.float64)
            out.append(
                InitialCondition(
                    seed=0,
                    config=config,
                    frames=ep["image"][:1] if use_frames else None,
                    actions=np.asarray(ep["action"], np.float32) if "action" in keys else None,
                    label=f"{path}#{ep.index}",
                )
            )
    if not out:
        raise FactoryError(f"{path} holds no episodes to reset from")
    return out


def open_store(out: Path, spec: WorldSpec) -> EpisodeStore:
    """Create ``out``, or reopen it for append if its schema fits this world."""
    from factory.record import open_output

    return open_output(out, spec, spec.image_shape[0], append=True)


def prepare_teleop(cfg: TeleopConfig) -> TeleopSession:
    """Validate, then open the world, the device, the viewer and the store, in that order
    (so a missing device or a taken port never creates an empty store)."""
    check_config(cfg)
    bus = EventBus()
    world, model_id = build_world(cfg)
    opened: list[Callable[[], None]] = [world.close]
    try:
        options = SourceOptions(
            mapping=PlanarMapping(speed=cfg.speed, deadzone=cfg.deadzone),
            generator=cfg.generator,
        )
        source = make_source(cfg.device, options, bus)
        opened.append(source.close)
        source.open(world.spec)
        token = page_token(cfg) if cfg.device == "web" else None
        shown = ViewerOptions(host=cfg.host, port=cfg.port, token=token)
        viewer = make_viewer(viewer_kind(cfg), shown, bus)
        viewer.open()
        opened.append(viewer.close)
        initials = initial_conditions(cfg, world.spec)
        store = open_store(cfg.out, world.spec)
    except BaseException:
        for close in reversed(opened):
            with contextlib.suppress(Exception):
                close()
        raise
    return TeleopSession(cfg, world, source, viewer, store, initials, model_id, bus)


def run_teleop(
    cfg: TeleopConfig, on_ready: Callable[[TeleopSession], None] | None = None
) -> dict[str, Any]:
    """Prepare, run the recording node, close; returns the session summary.

    ``on_ready(session)`` runs once everything is open (the CLI prints the page address).
    SIGTERM is handled like Ctrl-C: the episode in progress is dropped, the rest kept.
    """
    session = prepare_teleop(cfg)
    node_cfg = NodeConfig(
        fps=cfg.fps,
        steps=cfg.steps,
        episodes=cfg.episodes,
        max_ticks=cfg.max_ticks,
        task=cfg.task,
        model_id=session.model_id,
    )
    try:
        if on_ready is not None:
            on_ready(session)
        node = RecordingNode(
            session.world, session.source, session.viewer, session.store, session.initials, node_cfg
        )
        with _sigterm_as_interrupt(node.interrupt):
            summary = node.run()
        summary["store_episodes"] = session.store.n_episodes
    finally:
        session.close()
    summary.update(
        store=str(cfg.out),
        device=cfg.device,
        world=session.world.spec.name,
        model_id=session.model_id,
        page=_without_token(session.viewer.location) if cfg.device == "web" else "",
    )
    return summary


def _without_token(url: str) -> str:
    """The page's URL minus its ``?token=`` (summaries outlive the session)."""
    return url.split("?", 1)[0]


@contextlib.contextmanager
def _sigterm_as_interrupt(request: Callable[[], None]) -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, and ``request``s it too, for when the raise lands
    in a C callback that swallows it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        request()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
