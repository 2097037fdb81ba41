"""A generic training loop: budget, LR schedule, periodic checkpoints, resume, progress.

Each stage supplies ``step_fn(progress) -> metrics`` (with a scalar ``"loss"`` tensor to
backpropagate) and ``save_fn()`` (writes the part's weights and config). The loop owns
the AdamW optimiser, the schedule, the clock, checkpointing of the training state
(``<part>.optim.safetensors`` + ``<part>.state.json``) and the progress callback. The
library never prints: ``on_progress(step, total_or_None, metrics)`` is the only output.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from factory.errors import FactoryError
from factory.model.checkpoint import (
    CONFIG_FILE,
    build_part,
    load_part,
    load_training_state,
    part_fields,
    read_config,
    save_part,
    save_training_state,
)
from factory.model.layers import frames_to_float
from factory.train.accel import (
    compile_cpu_parts,
    cpu_compile_wanted,
    gather_frames,
    is_cuda,
    prepare_module,
)

log = logging.getLogger(__name__)

MAX_NON_FINITE = 50
"""Steps in a row with a non-finite loss or gradient after which training stops (one line,
exit 2): the run has diverged, and skipping more steps would only spend the budget."""

ProgressFn = Callable[[int, int | None, dict[str, float]], None]


@dataclass(frozen=True)
class Budget:
    """How long a stage trains, in total over resumes: wall ``minutes``, ``steps`` or
    ``cpu_minutes`` (this process's CPU time, all threads, and its finished children's:
    :func:`cpu_time`; whichever ends first).

    CPU minutes make equal-compute comparisons on a shared machine: another job's load
    slows the wall clock but not the CPU time a run gets (ablations use them)."""

    minutes: float | None = None
    steps: int | None = None
    cpu_minutes: float | None = None

    def __post_init__(self) -> None:
        if self.minutes is None and self.steps is None and self.cpu_minutes is None:
            raise ValueError("a budget needs minutes, steps or cpu_minutes")

    def progress(self, step: int, elapsed_s: float, cpu_s: float = 0.0) -> float:
        """Fraction of the budget used, in [0, 1]."""
        fracs = []
        if self.steps is not None:
            fracs.append(step / max(self.steps, 1))
        if self.minutes is not None:
            fracs.append(elapsed_s / max(self.minutes * 60.0, 1e-9))
        if self.cpu_minutes is not None:
            fracs.append(cpu_s / max(self.cpu_minutes * 60.0, 1e-9))
        return float(min(max(fracs), 1.0))

    def done(self, step: int, elapsed_s: float, cpu_s: float = 0.0) -> bool:
        return self.progress(step, elapsed_s, cpu_s) >= 1.0

    def wall_minutes(self, threads: int) -> float | None:
        """The most wall minutes the budget allows (``cpu_minutes`` spread over
        ``threads``), or None for a budget of steps alone."""
        given = [] if self.minutes is None else [self.minutes]
        if self.cpu_minutes is not None:
            given.append(self.cpu_minutes / max(threads, 1))
        return min(given) if given else None


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser and loop settings shared by every stage."""

    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_steps: int = 100
    schedule: str = "cosine"
    min_lr_ratio: float = 0.05
    grad_clip: float = 1.0
    checkpoint_every_s: float = 300.0
    threads: int = 2
    compile: bool | None = None
    """On the CPU, ``torch.compile`` the parts that declare it pays there
    (:func:`~factory.train.accel.compile_cpu_parts`); None: when the budget is long enough
    (:func:`~factory.train.accel.cpu_compile_wanted`)."""
    seed: int = 0
    log_every: int = 10
    val_fraction: float = 0.05


def cpu_time() -> float:
    """CPU seconds of this process (all threads) and of its finished children (the C++
    compiler that ``torch.compile`` runs), so a budget of CPU minutes counts both."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def apply_threads(cfg: TrainConfig) -> None:
    """Set torch's intra-op threads (``cfg.threads`` > 0) and flush denormals to zero.

    On a shared CPU, more threads than free cores makes OpenMP spin-wait and can slow
    training several times over; denormals slow CPU maths down as much.
    """
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    torch.set_flush_denormal(True)


def lr_at(cfg: TrainConfig, step: int, progress: float) -> float:
    """Linear warmup over ``warmup_steps``, then cosine to ``min_lr_ratio`` or constant."""
    warm = min(1.0, (step + 1) / max(cfg.warmup_steps, 1))
    if cfg.schedule == "constant":
        return cfg.lr * warm
    if cfg.schedule != "cosine":
        raise ValueError(f"unknown schedule {cfg.schedule!r}")
    cos = 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return cfg.lr * warm * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cos)


@dataclass
class LoopState:
    """What a stage's step function may read: step count, progress, RNGs."""

    step: int = 0
    elapsed_s: float = 0.0
    cpu_s: float = 0.0
    progress: float = 0.0
    rng: np.random.Generator = field(default_factory=np.random.default_rng)
    generator: torch.Generator = field(default_factory=torch.Generator)


def _restore(model_dir: Path, part: str, opt: torch.optim.Optimizer, state: LoopState) -> None:
    saved = load_training_state(model_dir, part, opt, state.generator)
    if saved is None:
        log.info("no %s training state in %s: starting fresh", part, model_dir)
        return
    state.step = int(saved["step"])
    state.elapsed_s = float(saved["elapsed_s"])
    state.cpu_s = float(saved.get("cpu_s", 0.0))
    if "numpy_rng" in saved:
        state.rng.bit_generator.state = saved["numpy_rng"]
    log.info("resumed %s at step %d", part, state.step)


def _checkpoint(
    model_dir: Path,
    part: str,
    opt: torch.optim.Optimizer,
    state: LoopState,
    save_fn: Callable[[LoopState], None],
) -> None:
    save_fn(state)
    save_training_state(
        model_dir,
        part,
        opt,
        {
            "step": state.step,
            "elapsed_s": state.elapsed_s,
            "cpu_s": state.cpu_s,
            "numpy_rng": state.rng.bit_generator.state,
        },
        state.generator,
    )


def run_training(
    *,
    part: str,
    model_dir: str | Path,
    params: Iterable[nn.Parameter],
    step_fn: Callable[[LoopState], dict[str, Tensor]],
    save_fn: Callable[[LoopState], None],
    cfg: TrainConfig,
    budget: Budget,
    resume: bool = False,
    on_progress: ProgressFn | None = None,
    device: str | torch.device = "cpu",
) -> dict[str, float]:
    """Optimise until the budget is spent; returns the last smoothed metrics plus
    ``step``, ``elapsed_s`` and ``samples_per_s`` (of this session).

    ``LoopState.generator`` lives on ``device``, so step functions draw noise there."""
    apply_threads(cfg)
    d = Path(model_dir)
    d.mkdir(parents=True, exist_ok=True)
    opt = torch.optim.AdamW(list(params), lr=cfg.lr, weight_decay=cfg.weight_decay)
    state = LoopState(
        rng=np.random.default_rng(cfg.seed),
        generator=torch.Generator(device=device).manual_seed(cfg.seed),
    )
    if resume:
        _restore(d, part, opt, state)
    smooth: dict[str, float] = {}
    skips = _Skips()
    start_step, t0, last_ckpt = state.step, time.monotonic(), time.monotonic()
    base_elapsed, base_cpu, cpu0 = state.elapsed_s, state.cpu_s, cpu_time()
    total = budget.steps if budget.minutes is None and budget.cpu_minutes is None else None
    while not budget.done(state.step, state.elapsed_s, state.cpu_s):
        state.progress = budget.progress(state.step, state.elapsed_s, state.cpu_s)
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, state.step, state.progress)
        metrics = step_fn(state)
        if skips.record(_optimise(opt, metrics["loss"], cfg.grad_clip), part, state.step):
            _smooth(smooth, metrics)
        state.step += 1
        state.elapsed_s = base_elapsed + time.monotonic() - t0
        state.cpu_s = base_cpu + cpu_time() - cpu0
        if on_progress is not None and state.step % max(cfg.log_every, 1) == 0:
            on_progress(state.step, total, dict(smooth, lr=opt.param_groups[0]["lr"]))
        if time.monotonic() - last_ckpt >= cfg.checkpoint_every_s:
            _checkpoint(d, part, opt, state, save_fn)
            last_ckpt = time.monotonic()
    _checkpoint(d, part, opt, state, save_fn)
    session = max(time.monotonic() - t0, 1e-9)
    out = dict(smooth)
    if skips.total:
        log.warning("%s: skipped %d steps with a non-finite loss or gradient", part, skips.total)
    out.update(
        skipped_steps=float(skips.total),
        step=float(state.step),
        elapsed_s=state.elapsed_s,
        cpu_s=state.cpu_s,
        steps_per_s=(state.step - start_step) / session,
        samples_per_s=(state.step - start_step) * cfg.batch_size / session,
    )
    return out


@dataclass
class _Skips:
    """Steps skipped for a non-finite loss or gradient: in all, and in a row."""

    total: int = 0
    in_row: int = 0

    def record(self, taken: bool, part: str, step: int) -> bool:
        """Count one step (``taken`` or skipped); returns ``taken``. FactoryError after
        :data:`MAX_NON_FINITE` skips in a row."""
        self.in_row = 0 if taken else self.in_row + 1
        self.total += not taken
        if self.in_row >= MAX_NON_FINITE:
            raise FactoryError(
                f"{part}: {self.in_row} steps in a row gave a non-finite loss or gradient "
                f"(step {step}); training diverged, lower the learning rate"
            )
        return taken


def _optimise(opt: torch.optim.Optimizer, loss: Tensor, grad_clip: float) -> bool:
    """One optimiser step on ``loss`` (a scalar), its gradients clipped to ``grad_clip``
    in norm when that is positive. A non-finite loss or gradient norm skips the step, so
    one diverged batch (a fresh dynamics unrolled too far, say) cannot turn every weight
    into NaN; returns whether the step was taken."""
    opt.zero_grad(set_to_none=True)
    if not torch.isfinite(loss):
        return False
    loss.backward()
    params = [p for g in opt.param_groups for p in g["params"]]
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else math.inf)
    if not torch.isfinite(norm):
        opt.zero_grad(set_to_none=True)
        return False
    opt.step()
    return True


def _smooth(smooth: dict[str, float], metrics: dict[str, Tensor]) -> None:
    """Fold one step's metrics into ``smooth`` (an exponential mean, weight 0.1)."""
    for k, v in metrics.items():
        val = float(v.detach()) if isinstance(v, Tensor) else float(v)
        smooth[k] = val if k not in smooth else 0.9 * smooth[k] + 0.1 * val


@dataclass(frozen=True)
class StageRun:
    """Where and for how long one training stage runs (what every stage takes)."""

    out_dir: Path
    cfg: TrainConfig
    budget: Budget
    resume: bool = False
    on_progress: ProgressFn | None = None
    device: str | torch.device = "cpu"


def train_part(
    run: StageRun,
    *,
    part: str,
    module: nn.Module,
    config: Any,
    step_fn: Callable[[LoopState], dict[str, Tensor]],
    params: Iterable[nn.Parameter] | None = None,
    save_as: str | None = None,
    data: str | None = None,
    before_save: Callable[[], None] | None = None,
) -> dict[str, float]:
    """:func:`run_training` of ``module`` (or just ``params``), saving it at every checkpoint
    as model part ``save_as`` (default ``part``) with its steps, wall time and ``data`` in
    the provenance. ``before_save`` runs first (e.g. refreshing latent statistics)."""
    saved = {"config": config}
    prepare_module(module)
    wall = run.budget.wall_minutes(run.cfg.threads)
    if not is_cuda(run.device) and cpu_compile_wanted(run.cfg.compile, wall):
        compile_cpu_parts(module)
    prefix = "" if save_as is None else f"{part}_"

    def save_fn(state: LoopState) -> None:
        if before_save is not None:
            before_save()
        prov: dict[str, object] = {
            f"{prefix}steps": state.step,
            f"{prefix}wall_s": round(state.elapsed_s, 1),
        }
        if data is not None:
            prov["data"] = data
        saved["config"] = save_part(run.out_dir, save_as or part, module, saved["config"], **prov)

    return run_training(
        part=part,
        model_dir=run.out_dir,
        params=module.parameters() if params is None else params,
        step_fn=step_fn,
        save_fn=save_fn,
        cfg=run.cfg,
        budget=run.budget,
        resume=run.resume,
        on_progress=run.on_progress,
        device=run.device,
    )


def stage_config(model_dir: str | Path, cfg: Any, part: str, resume: bool) -> Any:
    """The config a stage trains under.

    A fresh directory takes ``cfg``. An existing one keeps its other parts' configs; the
    trained part's config comes from ``cfg``, or from the directory when resuming it.
    """
    d = Path(model_dir)
    if not (d / CONFIG_FILE).exists():
        return dataclasses.replace(cfg, parts=())
    existing = read_config(d)
    if resume and part in existing.parts:
        return existing
    fields = {name: getattr(cfg, name) for name in part_fields(cfg, part)}
    return dataclasses.replace(existing, **fields)


def init_part(
    model_dir: str | Path,
    name: str,
    config: Any,
    resume: bool,
    device: str | torch.device,
) -> nn.Module:
    """The part to train: loaded from the directory when resuming it, else fresh."""
    if resume and name in config.parts:
        module = load_part(model_dir, name, config, device)
        return module.train()
    return build_part(name, config).to(device).train()


def frames_batch(frames: np.ndarray, idx: np.ndarray, device: str | torch.device) -> Tensor:
    """uint8 frames[idx] as a float tensor (B, 3, H, W) in [-1, 1] on ``device`` (gathered
    on the device when the frames have a copy there: :func:`factory.train.accel.hold_frames`)."""
    return frames_to_float(gather_frames(frames, idx, device))
