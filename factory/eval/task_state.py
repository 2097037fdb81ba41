"""The one place evaluation reads the task state (PushT: the block pose) from the model.

A rollout step carries the model's own reading (``StepOutput.task_state``: the latent
kind's task head or probe, the object-state kind's state); real frames go through the
model's frame reader (``read_frames``: the task head through the encoder, the probe, or
the object-state reader).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from factory.model.protocol import RolloutModel
from factory.model.world_model import StepOutput


def real_block_pose(model: RolloutModel, frames: np.ndarray, batch: int = 256) -> np.ndarray:
    """Block pose (N, 3) float32 (x, y board px; angle rad) of real frames (N, H, W, 3)."""
    out = [model.read_frames(frames[i : i + batch])[1] for i in range(0, len(frames), batch)]
    return np.concatenate(out) if out else np.zeros((0, 3), np.float32)


def generated_block_pose(model: RolloutModel, out: StepOutput) -> np.ndarray:
    """Block pose (B, 3) float32 of one rollout step's output (the model's own reading)."""
    if out.task_state is not None:
        return np.asarray(out.task_state, np.float32)
    return real_block_pose(model, out.frames)


def probe_real_summary(probe: dict[str, Any], reader: str = "probe") -> dict[str, Any]:
    """The quotable block of the probe's errors on real frames (``probe_real`` in the
    fidelity JSON) from :func:`factory.eval.fidelity.probe_metrics`' dict: block position
    and agent position error in board px (mean and p95), angle error in degrees (mean)."""
    return {
        "reader": reader,
        "frames": probe["frames"],
        "block_px": probe["block_err_px"],
        "block_px_p95": probe["block_err_px_p95"],
        "angle_deg": probe["angle_err_deg"],
        "agent_px": probe["agent_err_px"],
        "agent_px_p95": probe["agent_err_px_p95"],
    }
