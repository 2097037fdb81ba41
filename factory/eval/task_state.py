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


def real_block_pose(model: RolloutModel, frames: np.ndarray, batch: int = 256) -> np.ndarray:
    """Block pose (N, 3) float32 (x, y board px; angle rad) of real frames (N, H, W, 3)."""
    out = [model.read_frames(frames[i : i + batch])[1] for i in range(0, len(frames), batch)]
    return np.concatenate(out) if out else np.zeros((0, 3), np.float32)


def reader_real_summary(errors: dict[str, Any], reader: str) -> dict[str, Any]:
    """The quotable block of the frame reader's errors on real frames (``reader_real`` in
    the fidelity JSON) from :func:`factory.eval.fidelity.reader_metrics`' dict: which
    reader (``model.frame_reader``), block position and agent position error in board px
    (mean and p95), angle error in degrees (mean)."""
    return {
        "reader": reader,
        "frames": errors["frames"],
        "block_px": errors["block_err_px"],
        "block_px_p95": errors["block_err_px_p95"],
        "angle_deg": errors["angle_err_deg"],
        "agent_px": errors["agent_err_px"],
        "agent_px_p95": errors["agent_err_px_p95"],
    }
