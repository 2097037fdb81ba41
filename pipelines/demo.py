"""The main job (``factory demo``): the whole factory, end to end, on the shipped defaults.

    factory demo
    factory demo --out runs/demo --episodes 8

Into a new folder (``./demo-<time>`` or ``--out``) it

1. generates episodes inside the shipped world model with the probe-driven scripted
   expert, batched on a local Ray worker (``factory generate``);
2. writes them to ``episodes.zarr`` (one writer, full provenance);
3. exports them as a LeRobot v3.0 dataset in ``lerobot/`` (lerobot's own writer);
4. writes ``preview.mp4``: the first episodes' generated frames with the probe's score;
5. prints where everything is, and ``summary.json`` records it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from factory.errors import FactoryError

Stage = Callable[[str, int, int, str], None]
"""Progress callback: (stage name, done, total, info)."""


@dataclass(frozen=True)
class DemoConfig:
    """Where and how much: ``out`` defaults to ``./demo-<timestamp>``; ``model`` None is
    the shipped model."""

    out: Path | None = None
    model: Path | None = None
    episodes: int = 8
    steps: int = 150
    batch_size: int = 8
    seed: int = 0
    preview_episodes: int = 4
    repo_id: str = "local/demofactory_pusht"


def demo_dir(cfg: DemoConfig) -> Path:
    """The output folder: ``cfg.out`` or a new timestamped folder; must not exist yet."""
    out = cfg.out or Path.cwd() / f"demo-{dt.datetime.now():%Y%m%d-%H%M%S}"
    if out.exists() and any(out.iterdir()):
        raise FactoryError(f"{out} already exists and is not empty; choose another --out")
    return out


def run_demo(cfg: DemoConfig, on_stage: Stage | None = None) -> dict[str, Any]:
    """Generate -> store -> LeRobot export -> preview; returns the summary (paths, counts)."""
    from factory.gen.plan import GenerateConfig
    from factory.gen.writer import GenProgress
    from pipelines.export import ExportConfig, export_lerobot
    from pipelines.generate import execute_generate, prepare_generate
    from pipelines.preview import write_preview

    def report(stage: str, done: int, total: int, info: str = "") -> None:
        if on_stage is not None:
            on_stage(stage, done, total, info)

    folder = demo_dir(cfg)
    store = folder / "episodes.zarr"
    plan = prepare_generate(  # every bad input (no model, ...) is refused here, before work
        GenerateConfig(
            out=store,
            model=cfg.model,
            generator="expert",
            episodes=cfg.episodes,
            steps=cfg.steps,
            batch_size=cfg.batch_size,
            workers=1,
            seed=cfg.seed,
        )
    )

    def on_generate(p: GenProgress) -> None:
        rate = p.frames / max(p.elapsed_s, 1e-9)
        report("generate (Ray)", p.tried, p.total, f"{rate:.0f} frames/s, {p.successes} ok")

    prefetch = _prefetch_exporter()
    generated = execute_generate(plan, on_generate)
    prefetch.join()
    exported = export_lerobot(
        ExportConfig(store=store, out=folder / "lerobot", repo_id=cfg.repo_id),
        lambda done, total, _frames: report("export LeRobot", done, total),
    )
    report("preview", 0, 1)
    preview = write_preview(store, folder / "preview.mp4", cfg.preview_episodes)
    report("preview", 1, 1)
    summary = {
        "folder": str(folder),
        "store": str(store),
        "lerobot": exported["out"],
        "repo_id": cfg.repo_id,
        "preview": str(preview),
        "model_id": generated["model_id"],
        "episodes": generated["episodes"],
        "frames": generated["frames"],
        "model_successes": generated["successes"],
        "preview_shows": preview_note(cfg, generated["episodes"], generated["successes"], store),
        "generate_frames_per_s": round(generated["frames_per_s"], 1),
        "export_frames_per_s": exported["frames_per_s"],
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def preview_note(cfg: DemoConfig, episodes: int, successes: int, store: Path) -> str:
    """One plain sentence on what ``preview.mp4`` shows and how far to trust it."""
    shown = min(cfg.preview_episodes, episodes)
    return (
        f"the first {shown} of {episodes} episodes generated inside the world model (no "
        f"physics engine); the score drawn is the model's own reading of the block's "
        f"coverage of the goal, and {successes} of {episodes} episodes reached coverage > "
        f"0.95 by that reading. Whether the same actions succeed in the real env: "
        f"factory eval transfer {store}"
    )


def _prefetch_exporter() -> threading.Thread:
    """Import the LeRobot exporter's libraries (lerobot, datasets, PyAV: seconds of imports)
    in the background while the driver mostly waits on Ray start-up and generation."""

    def load() -> None:
        from exporters.lerobot_common import require_lerobot

        with contextlib.suppress(FactoryError):  # the export itself reports it, in one line
            require_lerobot()

    thread = threading.Thread(target=load, name="demofactory-prefetch", daemon=True)
    thread.start()
    return thread
