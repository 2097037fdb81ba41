"""Every training stage in order, on one budget: autoencoder, latent cache, dynamics, the
dynamics' read-out heads, decoder fine-tune, and the image probe when the dynamics has no
task head to read the task state.

Each trainable stage gets ``share / sum(shares of the stages left)`` of the budget still
left when it starts, so set-up, the latent cache and batch measurements eat into the
later stages rather than overrunning the total (with ``--steps`` each stage gets its
share of the steps). ``train_all.json`` in the model directory records the plan and every
stage's outcome (a :class:`factory.stages.StageRun`); :func:`run_all_stages` with
``resume`` skips finished stages and resumes the one that was running (the training loop
continues it to its recorded budget).

On CUDA each stage runs under :mod:`factory.train.accel` (bf16 autocast, channels_last,
frames and latents on the device) with a batch size measured by
:mod:`factory.train.batch_search`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from factory.errors import FactoryError
from factory.model.autoencoder import Autoencoder
from factory.model.checkpoint import load_part, read_config
from factory.model.files import TRAIN_ALL_FILE
from factory.stages import StageFileError, StageRun
from factory.train import object_set, object_state
from factory.train.accel import AccelConfig, accelerated, hold_frames, is_cuda
from factory.train.autoencoder import train_autoencoder
from factory.train.batch_search import BatchSearch, search_batch
from factory.train.data import EpisodeData
from factory.train.decoder import finetune_decoder
from factory.train.dynamics import (
    DYNAMICS_TRAIN,
    DynamicsTrainOptions,
    cached_latents,
    train_dynamics,
)
from factory.train.heads import HEADS_TRAIN, train_heads
from factory.train.loop import Budget, ProgressFn, TrainConfig
from factory.train.probe import train_probe

log = logging.getLogger(__name__)

STATE_FILE = TRAIN_ALL_FILE
STATE_FORMAT = "demofactory.train_all"
STAGES = ("autoencoder", "latents", "dynamics", "heads", "decoder", "probe")
TRAINED = ("autoencoder", "dynamics", "heads", "decoder", "probe", "renderer", "reader")

STAGE_TRAIN = {
    "autoencoder": TrainConfig(batch_size=32, lr=2e-3, warmup_steps=100),
    "dynamics": DYNAMICS_TRAIN,
    "decoder": TrainConfig(batch_size=32, lr=2e-4, warmup_steps=50, schedule="constant"),
    "probe": TrainConfig(batch_size=64, lr=1e-3, warmup_steps=50),
    "heads": HEADS_TRAIN,
}
OBJECT_STAGE_TRAIN = object_state.STAGE_TRAIN
"""Each stage's own default optimiser settings (mirrored from the stage functions), the
base that a measured batch size and a checkpoint interval are applied to. Without those
overrides (on the CPU) the stages run with their own defaults."""
STATE_KINDS = {"object_state": object_state, "object_set": object_set}
"""The kinds that model the world's state, by name: their stage module (``STAGES``,
``SHARES`` and ``STAGE_TRAIN``, as above)."""


@dataclass(frozen=True)
class StageShares:
    """Fractions of the budget per trainable stage (normalised over the stages run)."""

    autoencoder: float = 0.22
    dynamics: float = 0.58
    heads: float = 0.06
    decoder: float = 0.08
    probe: float = 0.12
    kind: str = "latent_grid"

    def of(self, stage: str) -> float:
        if self.kind in STATE_KINDS:
            return STATE_KINDS[self.kind].SHARES[stage]
        return float(getattr(self, stage))

    def record(self) -> dict[str, Any]:
        """The shares as ``train_all.json`` records them: the kind's own stages."""
        if self.kind in STATE_KINDS:
            return {"kind": self.kind, **STATE_KINDS[self.kind].SHARES}
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class AllStagesConfig:
    """``factory train all``: budget shares and how an accelerator is used.

    lr_scale_max: on a measured batch B > base B0, the learning rate is scaled by
        ``min(sqrt(B / B0), lr_scale_max)``.
    checkpoint_every_s, log_every: the loop's checkpoint interval and progress cadence
        (None: the stage's defaults).
    """

    shares: StageShares = field(default_factory=StageShares)
    accel: AccelConfig = field(default_factory=AccelConfig)
    batch: BatchSearch = field(default_factory=BatchSearch)
    lr_scale_max: float = 2.0
    checkpoint_every_s: float | None = None
    log_every: int | None = None
    dynamics_options: DynamicsTrainOptions = field(default_factory=DynamicsTrainOptions)


@dataclass(frozen=True)
class AllProgress:
    """One progress report: the stage (index of n), its step, loss and time left."""

    stage: str
    index: int
    n_stages: int
    step: int
    total_steps: int | None
    metrics: dict[str, float]
    time_left_s: float | None


AllProgressFn = Callable[[AllProgress], None]


def stages_for(config: Any, has_task_state: bool) -> tuple[str, ...]:
    """The stages ``train all`` runs for a model of ``config``'s kind."""
    if config.kind in STATE_KINDS:
        return STATE_KINDS[config.kind].STAGES
    return plan_stages(has_task_state, config.dynamics.task_dim > 0)


def plan_stages(has_task_state: bool, task_head: bool = False) -> tuple[str, ...]:
    """The stages to run: the image probe needs the task state (``task_state``) in the data, and
    is skipped when the dynamics' task head reads it."""
    return tuple(s for s in STAGES if s != "probe" or (has_task_state and not task_head))


def stage_budget(
    stage: str,
    stages: tuple[str, ...],
    done: set[str],
    shares: StageShares,
    total: Budget,
    spent_s: float,
) -> Budget:
    """Stage ``stage``'s budget: its share of the steps, and of the time still left."""
    trained = [s for s in stages if s in TRAINED]
    steps = None
    if total.steps is not None:
        frac = shares.of(stage) / sum(shares.of(s) for s in trained)
        steps = max(1, round(total.steps * frac))
    minutes = None
    if total.minutes is not None:
        left = [s for s in trained if s not in done]
        frac = shares.of(stage) / sum(shares.of(s) for s in left)
        minutes = max(total.minutes * 60.0 - spent_s, 0.6) * frac / 60.0
    return Budget(minutes=minutes, steps=steps)


def budget_table(stages: tuple[str, ...], shares: StageShares) -> dict[str, float]:
    """Stage -> fraction of the budget (sums to 1 over the trained stages)."""
    trained = [s for s in stages if s in TRAINED]
    total = sum(shares.of(s) for s in trained)
    return {s: shares.of(s) / total for s in trained}


def _open_run(out_dir: Path) -> StageRun:
    """The run recorded in ``out_dir``; FactoryError when ``out_dir`` is no such run."""
    path = out_dir / STATE_FILE
    try:
        run = StageRun.load(path)
    except StageFileError:
        raise FactoryError(
            f"--resume: {out_dir} is not a `factory train all` directory (no readable "
            f"{STATE_FILE}); drop --resume"
        ) from None
    if run.state.get("format") != STATE_FORMAT:
        raise FactoryError(f"--resume: {path} is not a {STATE_FORMAT} file")
    return run


def read_state(out_dir: Path) -> dict[str, Any]:
    """The run's ``train_all.json``; FactoryError when ``out_dir`` is no such run."""
    return _open_run(out_dir).state


def _train_cfg(stage: str, cfg: AllStagesConfig, batch: int | None) -> TrainConfig | None:
    """The stage's TrainConfig with overrides, or None for its own defaults."""
    if batch is None and cfg.checkpoint_every_s is None and cfg.log_every is None:
        return None
    base = _stage_train(stage, cfg)
    tc = dataclasses.replace(
        base,
        checkpoint_every_s=base.checkpoint_every_s
        if cfg.checkpoint_every_s is None
        else cfg.checkpoint_every_s,
        log_every=base.log_every if cfg.log_every is None else cfg.log_every,
    )
    if batch is not None and batch != base.batch_size:
        tc = dataclasses.replace(with_batch(tc, batch, cfg.lr_scale_max), threads=0)
    return tc


def with_batch(tc: TrainConfig, batch: int, lr_scale_max: float = 2.0) -> TrainConfig:
    """``tc`` at batch size ``batch``: the learning rate scaled by
    ``min(sqrt(batch / tc.batch_size), lr_scale_max)`` (a smaller batch scales it down)."""
    scale = min(math.sqrt(batch / tc.batch_size), lr_scale_max)
    return dataclasses.replace(tc, batch_size=batch, lr=tc.lr * scale)


def _stage_train(stage: str, cfg: AllStagesConfig) -> TrainConfig:
    return stage_train(cfg.shares.kind, stage)


def stage_train(kind: str, stage: str) -> TrainConfig:
    """The default TrainConfig of ``kind``'s stage ``stage``."""
    if kind in STATE_KINDS:
        return STATE_KINDS[kind].STAGE_TRAIN[stage]
    return STAGE_TRAIN[stage]


def stage_runner(
    stage: str,
    data: EpisodeData,
    config: Any,
    device: str,
    resume: bool,
    dynamics_options: DynamicsTrainOptions | None = None,
) -> Callable[[Path, TrainConfig | None, Budget, ProgressFn | None], dict[str, float]]:
    """The one dispatcher of training stages, of either kind (``factory train STAGE`` and
    ``factory train all`` both call it): the stage function bound to everything but
    directory, train config, budget and progress."""

    def call(d: Path, tc: TrainConfig | None, b: Budget, p: ProgressFn | None) -> dict[str, float]:
        kw: dict[str, Any] = dict(device=device, resume=resume, on_progress=p, train_cfg=tc)
        if config.kind == "object_state":
            return object_state.train_object_part(stage, data, d, config, b, **kw)
        if config.kind == "object_set":
            return object_set.train_set_part(stage, data, d, config, b, **kw)
        if stage == "decoder":
            return finetune_decoder(data, d, b, **kw)
        if stage == "heads":
            return train_heads(data, d, b, **kw)
        if stage == "dynamics":
            return train_dynamics(data, d, config, b, opts=dynamics_options, **kw)
        fn = {"autoencoder": train_autoencoder, "dynamics": train_dynamics, "probe": train_probe}
        return fn[stage](data, d, config, b, **kw)

    return call


def _latents_stage(data: EpisodeData, out_dir: Path, device: str) -> dict[str, float]:
    """Encode the data once with the frozen autoencoder into the directory's cache."""
    t0 = time.monotonic()
    config = read_config(out_dir)
    ae = load_part(out_dir, "autoencoder", config, device)
    assert isinstance(ae, Autoencoder)
    lat = cached_latents(out_dir, ae, data, device)
    wall = time.monotonic() - t0
    return {"frames": float(len(lat)), "elapsed_s": wall, "samples_per_s": len(lat) / wall}


@dataclass
class _Run:
    """What one :func:`run_all_stages` call carries between stages."""

    data: EpisodeData
    out_dir: Path
    config: Any
    cfg: AllStagesConfig
    total: Budget
    device: str
    record: StageRun
    stages: tuple[str, ...]
    on_progress: AllProgressFn | None
    t0: float = field(default_factory=time.monotonic)

    def time_left(self, stage_t0: float) -> float | None:
        if self.total.minutes is None:
            return None
        spent = self.record.spent_s()
        return self.total.minutes * 60.0 - spent - (time.monotonic() - stage_t0)


def _new_run(
    out_dir: Path, data: EpisodeData, total: Budget, device: str, cfg: AllStagesConfig
) -> StageRun:
    header = {
        "format": STATE_FORMAT,
        "data": data.source,
        "budget": {"minutes": total.minutes, "steps": total.steps},
        "device": device,
        "shares": cfg.shares.record(),
    }
    return StageRun(out_dir / STATE_FILE, header)


def _measure_batch(run: _Run, stage: str, budget: Budget, rec: dict[str, Any]) -> Budget:
    """On CUDA, time doubling batch sizes (recorded in ``rec``); returns the budget less
    the measurement's time."""
    minutes = budget.minutes
    choice = search_batch(
        stage_runner(stage, run.data, run.config, run.device, False, run.cfg.dynamics_options),
        run.out_dir,
        stage,
        _train_cfg(stage, run.cfg, None) or _stage_train(stage, run.cfg),
        run.cfg.batch,
        None if minutes is None else minutes * 60.0,
    )
    rec.update(
        batch_size=choice.batch_size, batch_rates={str(k): v for k, v in choice.rates.items()}
    )
    if minutes is None:
        return budget
    return Budget(minutes=max(minutes - choice.wall_s / 60.0, 0.01), steps=budget.steps)


def _run_stage(run: _Run, stage: str, rec: dict[str, Any]) -> dict[str, Any]:
    """Run (or resume) one stage, its record ``rec``; returns its summary (steps,
    samples/s, ...). A record with a budget is a started stage: it resumes."""
    t0 = time.monotonic()
    if stage == "latents":
        metrics = _latents_stage(run.data, run.out_dir, run.device)
        return {"metrics": metrics, "steps": 0, "samples_per_s": metrics["samples_per_s"]}
    resume = "budget" in rec
    done = {s for s in run.stages if run.record.done(s)}
    if resume:
        budget = Budget(**rec["budget"])
    else:
        spent = run.record.spent_s()
        budget = stage_budget(stage, run.stages, done, run.cfg.shares, run.total, spent)
    index = run.stages.index(stage) + 1

    def on_progress(step: int, total: int | None, metrics: dict[str, float]) -> None:
        if run.on_progress is not None:
            left = run.time_left(t0)
            run.on_progress(AllProgress(stage, index, len(run.stages), step, total, metrics, left))

    with accelerated(run.cfg.accel, run.device, budget.minutes):
        if "batch_size" not in rec and is_cuda(run.device) and run.cfg.batch.enabled:
            budget = _measure_batch(run, stage, budget, rec)
        rec["budget"] = dataclasses.asdict(budget)
        run.record.save()
        tc = _train_cfg(stage, run.cfg, rec.get("batch_size"))
        call = stage_runner(
            stage, run.data, run.config, run.device, resume, run.cfg.dynamics_options
        )
        metrics = call(run.out_dir, tc, budget, on_progress)
    return {
        "metrics": metrics,
        "steps": int(metrics.get("step", 0)),
        "samples_per_s": metrics.get("samples_per_s", 0.0),
        "batch_size": round(metrics["samples_per_s"] / metrics["steps_per_s"])
        if metrics.get("steps_per_s")
        else (tc or _stage_train(stage, run.cfg)).batch_size,
    }


def run_all_stages(
    data: EpisodeData,
    out_dir: Path,
    config: Any,
    total: Budget,
    device: str,
    cfg: AllStagesConfig | None = None,
    resume: bool = False,
    on_progress: AllProgressFn | None = None,
) -> dict[str, Any]:
    """Train every stage into ``out_dir`` (resuming a run there with ``resume``).

    Returns {"device", "budget", "shares", "stages": {stage: {wall_s, steps,
    samples_per_s, batch_size, metrics}}, "wall_s"}.
    """
    cfg = cfg or AllStagesConfig()
    cfg = dataclasses.replace(cfg, shares=dataclasses.replace(cfg.shares, kind=config.kind))
    out_dir.mkdir(parents=True, exist_ok=True)
    record = _open_run(out_dir) if resume else _new_run(out_dir, data, total, device, cfg)
    state = record.state
    state["kind"] = config.kind
    if config.kind == "latent_grid":  # the camera its frames are (a resume must match it)
        state["camera"] = config.camera
    stages = stages_for(config, data.task_state is not None)
    if is_cuda(device):
        data = dataclasses.replace(data, frames=hold_frames(data.frames, device, cfg.accel))
    run = _Run(data, out_dir, config, cfg, total, device, record, stages, on_progress)
    t0 = time.monotonic()
    for stage in stages:
        if not record.run(stage, functools.partial(_run_stage, run, stage)):
            continue
        log.info("stage %s done in %.1f s", stage, record.stage(stage)["wall_s"])
        if is_cuda(device):
            torch.cuda.empty_cache()
    return {
        "device": device,
        "budget": state["budget"],
        "shares": budget_table(stages, cfg.shares),
        "stages": {
            s: {k: v for k, v in state["stages"][s].items() if k != "status"} for s in stages
        },
        "wall_s": time.monotonic() - t0,
    }
