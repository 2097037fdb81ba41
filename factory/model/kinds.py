"""The built-in model kinds, registered with :mod:`factory.model.registry`."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import nn

from factory.errors import ModelError
from factory.model.autoencoder import Autoencoder
from factory.model.config import WorldModelConfig
from factory.model.dynamics import Dynamics
from factory.model.object_set.config import ObjectSetConfig
from factory.model.object_set.dynamics import SetDynamics
from factory.model.object_set.model import ObjectSetModel
from factory.model.object_set.reader import SetReader
from factory.model.object_set.renderer import SetRenderer
from factory.model.object_state.config import ObjectStateConfig
from factory.model.object_state.dynamics import ObjectDynamics
from factory.model.object_state.model import ObjectStateModel
from factory.model.object_state.reader import StateReader
from factory.model.object_state.renderer import SpriteRenderer
from factory.model.probe import StateProbe
from factory.model.registry import ModelKind, register_kind
from factory.model.world_model import WorldModel


def _grid_part(name: str, config: WorldModelConfig) -> nn.Module:
    if name == "autoencoder":
        return Autoencoder(config.autoencoder)
    if name == "dynamics":
        return Dynamics(config.dynamics, config.consistency)
    if name == "probe":
        return StateProbe(config.probe)
    raise ModelError(f"unknown latent_grid part {name!r}; expected autoencoder, dynamics, probe")


def _grid_fit(config: WorldModelConfig, parts: tuple[str, ...]) -> None:
    ae, dyn, probe = config.autoencoder, config.dynamics, config.probe
    if {"probe", "autoencoder"} <= set(parts) and tuple(probe.image_size) != tuple(ae.image_size):
        raise ModelError(
            f"probe expects {probe.image_size} frames, the autoencoder makes {ae.image_size}"
        )
    if {"dynamics", "autoencoder"} <= set(parts):
        fits = ae.latent_channels == dyn.latent_channels and ae.latent_size == dyn.latent_size
        if not fits:
            raise ModelError(
                f"dynamics expects {dyn.latent_channels}x{dyn.latent_size} latents, the "
                f"autoencoder makes {ae.latent_channels}x{ae.latent_size}"
            )


def _grid_resized(config: WorldModelConfig, size: tuple[int, int]) -> WorldModelConfig:
    ae = dataclasses.replace(config.autoencoder, image_size=size)
    dyn = dataclasses.replace(config.dynamics, latent_size=ae.latent_size)
    probe = dataclasses.replace(config.probe, image_size=size)
    return dataclasses.replace(config, autoencoder=ae, dynamics=dyn, probe=probe, parts=())


def _grid_assemble(config: WorldModelConfig, parts: dict[str, nn.Module]) -> WorldModel:
    return WorldModel(
        config,
        autoencoder=parts.get("autoencoder"),  # type: ignore[arg-type]
        dynamics=parts.get("dynamics"),  # type: ignore[arg-type]
        probe=parts.get("probe"),  # type: ignore[arg-type]
    )


LATENT_GRID = register_kind(
    ModelKind(
        name="latent_grid",
        parts=("autoencoder", "dynamics", "probe"),
        part_fields={
            "autoencoder": ("autoencoder",),
            "dynamics": ("dynamics", "consistency"),
            "probe": ("probe",),
        },
        config_from_dict=WorldModelConfig.from_dict,
        default_config=WorldModelConfig,
        build_part=_grid_part,
        check_parts_fit=_grid_fit,
        assemble=_grid_assemble,
        rollout_parts=("autoencoder", "dynamics"),
        resized=_grid_resized,
        description="frames -> 2D latent grid -> U-Net dynamics (pixels only)",
        task_reader_missing=lambda c: (
            None
            if "probe" in c.parts or c.dynamics.task_dim > 0
            else "probe (or a dynamics task head)"
        ),
    )
)


def _obj_part(name: str, config: ObjectStateConfig) -> nn.Module:
    if name == "dynamics":
        return ObjectDynamics(config.dynamics)
    if name == "renderer":
        return SpriteRenderer(config.renderer)
    if name == "reader":
        return StateReader(config.reader, board=config.renderer.board)
    raise ModelError(f"unknown object_state part {name!r}; expected dynamics, renderer, reader")


def _obj_fit(config: ObjectStateConfig, parts: tuple[str, ...]) -> None:
    sizes = tuple(config.reader.image_size), tuple(config.renderer.image_size)
    if {"reader", "renderer"} <= set(parts) and sizes[0] != sizes[1]:
        raise ModelError(f"reader expects {sizes[0]} frames, the renderer makes {sizes[1]}")


def _obj_resized(config: ObjectStateConfig, size: tuple[int, int]) -> ObjectStateConfig:
    return dataclasses.replace(
        config,
        renderer=dataclasses.replace(config.renderer, image_size=size),
        reader=dataclasses.replace(config.reader, image_size=size),
        parts=(),
    )


def _obj_assemble(config: ObjectStateConfig, parts: dict[str, Any]) -> ObjectStateModel:
    return ObjectStateModel(
        config,
        dynamics=parts.get("dynamics"),
        renderer=parts.get("renderer"),
        reader=parts.get("reader"),
    )


OBJECT_STATE = register_kind(
    ModelKind(
        name="object_state",
        parts=("dynamics", "reader", "renderer"),
        part_fields={
            "dynamics": ("dynamics",),
            "renderer": ("renderer",),
            "reader": ("reader",),
        },
        config_from_dict=ObjectStateConfig.from_dict,
        default_config=ObjectStateConfig,
        build_part=_obj_part,
        check_parts_fit=_obj_fit,
        assemble=_obj_assemble,
        rollout_parts=("dynamics", "renderer"),
        description="object state -> object-frame MLP dynamics, sprite renderer, reader",
        resized=_obj_resized,
    )
)


def _set_part(name: str, config: ObjectSetConfig) -> nn.Module:
    if name == "dynamics":
        return SetDynamics(config.dynamics)
    if name == "renderer":
        return SetRenderer(config.renderer)
    if name == "reader":
        return SetReader(config.reader, config.n_discs, board=config.renderer.board)
    raise ModelError(f"unknown object_set part {name!r}; expected dynamics, renderer, reader")


def _set_fit(config: ObjectSetConfig, parts: tuple[str, ...]) -> None:
    sizes = tuple(config.reader.image_size), tuple(config.renderer.image_size)
    if {"reader", "renderer"} <= set(parts) and sizes[0] != sizes[1]:
        raise ModelError(f"reader expects {sizes[0]} frames, the renderer makes {sizes[1]}")


def _set_resized(config: ObjectSetConfig, size: tuple[int, int]) -> ObjectSetConfig:
    return dataclasses.replace(
        config,
        renderer=dataclasses.replace(config.renderer, image_size=size),
        reader=dataclasses.replace(config.reader, image_size=size),
        parts=(),
    )


def _set_assemble(config: ObjectSetConfig, parts: dict[str, Any]) -> ObjectSetModel:
    return ObjectSetModel(
        config,
        dynamics=parts.get("dynamics"),
        renderer=parts.get("renderer"),
        reader=parts.get("reader"),
    )


OBJECT_SET = register_kind(
    ModelKind(
        name="object_set",
        parts=("dynamics", "reader", "renderer"),
        part_fields={
            "dynamics": ("dynamics",),
            "renderer": ("renderer",),
            "reader": ("reader",),
        },
        config_from_dict=ObjectSetConfig.from_dict,
        default_config=ObjectSetConfig,
        build_part=_set_part,
        check_parts_fit=_set_fit,
        assemble=_set_assemble,
        rollout_parts=("dynamics", "renderer"),
        description="a set of discs -> interaction-network dynamics, homography sprite "
        "renderer per camera, heatmap reader",
        resized=_set_resized,
    )
)
