"""Stage 2b (optional): train only the dynamics' read-out heads on real latents.

The state head (robot state) and the task head (PushT: block x, y, angle; needs
``dynamics.task_dim`` > 0) are small; inside the dynamics stage they see only the windows
that the dynamics trains on. This stage trains them alone, on large batches of single
frames' latents from the latent cache (lightly noised, as predicted latents are
imperfect), with the rest of the dynamics frozen. Its loop state is ``heads.*``; the
weights are saved into the dynamics part.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from factory.eval.metrics import reader_errors
from factory.model.autoencoder import Autoencoder
from factory.model.checkpoint import load_part, read_config
from factory.model.dynamics import Dynamics
from factory.train.data import EpisodeData, evenly_spaced, sample_frames
from factory.train.dynamics import cached_latents
from factory.train.loop import (
    Budget,
    LoopState,
    ProgressFn,
    StageRun,
    TrainConfig,
    apply_threads,
    train_part,
)

HEADS_TRAIN = TrainConfig(batch_size=128, lr=1e-3, warmup_steps=50)
"""The heads stage's default optimiser settings."""
NOISE = 0.05


def _losses(dyn: Dynamics, z: Tensor, data: EpisodeData, idx: np.ndarray) -> dict[str, Tensor]:
    """State (and task) head MSE on latents z (B, C, h, w) of frames idx (B,)."""
    state = dyn.normalise_state(torch.from_numpy(data.state[idx]).to(z.device))
    out = {"state": (dyn.state_head(z) - state).pow(2).mean()}
    if dyn.task_head is not None and data.task_state is not None:
        pose = torch.from_numpy(data.task_state[idx]).to(z.device)
        out["task"] = (dyn.task_head(z) - dyn.task_target(pose)).pow(2).mean()
    return out


@torch.no_grad()
def evaluate_heads(
    dyn: Dynamics, latents: Tensor, data: EpisodeData, frames: np.ndarray, device: str
) -> dict[str, float]:
    """Mean errors on clean latents of ``frames``: agent px, and block px / angle deg."""
    dyn.eval()
    z = latents[torch.from_numpy(frames)].float().to(device)
    agent = dyn.read_state(z).cpu().numpy()
    block, truth = None, None
    if dyn.task_head is not None and data.task_state is not None:
        block, truth = dyn.read_task(z).cpu().numpy(), data.task_state[frames]
    dyn.train()
    errors = reader_errors(agent, data.state[frames], block, truth)
    return {k: float(v.mean()) for k, v in errors.items()}


def train_heads(
    data: EpisodeData,
    out_dir: str | Path,
    budget: Budget,
    device: str = "cpu",
    resume: bool = False,
    on_progress: ProgressFn | None = None,
    train_cfg: TrainConfig | None = None,
) -> dict[str, float]:
    """Train the dynamics part's heads in ``out_dir`` (which needs the autoencoder and
    dynamics parts); returns loop metrics and held-out ``val_*`` errors."""
    tc = train_cfg or HEADS_TRAIN
    apply_threads(tc)
    config = read_config(out_dir)
    if "dynamics" not in config.parts:
        raise ValueError(f"{out_dir} has no dynamics part; train the dynamics first")
    ae = load_part(out_dir, "autoencoder", config, device)
    assert isinstance(ae, Autoencoder)
    latents = cached_latents(out_dir, ae, data, device)
    dyn = load_part(out_dir, "dynamics", config, device)
    assert isinstance(dyn, Dynamics)
    dyn.train()
    heads = [dyn.state_head] + ([dyn.task_head] if dyn.task_head is not None else [])
    for p in dyn.parameters():
        p.requires_grad_(False)
    params = [p for h in heads for p in h.parameters()]
    for p in params:
        p.requires_grad_(True)
    train_eps, val_eps = data.split(tc.val_fraction, tc.seed)
    pool = data.frame_indices(train_eps)

    def step_fn(state: LoopState) -> dict[str, Tensor]:
        idx = sample_frames(pool, tc.batch_size, state.rng)
        z = latents[torch.from_numpy(idx)].float().to(device)
        z = z + NOISE * torch.randn(z.shape, generator=state.generator, device=z.device)
        out = _losses(dyn, z, data, idx)
        out["loss"] = sum(out.values(), torch.zeros((), device=z.device))
        return {k: v if k == "loss" else v.detach() for k, v in out.items()}

    run = StageRun(Path(out_dir), tc, budget, resume, on_progress, device)
    metrics = train_part(
        run,
        part="heads",
        module=dyn,
        config=config,
        step_fn=step_fn,
        params=params,
        save_as="dynamics",
        data=data.source,
    )
    val_frames = evenly_spaced(data.frame_indices(val_eps if len(val_eps) else train_eps), 2048)
    val = evaluate_heads(dyn, latents, data, val_frames, device)
    metrics.update({f"val_{k}": v for k, v in val.items()})
    return metrics
