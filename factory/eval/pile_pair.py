"""Pile fidelity of two single-camera models replayed as one: a model of the top camera
beside a model of the side camera (the pixel-only ``latent_grid`` kind, one model per
camera as ``factory train all --camera side`` trains it), so that the side view's disc IoU
and the cross-view consistency are measured for it as for a kind that renders both
cameras from one state (``object_set``).

Each model replays the same episodes' real actions open loop from its own camera's real
context frames. The pair's :class:`~factory.eval.fidelity.Replayed` is the top model's
with ``views["side"]`` the side model's frames, so
:func:`factory.eval.pile_fidelity.pile_horizon_metrics` scores each view against its own
camera's real frames (beside copy-last) and the cross-view numbers (``count_gap``,
``centroid_gap_px``) between the two models' frames, beside the real frames' own gap.

Shapes: ``E`` episodes, ``T`` horizon, ``H, W`` image size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from factory.errors import FactoryError, ModelError
from factory.eval.fidelity import Replayed, ReplaySet, rollout_replay
from factory.model.config import MAIN_CAMERA
from factory.model.protocol import RolloutModel
from factory.model.registry import world_of
from factory.record.output import view_key
from factory.store import EpisodeStore

SIDE = "side"
Replayer = Callable[[ReplaySet, bool], Replayed]
"""(replay set, from_frames) -> the replay of its windows."""


def model_camera(model: RolloutModel) -> str:
    """The camera a model's main frames (its steps' ``frames``) show: its first named
    camera, else the store's main one (:data:`~factory.model.config.MAIN_CAMERA`)."""
    return model.cameras[0] if model.cameras else MAIN_CAMERA


def check_pair(model: RolloutModel, side: RolloutModel | None, store: EpisodeStore) -> None:
    """Refuse (:class:`FactoryError`, one line) a main model whose frames are not the top
    camera's (a side-camera model alone: fidelity would compare its frames with the top
    camera's), and a ``side`` model that is not a model of this store's side camera:
    another camera, a model that renders both, another world, action dim or frame size."""
    cam = model_camera(model)
    if cam != MAIN_CAMERA:
        raise FactoryError(
            f"the {model.kind} model renders the {cam} camera; score it beside a "
            f"{MAIN_CAMERA}-camera model: --model TOP_MODEL --side-model SIDE_MODEL"
        )
    if side is None:
        return
    keys = store.schema.keys
    if view_key(SIDE) not in keys:
        raise FactoryError(f"--side-model: {store.path} records no {SIDE} camera")
    if SIDE in model.cameras:
        raise FactoryError(f"--side-model: the {model.kind} --model renders the {SIDE} camera")
    if tuple(side.cameras) != (SIDE,):
        shown = ", ".join(side.cameras) or MAIN_CAMERA
        raise FactoryError(
            f"--side-model: the {side.kind} model renders the {shown} camera, not {SIDE} "
            f"(train one with --camera {SIDE})"
        )
    if world_of(side.config) != world_of(model.config):
        raise FactoryError(
            f"--side-model: a model of the {world_of(side.config)} world, the --model's is "
            f"{world_of(model.config)} (a model of another world)"
        )
    try:
        side.check_compatible(
            action_dim=keys["action"].shape[0], image_shape=keys[view_key(SIDE)].shape
        )
    except ModelError as err:
        raise FactoryError(f"--side-model: {err} (a model of another world or size)") from None


def side_replay_set(rs: ReplaySet) -> ReplaySet:
    """``rs`` seen by the side camera: its frames (E, K+T, H, W, 3) the side view's."""
    return dataclasses.replace(rs, frames=rs.views[SIDE], views={})


def pair_replay(
    model: RolloutModel, side: RolloutModel, rs: ReplaySet, seed: int, from_frames: bool = False
) -> Replayed:
    """``model``'s replay of ``rs`` with ``views["side"]`` (E, T, H, W, 3) the ``side``
    model's replay of the same actions from the side camera's real context."""
    top = rollout_replay(model, rs, seed, from_frames)
    other = rollout_replay(side, side_replay_set(rs), seed, from_frames)
    return dataclasses.replace(top, views={**top.views, SIDE: other.frames})


def replayer(model: RolloutModel, side: RolloutModel | None, seed: int) -> Replayer:
    """How pile fidelity replays a set: ``model`` alone, or paired with ``side``."""

    def replay(rs: ReplaySet, from_frames: bool = False) -> Replayed:
        if side is None:
            return rollout_replay(model, rs, seed, from_frames)
        return pair_replay(model, side, rs, seed, from_frames)

    return replay
