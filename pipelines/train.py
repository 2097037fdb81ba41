"""``factory train``: the world model's training stages, from an episode store.

    factory train autoencoder --data data/pusht_play.zarr --out models/pusht --minutes 30
    factory train probe       --data data/pusht_play.zarr --out models/pusht --minutes 8
    factory train dynamics    --data data/pusht_play.zarr --out models/pusht --minutes 60
    factory train decoder     --data data/pusht_play.zarr --out models/pusht --minutes 10
    factory train dynamics    --data data/pusht_play.zarr --out models/pusht --minutes 90 --resume

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
from factory.model import WorldModelConfig, read_config
from factory.model.registry import get_kind
from factory.train import (
    Budget,
    EpisodeData,
    finetune_decoder,
    train_autoencoder,
    train_dynamics,
    train_probe,
)
from factory.train.data import load_episode_data
from factory.train.dynamics import DYNAMICS_TRAIN, DynamicsTrainOptions
from factory.train.heads import train_heads
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
    """Model kind; None: the directory's, else object_state for renderer/reader stages,
    else latent_grid."""

    def resolved_kind(self) -> str:
        if self.kind is not None:
            return get_kind(self.kind).name
        if (self.out / "config.json").exists():
            return str(read_config(self.out).kind)
        return "object_state" if self.stage in ("renderer", "reader") else "latent_grid"


def _config_for(req: TrainRequest, data: EpisodeData) -> WorldModelConfig:
    """The model's config: the directory's when it has one, else defaults fitted to data."""
    if (req.out / "config.json").exists():
        return read_config(req.out)
    return default_config(data)


def default_config(data: EpisodeData) -> WorldModelConfig:
    """The default model config, sized to the data's frames, actions and robot state."""
    h, w = data.image_shape[:2]
    base = WorldModelConfig()
    ae = dataclasses.replace(base.autoencoder, image_size=(h, w))
    dyn = dataclasses.replace(
        base.dynamics,
        latent_size=ae.latent_size,
        latent_channels=ae.latent_channels,
        action_dim=int(data.actions.shape[1]),
        state_dim=int(data.state.shape[1]),
    )
    probe = dataclasses.replace(base.probe, image_size=(h, w))
    return dataclasses.replace(base, autoencoder=ae, dynamics=dyn, probe=probe, fps=base.fps)


def _stage_autoencoder(req: TrainRequest, data: EpisodeData, **kw: Any) -> dict[str, float]:
    return train_autoencoder(data, req.out, _config_for(req, data), **kw)


def _stage_dynamics(req: TrainRequest, data: EpisodeData, **kw: Any) -> dict[str, float]:
    recipe = req.recipe if req.recipe is not None or req.resume else DEFAULT_RECIPE
    cfg, opts, tc = apply_recipe(
        _config_for(req, data), DynamicsTrainOptions(), DYNAMICS_TRAIN, recipe, req.overrides
    )
    return train_dynamics(data, req.out, cfg, opts=opts, train_cfg=tc, **kw)


def _stage_probe(req: TrainRequest, data: EpisodeData, **kw: Any) -> dict[str, float]:
    return train_probe(data, req.out, _config_for(req, data), **kw)


def _stage_decoder(req: TrainRequest, data: EpisodeData, **kw: Any) -> dict[str, float]:
    return finetune_decoder(data, req.out, **kw)


def _stage_heads(req: TrainRequest, data: EpisodeData, **kw: Any) -> dict[str, float]:
    return train_heads(data, req.out, **kw)


STAGES: dict[str, Callable[..., dict[str, float]]] = {
    "autoencoder": _stage_autoencoder,
    "dynamics": _stage_dynamics,
    "probe": _stage_probe,
    "decoder": _stage_decoder,
    "heads": _stage_heads,
}
"""Stage name -> runner. Dynamics and decoder need the autoencoder (and dynamics) first."""


def check_fits(config: WorldModelConfig, data: EpisodeData) -> None:
    """Refuse a model directory whose frame size or action/state dims differ from the data."""
    if tuple(config.image_shape) != tuple(data.image_shape):
        raise ModelError(
            f"the model directory is for frames {tuple(config.image_shape)}, the data has "
            f"{tuple(data.image_shape)}; use another --out"
        )
    dims = {
        "action": (config.action_dim, data.actions.shape[1]),
        "state": (config.dynamics.state_dim, data.state.shape[1]),
    }
    for name, (model_dim, data_dim) in dims.items():
        if model_dim != data_dim:
            raise ModelError(
                f"the model directory has {name} dim {model_dim}, the data has {data_dim}; "
                "use another --out"
            )


def budget_for(req: TrainRequest) -> Budget:
    """The stage's budget: one of ``--minutes``/``--steps``/``--cpu-minutes``, each > 0."""
    given = [v for v in (req.minutes, req.steps, req.cpu_minutes) if v is not None]
    if not given:
        raise FactoryError("give a budget: --minutes M, --steps K or --cpu-minutes C")
    if any(v <= 0 for v in given):
        raise FactoryError("--minutes, --steps and --cpu-minutes must be positive")
    return Budget(minutes=req.minutes, steps=req.steps, cpu_minutes=req.cpu_minutes)


def _run_object_state(req: TrainRequest, on_progress: ProgressFn | None) -> dict[str, float]:
    """One stage of an object_state model (renderer, dynamics or reader)."""
    from factory.model.object_state.config import ObjectStateConfig
    from factory.train.object_state import STAGES as OBJECT_STAGES
    from factory.train.object_state import train_object_part

    if req.stage not in OBJECT_STAGES:
        raise FactoryError(
            f"unknown object_state stage {req.stage!r}; valid: {', '.join(OBJECT_STAGES)}"
        )
    if req.recipe or req.overrides:
        raise FactoryError("--recipe and --set configure the latent_grid dynamics only")
    budget, device = budget_for(req), resolve_device(req.device)
    if req.resume and not (req.out / "config.json").exists():
        raise FactoryError(f"--resume: {req.out} holds no model to resume; drop --resume")
    data = load_episode_data(req.data)
    if (req.out / "config.json").exists():
        config = read_config(req.out)
        if config.kind != "object_state":
            raise FactoryError(f"{req.out} holds a {config.kind} model; use another --out")
    else:
        config = get_kind("object_state").resized(ObjectStateConfig(), data.image_shape[:2])
    if tuple(config.image_shape) != data.image_shape:
        raise FactoryError(
            f"the model directory is for frames {config.image_shape}, the data has "
            f"{data.image_shape}; use another --out"
        )
    return train_object_part(
        req.stage, data, req.out, config, budget,
        device=device, resume=req.resume, on_progress=on_progress,
    )  # fmt: skip


def run_train(req: TrainRequest, on_progress: ProgressFn | None = None) -> dict[str, float]:
    """Validate the request, load the data and run the stage; returns its metrics."""
    if req.resolved_kind() == "object_state":
        return _run_object_state(req, on_progress)
    runner = STAGES.get(req.stage)
    if runner is None:
        raise FactoryError(f"unknown stage {req.stage!r}; valid: {', '.join(STAGES)}")
    if (req.recipe or req.overrides) and req.stage != "dynamics":
        raise FactoryError("--recipe and --set apply to the dynamics stage only")
    if req.recipe or req.overrides:
        try:  # check them before loading any data
            check_recipe(req.recipe, req.overrides)
        except ValueError as err:
            raise FactoryError(str(err)) from err
    budget = budget_for(req)
    device = resolve_device(req.device)
    if req.resume and not (req.out / "config.json").exists():
        raise FactoryError(f"--resume: {req.out} holds no model to resume; drop --resume")
    data = load_episode_data(req.data, need_task_state=req.stage in ("probe", "heads"))
    if (req.out / "config.json").exists():
        check_fits(read_config(req.out), data)
    try:
        return runner(
            req, data, budget=budget, device=device, resume=req.resume, on_progress=on_progress
        )
    except ModelError:
        raise
    except ValueError as err:  # data/model mismatches found by the training code
        raise ModelError(f"{req.stage}: {err}") from err
