"""Pick a stage's batch size on an accelerator by measuring, not guessing.

A few optimiser steps of the real stage run in a scratch copy of the model directory at
doubling batch sizes; the step time comes from the loop's per-step progress callback
(each callback follows a host sync, the loss read-back). Doubling stops when samples/s
gains less than ``min_gain``, memory runs out, or ``max_batch`` is reached. The smallest
batch within ``knee`` of the best rate wins (more optimiser steps for the same samples/s),
capped so the stage still gets ``min_steps`` steps in its budget.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from factory.model.files import is_training_state
from factory.train.loop import Budget, ProgressFn, TrainConfig

log = logging.getLogger(__name__)

SCRATCH = ".batch_search"
StageCall = Callable[[Path, TrainConfig, Budget, ProgressFn], object]


@dataclass(frozen=True)
class BatchSearch:
    """Settings of the batch-size measurement (used on CUDA only)."""

    enabled: bool = True
    max_batch: int = 2048
    probe_steps: int = 8
    skip_steps: int = 3
    min_gain: float = 0.15
    knee: float = 0.9
    min_steps: int = 300


@dataclass(frozen=True)
class BatchChoice:
    """The chosen batch and the measured samples/s per batch tried."""

    batch_size: int
    rates: dict[int, float]
    wall_s: float


def scratch_copy(out_dir: Path) -> Path:
    """A scratch model directory inside ``out_dir``: its configs and weights copied, the
    latent cache hard-linked (only read there), no training state."""
    scratch = out_dir / SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    for f in out_dir.iterdir():
        if not f.is_file() or is_training_state(f.name):
            continue
        if f.name.startswith("latents."):
            os.link(f, scratch / f.name)
        else:
            shutil.copy2(f, scratch / f.name)
    return scratch


def time_steps(call: StageCall, scratch: Path, tc: TrainConfig, cfg: BatchSearch) -> float:
    """Median seconds per optimiser step of ``call`` at ``tc`` (steady state)."""
    stamps: list[float] = []

    def on_progress(_step: int, _total: int | None, _metrics: dict[str, float]) -> None:
        stamps.append(time.perf_counter())

    call(scratch, tc, Budget(steps=cfg.probe_steps), on_progress)
    gaps = [b - a for a, b in itertools.pairwise(stamps)][cfg.skip_steps - 1 :]
    if not gaps:
        raise ValueError("batch search needs probe_steps > skip_steps")
    return statistics.median(gaps)


def choose(rates: dict[int, float], cfg: BatchSearch, budget_s: float | None) -> int:
    """Among the batches that leave ``min_steps`` in ``budget_s``, the smallest within
    ``knee`` of their best rate (the smallest batch tried when none leaves enough)."""
    ok = {b: r for b, r in rates.items() if budget_s is None or budget_s * r / b >= cfg.min_steps}
    if not ok:
        return min(rates)
    best = max(ok.values())
    return min(b for b, r in ok.items() if r >= cfg.knee * best)


def search_batch(
    call: StageCall,
    out_dir: Path,
    part: str,
    base: TrainConfig,
    cfg: BatchSearch,
    budget_s: float | None,
) -> BatchChoice:
    """Measure ``call`` (a stage run into a scratch dir) at doubling batch sizes."""
    t0 = time.monotonic()
    rates: dict[int, float] = {}
    batch = base.batch_size
    try:
        while batch <= cfg.max_batch:
            scratch = scratch_copy(out_dir)
            tc = dataclasses.replace(base, batch_size=batch, log_every=1)
            try:
                rates[batch] = batch / time_steps(call, scratch, tc, cfg)
            except torch.OutOfMemoryError:
                log.info("batch %d: out of memory", batch)
                torch.cuda.empty_cache()
                break
            log.info("%s: batch %d: %.0f samples/s", part, batch, rates[batch])
            prev = rates.get(batch // 2)
            if prev is not None and rates[batch] < (1 + cfg.min_gain) * prev:
                break
            batch *= 2
    finally:
        shutil.rmtree(out_dir / SCRATCH, ignore_errors=True)
    if not rates:
        return BatchChoice(base.batch_size, {}, time.monotonic() - t0)
    return BatchChoice(choose(rates, cfg, budget_s), rates, time.monotonic() - t0)
