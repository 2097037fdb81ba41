"""``factory train``: one training stage of a world model, from an episode store.

    factory train renderer --data data/pusht_play.zarr --out runs/os --minutes 5
    factory train dynamics --kind object_state --data data/pusht_play.zarr --out runs/os \
        --minutes 25
    factory train autoencoder --data data/pusht_play.zarr --out runs/grid --minutes 30
    factory train dynamics    --data data/pusht_play.zarr --out runs/grid --minutes 60
    factory train dynamics    --data data/pusht_play.zarr --out runs/grid --minutes 90 --resume
    factory train dynamics --kind object_state --data data/pusht_play.zarr --out judges/j1 \
        --steps 10000 --seed 1 --threads 1     # an ensemble member: another seed

The stage runs through :func:`factory.train.all_stages.stage_runner`, the dispatcher that
``factory train all`` uses too.

Budgets count over resumes: ``--resume`` continues a stage to its total budget.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from factory.device import resolve_device
from factory.errors import FactoryError, ModelError
from factory.model import load_part, read_config
from factory.model.config import MAIN_CAMERA, WorldModelConfig
from factory.model.config_io import with_overrides
from factory.model.registry import get_kind
from factory.train import Budget, EpisodeData
from factory.train import object_set as object_set_stages
from factory.train.all_stages import STATE_KINDS, stage_runner, stage_train, with_batch
from factory.train.data import load_episode_data
from factory.train.dynamics import DYNAMICS_TRAIN, DynamicsTrainOptions
from factory.train.loop import TrainConfig
from factory.train.model_config import check_fits, default_config
from factory.train.object_set import SET_WORLDS
from factory.train.recipes import DEFAULT_RECIPE, apply_recipe, check_recipe

log = logging.getLogger(__name__)
ProgressFn = Callable[[int, int | None, dict[str, float]], None]


@dataclass(frozen=True)
class TrainRequest:
    """One ``factory train STAGE`` call."""

    stage: str
    data: Path
    out: Path
    minutes: float | None = None
    steps: int | None = None
    cpu_minutes: float | None = None
    device: str = "auto"
    resume: bool = False
    recipe: str | None = None
    overrides: tuple[str, ...] = ()
    kind: str | None = None
    """Model kind; None: the directory's, else object_set for its stages (renderer,
    dynamics, reader) on a disc-set store (pile), object_state for the renderer and
    reader stages on any other store, else latent_grid."""
    camera: str | None = None
    """latent_grid: the store camera to train on; None: the directory's, else the main one
    (``top``; ``side``: ``data/image_side``)."""
    seed: int | None = None
    """The part's initialisation and batch order (ensemble members: one seed each); None:
    the stage's own (batch order 0, initialisation unseeded)."""
    threads: int | None = None
    """Torch's intra-op threads; None: the stage's own (two trainings side by side on two
    cores: one each)."""
    batch_size: int | None = None
    """The batch size; None: the stage's own. The learning rate follows it by the square
    root of the ratio, at most 2x (as ``train all``'s batch search on CUDA does)."""
    compile: bool | None = None
    """On the CPU, compile the parts that pay it back; None: by the budget
    (:func:`factory.train.accel.cpu_compile_wanted`)."""

    def resolved_kind(self) -> str:
        if self.kind is not None:
            return get_kind(self.kind).name
        if (self.out / "config.json").exists():
            return str(read_config(self.out).kind)
        sets = self.data.exists() and object_set_stages.store_env(self.data) in SET_WORLDS
        if self.stage in ("renderer", "reader"):
            return "object_set" if sets else "object_state"
        return "object_set" if sets and self.stage == "dynamics" else "latent_grid"


LATENT_GRID_STAGES = ("autoencoder", "dynamics", "heads", "decoder", "probe")
"""Dynamics and decoder need the autoencoder (and dynamics) first; heads the dynamics."""


def budget_for(req: TrainRequest) -> Budget:
    """The stage's budget: one of ``--minutes``/``--steps``/``--cpu-minutes``, each > 0."""
    given = [v for v in (req.minutes, req.steps, req.cpu_minutes) if v is not None]
    if not given:
        raise FactoryError("give a budget: --minutes M, --steps K or --cpu-minutes C")
    if any(v <= 0 for v in given):
        raise FactoryError("--minutes, --steps and --cpu-minutes must be positive")
    return Budget(minutes=req.minutes, steps=req.steps, cpu_minutes=req.cpu_minutes)


def _config_for_kind(req: TrainRequest, data: EpisodeData, kind: str) -> Any:
    """The directory's config (refused when it does not fit the data), else defaults."""
    if (req.out / "config.json").exists():
        config = read_config(req.out)
        if config.kind != kind:
            raise FactoryError(f"{req.out} holds a {config.kind} model; use another --out")
        if kind == "latent_grid":
            check_fits(config, data)
        elif tuple(config.image_shape) != data.image_shape:
            raise FactoryError(
                f"the model directory is for frames {config.image_shape}, the data has "
                f"{data.image_shape}; use another --out"
            )
        return config
    if kind == "latent_grid":
        return default_config(data)
    if kind == "object_set":
        return object_set_stages.store_set_config(req.data, data)
    return get_kind(kind).resized(get_kind(kind).default_config(), data.image_shape[:2])


def check_camera_kind(camera: str | None, kind: str) -> None:
    """Refuse a ``--camera`` for a state kind: it renders every camera of the store."""
    if camera is not None and kind in STATE_KINDS:
        raise FactoryError(
            f"--camera picks the one camera of a latent_grid model; the {kind} kind renders "
            "every camera of the store (for one camera: --kind latent_grid)"
        )


def camera_for(req: TrainRequest, kind: str) -> str:
    """The camera whose frames the stage trains on: ``--camera``, else the directory's, else
    the main one. Refuses ``--camera`` for a state kind (:func:`check_camera_kind`) and one
    the directory's model was not trained on."""
    check_camera_kind(req.camera, kind)
    if kind in STATE_KINDS:
        return MAIN_CAMERA
    recorded = None
    if (req.out / "config.json").exists():
        config = read_config(req.out)
        recorded = config.camera if isinstance(config, WorldModelConfig) else None
    if req.camera is not None and recorded is not None and req.camera != recorded:
        raise FactoryError(
            f"{req.out} holds a model of the {recorded} camera, not --camera {req.camera}; "
            "use another --out"
        )
    return req.camera or recorded or MAIN_CAMERA


def _check_weights(req: TrainRequest, config: Any) -> None:
    """Load the directory's other parts (with ``--resume`` this one too) once on the CPU,
    so missing or unreadable weights are refused before the stage writes anything."""
    if not (req.out / "config.json").exists():
        return
    for part in config.parts:
        if part != req.stage or req.resume:
            load_part(req.out, part, config)


def check_loop_options(req: TrainRequest) -> None:
    """Refuse a negative ``--seed`` or a ``--threads`` below one."""
    if req.seed is not None and req.seed < 0:
        raise FactoryError(f"--seed must be >= 0, got {req.seed}")
    if req.threads is not None and req.threads < 1:
        raise FactoryError(f"--threads must be >= 1, got {req.threads}")
    if req.batch_size is not None and req.batch_size < 1:
        raise FactoryError(f"--batch-size must be >= 1, got {req.batch_size}")


def _seeded(req: TrainRequest, kind: str, tc: TrainConfig | None) -> TrainConfig | None:
    """The stage's TrainConfig with ``--batch-size``, ``--seed``, ``--threads`` and
    ``--compile`` applied (the global torch seed set too, so a fresh part's initialisation
    follows the seed); unchanged without them."""
    if all(v is None for v in (req.seed, req.threads, req.batch_size, req.compile)):
        return tc
    tc = tc or stage_train(kind, req.stage)
    if req.batch_size is not None and req.batch_size != tc.batch_size:
        tc = with_batch(tc, req.batch_size)
    if req.seed is not None:
        import torch

        torch.manual_seed(req.seed)
        tc = dataclasses.replace(tc, seed=req.seed)
    if req.threads is not None:
        tc = dataclasses.replace(tc, threads=req.threads)
    if req.compile is not None:
        tc = dataclasses.replace(tc, compile=req.compile)
    return tc


def check_train_options(req: TrainRequest, kind: str) -> None:
    """Refuse ``--recipe`` / ``--set`` where they do not apply, before any data is
    loaded: the recipes and the latent_grid ``--set`` sections are its dynamics stage's;
    a state kind's ``--set`` changes a fresh model's config (its parts' sections)."""
    if kind in STATE_KINDS:
        if req.recipe:
            raise FactoryError("--recipe applies to the latent_grid dynamics stage only")
        check_kind_overrides(kind, req.overrides, (req.out / "config.json").exists())
        return
    if (req.recipe or req.overrides) and req.stage != "dynamics":
        raise FactoryError("--recipe and --set apply to the latent_grid dynamics stage only")
    if req.recipe or req.overrides:
        try:
            check_recipe(req.recipe, req.overrides)
        except ValueError as err:
            raise FactoryError(str(err)) from err


def check_kind_overrides(kind: str, overrides: tuple[str, ...], existing: bool) -> None:
    """Refuse a state kind's ``--set`` that does not apply to its default config, or any
    ``--set`` for a directory that already holds a config (its parts were made by it)."""
    if not overrides:
        return
    if existing:
        raise FactoryError("--set configures a fresh model; this directory already has one")
    try:
        with_overrides(get_kind(kind).default_config(), overrides)
    except (ValueError, TypeError) as err:
        raise FactoryError(str(err)) from err


def run_train(req: TrainRequest, on_progress: ProgressFn | None = None) -> dict[str, float]:
    """Validate the request, load the data and run the stage; returns its metrics."""
    kind = req.resolved_kind()
    stages = STATE_KINDS[kind].STAGES if kind in STATE_KINDS else LATENT_GRID_STAGES
    if req.stage not in stages:
        raise FactoryError(f"unknown {kind} stage {req.stage!r}; valid: {', '.join(stages)}")
    check_train_options(req, kind)
    check_loop_options(req)
    budget = budget_for(req)
    device = resolve_device(req.device)
    if req.resume and not (req.out / "config.json").exists():
        raise FactoryError(f"--resume: {req.out} holds no model to resume; drop --resume")
    need_task = kind in STATE_KINDS or req.stage in ("probe", "heads")
    if kind == "object_set":
        object_set_stages.check_set_store(req.data)
    camera = camera_for(req, kind)
    pixels = not (kind in STATE_KINDS and req.stage == "dynamics")  # state in, state out
    data = load_episode_data(req.data, need_task_state=need_task, camera=camera, frames=pixels)
    config = _config_for_kind(req, data, kind)
    if kind in STATE_KINDS and req.overrides:
        config = with_overrides(config, req.overrides)  # checked above
    if isinstance(config, WorldModelConfig):
        config = dataclasses.replace(config, camera=camera)
    _check_weights(req, config)
    opts, tc = None, None
    if kind == "latent_grid" and req.stage == "dynamics":
        recipe = req.recipe if req.recipe is not None or req.resume else DEFAULT_RECIPE
        config, opts, tc = apply_recipe(
            config, DynamicsTrainOptions(), DYNAMICS_TRAIN, recipe, req.overrides
        )
    tc = _seeded(req, kind, tc)
    run = stage_runner(req.stage, data, config, device, req.resume, opts)
    try:
        return run(req.out, tc, budget, on_progress)
    except ModelError:
        raise
    except ValueError as err:  # data/model mismatches found by the training code
        raise ModelError(f"{req.stage}: {err}") from err
