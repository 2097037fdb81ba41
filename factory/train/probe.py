"""Train the state probe on ground-truth frames.

Targets: (agent x, agent y, block x, block y) / position_scale and (sin, cos) of the block
angle, from ``data.state[:, :2]`` and ``data.task_state[:, :3]``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from factory.eval.metrics import reader_errors
from factory.model.config import WorldModelConfig
from factory.model.probe import StateProbe
from factory.train.data import EpisodeData, evenly_spaced, sample_frames
from factory.train.loop import (
    Budget,
    LoopState,
    ProgressFn,
    StageRun,
    TrainConfig,
    apply_threads,
    frames_batch,
    init_part,
    stage_config,
    train_part,
)

log = logging.getLogger(__name__)


def _targets(
    probe: StateProbe, data: EpisodeData, idx: np.ndarray, device: str | torch.device
) -> Tensor:
    assert data.task_state is not None
    agent = torch.from_numpy(data.state[idx, :2]).to(device)
    block = torch.from_numpy(data.task_state[idx, :3]).to(device)
    return probe.targets(agent, block)


@torch.no_grad()
def evaluate_probe(
    probe: StateProbe,
    data: EpisodeData,
    indices: np.ndarray,
    device: str | torch.device,
    n: int = 512,
) -> dict[str, float]:
    """Mean agent / block position error (px) and block angle error (degrees)."""
    assert data.task_state is not None
    pick = evenly_spaced(indices, n)
    was_training = probe.training
    probe.eval()
    agent, block = probe.predict(torch.from_numpy(data.frames[pick]).to(device))
    probe.train(was_training)
    errors = reader_errors(
        agent.cpu().numpy(), data.state[pick, :2], block.cpu().numpy(), data.task_state[pick, :3]
    )
    return {k: float(v.mean()) for k, v in errors.items()}


def train_probe(
    data: EpisodeData,
    out_dir: str | Path,
    cfg: WorldModelConfig,
    budget: Budget,
    device: str | torch.device = "cpu",
    resume: bool = False,
    on_progress: ProgressFn | None = None,
    train_cfg: TrainConfig | None = None,
) -> dict[str, float]:
    """Train (or resume) the probe part in ``out_dir``; needs ``data.task_state``.

    Returns metrics incl. held-out ``val_block_err_px`` and ``val_angle_err_deg``.
    """
    if data.task_state is None or data.task_state.shape[1] < 3:
        raise ValueError("the probe needs task_state (N, 3): block x, y, angle")
    tc = train_cfg or TrainConfig(batch_size=64, lr=1e-3, warmup_steps=50)
    apply_threads(tc)
    config = stage_config(out_dir, cfg, "probe", resume)
    probe = init_part(out_dir, "probe", config, resume, device)
    assert isinstance(probe, StateProbe)
    train_eps, val_eps = data.split(tc.val_fraction, tc.seed)
    train_idx = data.frame_indices(train_eps)
    val_idx = data.frame_indices(val_eps) if len(val_eps) else train_idx

    def step_fn(state: LoopState) -> dict[str, Tensor]:
        idx = sample_frames(train_idx, tc.batch_size, state.rng)
        pred = probe(frames_batch(data.frames, idx, device))
        err = (pred - _targets(probe, data, idx, device)).pow(2)
        return {
            "loss": err.mean(),
            "pos": err[:, :4].mean().detach(),
            "angle": err[:, 4:].mean().detach(),
        }

    run = StageRun(Path(out_dir), tc, budget, resume, on_progress, device)
    metrics = train_part(
        run,
        part="probe",
        module=probe,
        config=config,
        step_fn=step_fn,
        data=data.source,
    )
    metrics.update({f"val_{k}": v for k, v in evaluate_probe(probe, data, val_idx, device).items()})
    return metrics
