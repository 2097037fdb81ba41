"""A latent-grid model's config sized to its training data, and the check that an existing
model directory's config fits the data (frame size, action and robot-state dims)."""

from __future__ import annotations

import dataclasses

from factory.errors import ModelError
from factory.model import WorldModelConfig
from factory.train.data import EpisodeData


def default_config(data: EpisodeData) -> WorldModelConfig:
    """The default model config, sized to the data's frames, actions and robot state, of
    the data's world (PushT where the data names none)."""
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
    world = data.world or base.world
    return dataclasses.replace(
        base, autoencoder=ae, dynamics=dyn, probe=probe, fps=base.fps, world=world
    )


def check_fits(config: WorldModelConfig, data: EpisodeData) -> None:
    """Refuse (:class:`ModelError`) a model directory whose frame size or action/state dims
    differ from the data."""
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


ANGLE_WORLDS = ("pusht",)
"""Worlds whose task state ends with an angle (PushT's block x, y, angle); in every other
(the pile's discs) each number of the task state is a position."""


def task_head_overrides(data: EpisodeData) -> tuple[str, ...]:
    """``--set`` overrides that give the latent_grid dynamics a task head reading the
    data's task state (K numbers): K + 1 outputs for an angle last (its sin and cos), else
    K positions. Data that names no world is PushT's."""
    if data.task_state is None:
        return ()
    width = int(data.task_state.shape[1])
    if (data.world or "pusht") in ANGLE_WORLDS:
        return (f"dynamics.task_dim={width + 1}",)
    return (f"dynamics.task_dim={width}", "dynamics.task_angle=false")
