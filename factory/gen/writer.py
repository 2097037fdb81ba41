"""The single writer of a generation run: every generated episode goes through it.

Workers (wherever they run) hand each finished episode to :meth:`Writer.add`; the writer
appends it to the plan's output store (only successful ones with ``only_success``), never
the same seed twice, keeps the run's counts and reports a :class:`GenProgress` after each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from factory.gen.jobs import GeneratedEpisode
from factory.gen.plan import GeneratePlan
from factory.gen.robustness import RobustConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenProgress:
    """Where a run stands, after each episode arrives at the writer."""

    written: int
    tried: int
    total: int
    successes: int
    frames: int
    elapsed_s: float
    worker: str  # the worker that generated this episode
    worker_names: tuple[str, ...]
    restarts: int


class Writer:
    """The single writer: appends episodes (only successful ones with ``only_success``,
    and only robust ones with a robustness rule: :func:`keeps`), never the same seed
    twice, and keeps the run's counts."""

    def __init__(self, plan: GeneratePlan, on_progress: Callable[[GenProgress], None] | None):
        self.plan, self.on_progress = plan, on_progress
        self.seen: set[int] = set()
        self.written = self.tried = self.successes = self.frames = self.frames_generated = 0
        self.start = time.perf_counter()

    def add(
        self, ep: GeneratedEpisode, worker: str, worker_names: tuple[str, ...], restarts: int
    ) -> None:
        seed = int(ep.meta.seed or 0)
        if seed in self.seen:
            log.warning("seed %d arrived twice; keeping the first", seed)
            return
        self.seen.add(seed)
        self.tried += 1
        self.frames_generated += ep.frames
        self.successes += bool(ep.meta.success)
        if keeps(ep, self.plan.cfg.only_success, self.plan.cfg.robust):
            self.plan.output().append_episode(ep.data, ep.meta)
            self.written += 1
            self.frames += ep.frames
        if self.on_progress is not None:
            self.on_progress(
                GenProgress(
                    written=self.written,
                    tried=self.tried,
                    total=len(self.plan.jobs),
                    successes=self.successes,
                    frames=self.frames_generated,
                    elapsed_s=time.perf_counter() - self.start,
                    worker=worker,
                    worker_names=worker_names,
                    restarts=restarts,
                )
            )


def keeps(ep: GeneratedEpisode, only_success: bool, robust: RobustConfig | None) -> bool:
    """The writer's rule: every episode, or with ``only_success`` the successful ones, and
    with ``robust`` only those whose robustness is at least ``robust.keep``."""
    if not only_success:
        return True
    if robust is None:
        return bool(ep.meta.success)
    return bool(ep.meta.success) and ep.meta.extra.get("robustness", 0.0) >= robust.keep


def summarise(writer: Writer, plan: GeneratePlan, info: dict[str, Any]) -> dict[str, Any]:
    """The run's summary (the ``--json`` object); ``info`` is the runner's own (its
    ``generate_s`` gives the rates)."""
    seconds = max(info.get("generate_s", 0.0), 1e-9)
    return {
        "episodes": writer.written,
        "tried": writer.tried,
        "kept": writer.written,
        "skipped": plan.skipped,
        "successes": writer.successes,
        "success_rate": writer.successes / writer.tried if writer.tried else 0.0,
        "frames": writer.frames,
        "frames_generated": writer.frames_generated,
        "frames_per_s": writer.frames_generated / seconds,
        "episodes_per_s": writer.tried / seconds,
        "generator": plan.cfg.generator,
        "model_id": plan.model_id,
        "batch_size": plan.cfg.batch_size,
        "only_success": plan.cfg.only_success,
        "success_score": plan.cfg.success_score,
        "robust": None if plan.cfg.robust is None else plan.cfg.robust.to_dict(),
        **info,
        "store": plan.output().summary(),
    }
