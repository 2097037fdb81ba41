"""``factory eval fidelity``: how faithful the world model is to the ground truth.

    factory eval fidelity --data data/pusht_heldout.zarr --episodes 16 --json
    factory eval fidelity --model runs/pusht_v1 --data data/pusht_heldout.zarr --video fid.mp4

It reports the model's own re-rendering of real frames (``recon_*``: the latent kind's
autoencoder, the object-state kind's renderer at the true state); replayed real actions
from real initial frames at horizons 1, 10, 50 and 100 beside the copy-last-frame
baseline; the frame reader's errors on real frames (``reader``; its quotable summary,
naming the reader, ``reader_real``); the permanence check (a block at rest with the agent
held still, :mod:`factory.eval.permanence`); and a long closed-loop stability rollout
under ``play`` actions.

Short episodes (real robot datasets often have them) are replayed to the longest asked
horizon they hold, and each horizon is scored on the episodes that reach it (its row's
``episodes``); a horizon no episode holds is listed in ``horizons_skipped`` with the
reason. Only a store where no asked horizon fits any episode is refused. The permanence
check needs one window of ``context`` frames with the agent clear of a block at rest
(else it reports ``starts`` 0 and why it was ``skipped``); the stability run starts from
the ground truth and needs no particular episode length.

On a pile store (``--env pile``) the replay is scored with the pile's metrics instead
(disc-mask IoU per camera, swept-fraction and matched disc-position error, the two views'
disc count and centroid agreement, hold-still permanence): :func:`pile_fidelity`. A
model of the top camera alone (``latent_grid``) gets the side view's and the cross-view
metrics beside a model of the side camera (``--side-model``, trained with ``--camera
side``): :mod:`factory.eval.pile_pair`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from factory.device import resolve_device
from factory.envs import WORLDS, recorded_world
from factory.eval.fidelity import (
    HORIZONS,
    ReplayPlan,
    ReplaySet,
    horizon_metrics,
    plan_replay,
    reader_metrics,
    reconstruction_metrics,
    rollout_replay,
)
from factory.eval.permanence import PermanenceConfig, permanence_metrics
from factory.eval.pile_fidelity import (
    check_pile_model,
    is_pile_store,
    pile_horizon_metrics,
    pile_reader_metrics,
    pile_reconstruction,
    pile_skipped,
)
from factory.eval.pile_pair import check_pair, replayer
from factory.eval.pile_permanence import HoldStillConfig, hold_still_metrics
from factory.eval.stability import stability_run
from factory.eval.task_state import reader_real_summary
from factory.model.files import load_model
from factory.model.protocol import RolloutModel
from factory.model.registry import world_of
from factory.store import EpisodeStore

log = logging.getLogger(__name__)
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class FidelityRequest:
    """One ``factory eval fidelity`` call."""

    data: Path
    model: Path | None = None
    side_model: Path | None = None  # pile: a side-camera model replayed beside ``model``
    episodes: int = 16
    context: int | None = None  # default: the model's own context length
    stability_frames: int = 9000
    video: Path | None = None
    device: str = "auto"
    seed: int = 0
    permanence_starts: int = 8  # 0: skip the permanence check
    horizons: tuple[int, ...] = HORIZONS  # replay horizons (steps after the context)


def run_fidelity(req: FidelityRequest, on_progress: Progress | None = None) -> dict[str, Any]:
    """All fidelity metrics as one JSON-able dict (keys: recon_psnr, recon_iou, horizons,
    horizons_skipped when some asked horizon fits no episode, ...; on a pile store the
    pile's, :func:`pile_fidelity`)."""
    _check_request(req)
    device = resolve_device(req.device)
    model, model_id = load_model(req.model, device)
    side = None if req.side_model is None else load_model(req.side_model, device)
    return model_fidelity(model, model_id, req, on_progress, side)


def model_fidelity(
    model: RolloutModel,
    model_id: str,
    req: FidelityRequest,
    on_progress: Progress | None = None,
    side: tuple[RolloutModel, str] | None = None,
) -> dict[str, Any]:
    """:func:`run_fidelity` of a loaded model (``req.model``, ``req.side_model`` and
    ``req.device`` unused), paired on a pile store with the loaded ``side`` (model, id)."""
    from factory.errors import FactoryError

    with EpisodeStore.open(req.data) as store:
        _check_store(req.data, store, model)
        if is_pile_store(store):
            return pile_fidelity(model, model_id, store, req, side)
        if side is not None:
            raise FactoryError(
                f"--side-model pairs the cameras of a pile store; {req.data} is not one"
            )
        context = req.context or model.context
        plan = plan_replay(store, req.episodes, context, req.horizons)
        reference = _reference_frames(store)
        has_state = "state" in store.schema.keys
        reader = reader_metrics(model, store) if has_state else None
        permanence = _permanence(model, store, context, req) if has_state else None
    replays = [(rs, rollout_replay(model, rs, seed=req.seed)) for rs in plan.groups.values()]
    result: dict[str, Any] = {
        "model": model_id,
        "kind": model.kind,
        "data": str(req.data),
        "episodes": plan.n_episodes,
    }
    result.update(_reconstruction(model, plan))
    result["horizons"] = horizon_metrics(replays, req.horizons)
    if plan.skipped:
        result["horizons_skipped"] = {str(h): why for h, why in plan.skipped.items()}
    if model.starts_from_states and all(rs.state is not None for rs, _ in replays):
        # the same replay started from the reader's reading of the context frames
        read = [(rs, rollout_replay(model, rs, req.seed, from_frames=True)) for rs, _ in replays]
        result["horizons_read_start"] = horizon_metrics(read, req.horizons)
    if reader is not None:
        result["reader"] = reader
        result["reader_real"] = reader_real_summary(reader, model.frame_reader)
    if permanence is not None:
        result["permanence"] = permanence
    if req.video is not None:
        write_side_by_side(
            req.video, [(rs.frames[:, rs.context - 1 :], r.frames) for rs, r in replays]
        )
        result["video"] = str(req.video)
    if req.stability_frames > 0:
        result["stability"] = stability_run(
            model, model_id, reference, req.stability_frames, req.seed, on_progress
        )
    return result


def _check_request(req: FidelityRequest) -> None:
    from factory.errors import FactoryError

    if req.episodes <= 0:
        raise FactoryError(f"--episodes must be positive, got {req.episodes}")
    if req.permanence_starts < 0:
        raise FactoryError(f"--permanence-starts must be >= 0, got {req.permanence_starts}")
    if not req.horizons or min(req.horizons) <= 0:
        raise FactoryError(f"--horizons must be positive step counts, got {list(req.horizons)}")


def _check_store(path: Path, store: EpisodeStore, model: RolloutModel) -> None:
    from factory.errors import FactoryError

    for key in ("image", "action", "task_state"):
        if key not in store.schema.keys:
            raise FactoryError(f"{path} has no data/{key}; fidelity needs real episodes")
    recorded, simulated = recorded_world(store.attrs), world_of(model.config)
    if recorded is not None and simulated in WORLDS and recorded != simulated:
        raise FactoryError(
            f"{path} holds {recorded} episodes and the model simulates the {simulated} "
            f"world: a model of another world (score it on a {simulated} store)"
        )
    model.check_compatible(
        action_dim=store.schema.keys["action"].shape[0],
        image_shape=store.schema.keys["image"].shape,
    )


def _reconstruction(model: RolloutModel, plan: ReplayPlan) -> dict[str, float | str]:
    """:func:`reconstruction_metrics` on every frame of every replayed window."""
    groups: list[ReplaySet] = list(plan.groups.values())
    frames = np.concatenate([rs.frames.reshape(-1, *rs.frames.shape[2:]) for rs in groups])
    states = [rs.world_states() for rs in groups]
    flat_states = None
    if all(s is not None for s in states):
        flat_states = np.concatenate([s.reshape(-1, s.shape[-1]) for s in states if s is not None])
    return reconstruction_metrics(model, frames, flat_states)


def pile_fidelity(
    model: RolloutModel,
    model_id: str,
    store: EpisodeStore,
    req: FidelityRequest,
    side: tuple[RolloutModel, str] | None = None,
) -> dict[str, Any]:
    """:func:`run_fidelity` on a pile store: the same replay scored with the pile metrics
    (:mod:`factory.eval.pile_fidelity`; ``pile_skipped`` names any the model cannot be
    scored on, and why), the reader's disc errors on real frames and the hold-still check
    (``hold_still``, :mod:`factory.eval.pile_permanence`; ``--permanence-starts`` starts).
    The closed-loop stability run's statistics are PushT's (T-block mask, block found), so
    it is not run (``stability_skipped``). With ``side`` (a side-camera model and its id,
    ``side_model``) each replay pairs the two (:mod:`factory.eval.pile_pair`); the
    reconstruction, reader and hold-still numbers stay ``model``'s."""
    check_pile_model(model, store)
    check_pair(model, None if side is None else side[0], store)
    replay = replayer(model, None if side is None else side[0], req.seed)
    context = req.context or model.context
    plan = plan_replay(store, req.episodes, context, req.horizons)
    has_state = "state" in store.schema.keys
    reader = pile_reader_metrics(model, store) if has_state else None
    hold = None
    if has_state and req.permanence_starts:
        cfg = HoldStillConfig(starts=req.permanence_starts, seed=req.seed)
        hold = hold_still_metrics(model, store, context, cfg)
    replays = [(rs, replay(rs, False)) for rs in plan.groups.values()]
    result: dict[str, Any] = {
        "model": model_id,
        **({} if side is None else {"side_model": side[1]}),
        "kind": model.kind,
        "world": "pile",
        "data": str(req.data),
        "episodes": plan.n_episodes,
        **pile_reconstruction(model, plan),
        "horizons": pile_horizon_metrics(replays, req.horizons),
    }
    if skipped := pile_skipped(replays):
        result["pile_skipped"] = skipped
    if plan.skipped:
        result["horizons_skipped"] = {str(h): why for h, why in plan.skipped.items()}
    if model.starts_from_states and all(rs.state is not None for rs, _ in replays):
        read = [(rs, replay(rs, True)) for rs, _ in replays]
        result["horizons_read_start"] = pile_horizon_metrics(read, req.horizons)
    if reader is not None:
        result["reader"] = reader
    if hold is not None:
        result["hold_still"] = hold
    if req.video is not None:
        write_side_by_side(
            req.video, [(rs.frames[:, rs.context - 1 :], r.frames) for rs, r in replays]
        )
        result["video"] = str(req.video)
    if req.stability_frames > 0:
        result["stability_skipped"] = "its statistics are PushT's (T-block mask, block found)"
    return result


def _permanence(
    model: RolloutModel, store: EpisodeStore, context: int, req: FidelityRequest
) -> dict[str, Any] | None:
    """The permanence check (None when ``req.permanence_starts`` is 0); on a store with no
    qualifying start (short episodes have few), ``starts`` 0 and why it was ``skipped``.
    Its rollouts are the model's own, so they need no episode longer than ``context``."""
    if req.permanence_starts == 0:
        return None
    cfg = PermanenceConfig(starts=req.permanence_starts, seed=req.seed)
    result = permanence_metrics(model, store, context, cfg)
    if not result["starts"]:
        result["skipped"] = f"no window of {context} frames with the agent clear of a block at rest"
    return result


def _reference_frames(store: EpisodeStore, episodes: int = 50, stride: int = 5) -> np.ndarray:
    """Real frames (N, H, W, 3): every ``stride``-th frame of up to ``episodes`` episodes
    spread over the store, for the stability reference statistics."""
    picks = np.unique(np.linspace(0, store.n_episodes - 1, min(episodes, store.n_episodes)))
    return np.concatenate([store.episode(int(i))["image"][::stride] for i in picks])


def write_side_by_side(
    path: Path, pairs: Sequence[tuple[np.ndarray, np.ndarray]], fps: int = 10
) -> None:
    """An mp4 of real | generated, episode after episode (up to 4 episodes in all).

    pairs: (real (E, T', H, W, 3), generated (E, T, H, W, 3)) uint8 with T' > T, real[:, 0]
    the last context frame; one pair per replay group.
    """
    import imageio.v2 as imageio

    episodes = [(r, g) for real, gen in pairs for r, g in zip(real, gen, strict=True)][:4]
    with imageio.get_writer(str(path), fps=fps, macro_block_size=1) as writer:
        for real_ep, gen_ep in episodes:
            for i in range(len(gen_ep)):
                pair = np.concatenate([real_ep[i + 1], gen_ep[i]], axis=1)
                writer.append_data(np.repeat(np.repeat(pair, 3, axis=0), 3, axis=1))  # type: ignore[attr-defined]
