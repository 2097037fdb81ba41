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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from factory.device import resolve_device
from factory.eval.fidelity import (
    HORIZONS,
    horizon_metrics,
    reader_metrics,
    reconstruction_metrics,
    replay_set,
    rollout_replay,
)
from factory.eval.permanence import PermanenceConfig, permanence_metrics
from factory.eval.stability import stability_run
from factory.eval.task_state import reader_real_summary
from factory.model.files import load_model
from factory.store import EpisodeStore

log = logging.getLogger(__name__)
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class FidelityRequest:
    """One ``factory eval fidelity`` call."""

    data: Path
    model: Path | None = None
    episodes: int = 16
    context: int | None = None  # default: the model's own context length
    stability_frames: int = 9000
    video: Path | None = None
    device: str = "auto"
    seed: int = 0
    permanence_starts: int = 8  # 0: skip the permanence check


def run_fidelity(req: FidelityRequest, on_progress: Progress | None = None) -> dict[str, Any]:
    """All fidelity metrics as one JSON-able dict (keys: recon_psnr, recon_iou, horizons,
    ...)."""
    from factory.errors import FactoryError

    if req.episodes <= 0:
        raise FactoryError(f"--episodes must be positive, got {req.episodes}")
    if req.permanence_starts < 0:
        raise FactoryError(f"--permanence-starts must be >= 0, got {req.permanence_starts}")
    model, model_id = load_model(req.model, resolve_device(req.device))
    with EpisodeStore.open(req.data) as store:
        for key in ("image", "action", "gt_state"):
            if key not in store.schema.keys:
                raise FactoryError(f"{req.data} has no data/{key}; fidelity needs real episodes")
        model.check_compatible(
            action_dim=store.schema.keys["action"].shape[0],
            image_shape=store.schema.keys["image"].shape,
        )
        context = req.context or model.context
        rs = replay_set(store, req.episodes, context, max(HORIZONS))
        reference = _reference_frames(store)
        has_state = "state" in store.schema.keys
        reader = reader_metrics(model, store) if has_state else None
        permanence = None
        if has_state and req.permanence_starts > 0:
            pcfg = PermanenceConfig(starts=req.permanence_starts, seed=req.seed)
            permanence = permanence_metrics(model, store, context, pcfg)
    replayed = rollout_replay(model, rs, seed=req.seed)
    result: dict[str, Any] = {
        "model": model_id,
        "kind": model.kind,
        "data": str(req.data),
        "episodes": len(rs.frames),
    }
    states = rs.world_states()
    flat = rs.frames.reshape(-1, *rs.frames.shape[2:])
    flat_states = None if states is None else states.reshape(-1, states.shape[-1])
    result.update(reconstruction_metrics(model, flat, flat_states))
    result["horizons"] = horizon_metrics(rs, replayed)
    if model.starts_from_states and states is not None:
        # the same replay started from the reader's reading of the context frames
        read = rollout_replay(model, rs, seed=req.seed, from_frames=True)
        result["horizons_read_start"] = horizon_metrics(rs, read)
    if reader is not None:
        result["reader"] = reader
        result["reader_real"] = reader_real_summary(reader, model.frame_reader)
    if permanence is not None:
        result["permanence"] = permanence
    if req.video is not None:
        write_side_by_side(req.video, rs.frames[:, rs.context - 1 :], replayed.frames)
        result["video"] = str(req.video)
    if req.stability_frames > 0:
        result["stability"] = stability_run(
            model, model_id, reference, req.stability_frames, req.seed, on_progress
        )
    return result


def _reference_frames(store: EpisodeStore, episodes: int = 50, stride: int = 5) -> np.ndarray:
    """Real frames (N, H, W, 3): every ``stride``-th frame of up to ``episodes`` episodes
    spread over the store, for the stability reference statistics."""
    picks = np.unique(np.linspace(0, store.n_episodes - 1, min(episodes, store.n_episodes)))
    return np.concatenate([store.episode(int(i))["image"][::stride] for i in picks])


def write_side_by_side(path: Path, real: np.ndarray, generated: np.ndarray, fps: int = 10) -> None:
    """An mp4 of real | generated, episode after episode (up to 4 episodes).

    real: (E, T', H, W, 3) uint8 with T' >= T; generated: (E, T, H, W, 3) uint8.
    """
    import imageio.v2 as imageio

    t = generated.shape[1]
    with imageio.get_writer(str(path), fps=fps, macro_block_size=1) as writer:
        for e in range(min(4, len(generated))):
            for i in range(t):
                pair = np.concatenate([real[e, i + 1], generated[e, i]], axis=1)
                writer.append_data(np.repeat(np.repeat(pair, 3, axis=0), 3, axis=1))  # type: ignore[attr-defined]
