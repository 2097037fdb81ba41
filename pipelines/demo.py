"""The main job (``factory demo``): everything the factory does, end to end, on defaults.

Today it collects a small set of ground-truth PushT episodes (play and scripted-expert)
into one store and inspects it. Later stages (world model, batch generation, LeRobot
export) join it as they land.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from factory.errors import FactoryError


@dataclass(frozen=True)
class DemoConfig:
    """Where and how much: ``out`` defaults to ``./demo-<timestamp>``."""

    out: Path | None = None
    play_episodes: int = 6
    expert_episodes: int = 4
    steps: int = 200
    workers: int = 2


def demo_dir(cfg: DemoConfig) -> Path:
    """The output folder: ``cfg.out`` or a new timestamped folder; must not exist yet."""
    out = cfg.out or Path.cwd() / f"demo-{dt.datetime.now():%Y%m%d-%H%M%S}"
    if out.exists() and any(out.iterdir()):
        raise FactoryError(f"{out} already exists and is not empty; choose another --out")
    return out
