"""Stage 3: fine-tune the decoder on the dynamics model's own predicted latents.

Each step rolls the frozen dynamics ``horizon`` frames from real context with real actions
and trains the decoder to turn every predicted latent into the real next frame (the
stage-1 reconstruction loss). A ``real_fraction`` of each batch decodes real (lightly
noised) latents instead, so reconstructions of clean latents stay good. The encoder and
the latent statistics do not change. Metrics report the rollout-decoded PSNR / T-mask IoU
on fixed held-out windows before and after.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from factory.model.autoencoder import Autoencoder
from factory.model.checkpoint import load_part, read_config
from factory.model.dynamics import Dynamics
from factory.train.autoencoder import reconstruction_loss
from factory.train.data import EpisodeData, WindowSampler
from factory.train.dynamics import cached_latents
from factory.train.loop import (
    Budget,
    LoopState,
    ProgressFn,
    StageRun,
    TrainConfig,
    apply_threads,
    frames_batch,
    train_part,
)
from factory.train.metrics import psnr, t_iou, to_uint8

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecoderTrainOptions:
    """horizon: rollout length per window; real_fraction: share of clean-latent samples."""

    horizon: int = 4
    real_fraction: float = 0.25
    real_noise: float = 0.05


@torch.no_grad()
def rollout_latents(
    dyn: Dynamics,
    latents: Tensor,
    data: EpisodeData,
    idx: np.ndarray,
    horizon: int,
    generator: torch.Generator | None,
    device: str | torch.device,
) -> Tensor:
    """Predicted latents (B, horizon, C, h, w) from windows idx (B, K + horizon)."""
    k = dyn.cfg.context
    z = latents[torch.from_numpy(idx[:, :k])].float().to(device)
    a = dyn.normalise_actions(torch.from_numpy(data.actions[idx]).to(device))
    preds = []
    for r in range(horizon):
        z_next = dyn.sample_next(z, a[:, r : r + k], generator)
        preds.append(z_next)
        z = torch.cat([z[:, 1:], z_next[:, None]], dim=1)
    return torch.stack(preds, dim=1)


@torch.no_grad()
def evaluate_rollout_decode(
    ae: Autoencoder,
    dyn: Dynamics,
    latents: Tensor,
    data: EpisodeData,
    idx: np.ndarray,
    horizon: int,
    device: str | torch.device,
    seed: int = 1,
) -> dict[str, float]:
    """PSNR and T-mask IoU of decoded predicted frames vs real, over windows idx."""
    k = dyn.cfg.context
    gen = torch.Generator(device=device).manual_seed(seed)
    pred = rollout_latents(dyn, latents, data, idx, horizon, gen, device)
    was_training = ae.training
    ae.eval()
    frames = to_uint8(ae.decode_float(pred.flatten(0, 1)))
    ae.train(was_training)
    real = data.frames[idx[:, k : k + horizon].reshape(-1)]
    return {"psnr": psnr(frames, real), "t_iou": t_iou(frames, real)}


def _step_fn(
    ae: Autoencoder,
    dyn: Dynamics,
    latents: Tensor,
    data: EpisodeData,
    sampler: WindowSampler,
    batch_size: int,
    opts: DecoderTrainOptions,
    device: str | torch.device,
) -> Callable[[LoopState], dict[str, Tensor]]:
    """The loop's step: decode rollout latents (and some real ones) against real frames."""
    k, hz = dyn.cfg.context, opts.horizon
    n_win = max(1, round(batch_size * (1 - opts.real_fraction) / hz))
    n_real = max(0, batch_size - n_win * hz)

    def step_fn(state: LoopState) -> dict[str, Tensor]:
        idx = sampler.sample(n_win, state.rng)
        z = rollout_latents(dyn, latents, data, idx, hz, state.generator, device).flatten(0, 1)
        target_idx = idx[:, k : k + hz].reshape(-1)
        if n_real:
            real_idx = sampler.sample(n_real, state.rng)[:, -1]
            z_real = latents[torch.from_numpy(real_idx)].float().to(device)
            noise = torch.randn(z_real.shape, generator=state.generator, device=z_real.device)
            z = torch.cat([z, z_real + opts.real_noise * noise])
            target_idx = np.concatenate([target_idx, real_idx])
        target = frames_batch(data.frames, target_idx, device)
        loss, parts = reconstruction_loss(ae.decode_float(z), target, ae.cfg)
        return {"loss": loss, **parts}

    return step_fn


def finetune_decoder(
    data: EpisodeData,
    out_dir: str | Path,
    budget: Budget,
    device: str | torch.device = "cpu",
    resume: bool = False,
    on_progress: ProgressFn | None = None,
    train_cfg: TrainConfig | None = None,
    opts: DecoderTrainOptions | None = None,
) -> dict[str, float]:
    """Fine-tune the autoencoder's decoder in ``out_dir`` (needs autoencoder + dynamics).

    The training state is kept as part "decoder" (``decoder.optim.safetensors``); the
    weights go back into ``autoencoder.safetensors``. Returns ``before_*``/``after_*``
    PSNR and T-IoU of rollout-decoded held-out frames.
    """
    tc = train_cfg or TrainConfig(batch_size=32, lr=2e-4, warmup_steps=50, schedule="constant")
    opts = opts or DecoderTrainOptions()
    apply_threads(tc)
    config = read_config(out_dir)
    ae = load_part(out_dir, "autoencoder", config, device).train()
    dyn = load_part(out_dir, "dynamics", config, device)
    assert isinstance(ae, Autoencoder) and isinstance(dyn, Dynamics)
    for p in [*dyn.parameters(), *ae.encoder.parameters()]:
        p.requires_grad_(False)
    latents = cached_latents(out_dir, ae, data, device)
    k, hz = config.dynamics.context, opts.horizon
    train_eps, val_eps = data.split(tc.val_fraction, tc.seed)
    sampler = WindowSampler(data, k + hz, train_eps)
    val_idx = WindowSampler(data, k + hz, val_eps if len(val_eps) else train_eps).sample(
        32, np.random.default_rng(tc.seed + 1)
    )
    before = evaluate_rollout_decode(ae, dyn, latents, data, val_idx, hz, device)
    step_fn = _step_fn(ae, dyn, latents, data, sampler, tc.batch_size, opts, device)

    run = StageRun(Path(out_dir), tc, budget, resume, on_progress, device)
    metrics = train_part(
        run,
        part="decoder",
        module=ae,
        config=config,
        step_fn=step_fn,
        params=ae.decoder.parameters(),
        save_as="autoencoder",
    )
    after = evaluate_rollout_decode(ae, dyn, latents, data, val_idx, hz, device)
    metrics.update({f"before_{k}": v for k, v in before.items()})
    metrics.update({f"after_{k}": v for k, v in after.items()})
    return metrics
