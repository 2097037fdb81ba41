"""Stage 1: train the autoencoder on ground-truth frames.

The loss keeps small things sharp: a foreground-weighted L1 (pixels that differ from the
background colour weigh ``fg_weight``), plain MSE, and an L1 on image gradients. The
latent gets Gaussian noise of std ``latent_noise`` before decoding and a small L2
penalty, so the decoder tolerates small latent errors and the latent scale stays put.
After training the per-channel latent mean/std are stored, so ``encode`` returns unit-std
latents.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from factory.model.autoencoder import Autoencoder
from factory.model.config import AutoencoderConfig, WorldModelConfig
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
from factory.train.metrics import agent_iou, psnr, t_iou, to_uint8

log = logging.getLogger(__name__)


def rarity_weights(target: Tensor, fg: Tensor, power: float, levels: int = 8) -> Tensor:
    """(B, 1, H, W): (mean count / count of the pixel's colour bin) ** power over the
    batch's foreground pixels, clipped to [0.5, 4]; 1 on the background."""
    q = ((target.detach() + 1.0) * 0.5 * (levels - 1)).round().clamp(0, levels - 1).long()
    bins = (q[:, 0] * levels + q[:, 1]) * levels + q[:, 2]  # (B, H, W)
    mask = fg[:, 0] > 0
    if not bool(mask.any()):
        return torch.ones_like(fg)
    counts = torch.bincount(bins[mask], minlength=levels**3).to(target.dtype)
    used = counts[counts > 0]
    ratio = (used.mean() / counts.clamp_min(1.0)) ** power
    w = ratio.clamp(0.5, 4.0)[bins]
    return torch.where(mask, w, torch.ones_like(w))[:, None]


def foreground_weights(target: Tensor, cfg: AutoencoderConfig) -> Tensor:
    """(B, 1, H, W) weights: ``fg_weight`` (x colour rarity) on dilated non-background
    pixels, else 1."""
    bg = torch.tensor(cfg.background, device=target.device, dtype=target.dtype) / 127.5 - 1.0
    diff = (target - bg[None, :, None, None]).abs().amax(dim=1, keepdim=True)
    fg = (diff > 2.0 * cfg.fg_threshold).to(target.dtype)
    fg = nn.functional.max_pool2d(fg, 3, stride=1, padding=1)
    w = 1.0 + (cfg.fg_weight - 1.0) * fg
    if cfg.rarity_power > 0:
        w = w * rarity_weights(target, fg, cfg.rarity_power)
    return w


def reconstruction_loss(
    pred: Tensor, target: Tensor, cfg: AutoencoderConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """pred, target: (B, 3, H, W) in [-1, 1] -> (scalar loss, parts)."""
    w = foreground_weights(target, cfg)
    err = pred - target
    l1 = (w * err.abs()).sum() / (w.sum() * 3.0)
    mse = err.pow(2).mean()
    gx = (err[..., :, 1:] - err[..., :, :-1]).abs()
    gy = (err[..., 1:, :] - err[..., :-1, :]).abs()
    edge = (w[..., :, 1:] * gx).mean() + (w[..., 1:, :] * gy).mean()
    loss = l1 + cfg.mse_weight * mse + cfg.edge_weight * edge
    return loss, {"l1_fg": l1.detach(), "mse": mse.detach(), "edge": edge.detach()}


@torch.no_grad()
def compute_latent_stats(
    ae: Autoencoder,
    frames: np.ndarray,
    indices: np.ndarray,
    device: str | torch.device,
    n: int = 1024,
    batch: int = 128,
) -> None:
    """Set ``ae``'s latent mean/std from up to ``n`` frames (evenly spaced over indices)."""
    pick = evenly_spaced(indices, n)
    was_training = ae.training
    ae.eval()
    raw = [
        ae.encoder(frames_batch(frames, pick[i : i + batch], device))
        for i in range(0, len(pick), batch)
    ]
    ae.set_latent_stats(torch.cat(raw))
    ae.train(was_training)


@torch.no_grad()
def evaluate_autoencoder(
    ae: Autoencoder,
    frames: np.ndarray,
    indices: np.ndarray,
    device: str | torch.device,
    n: int = 512,
    batch: int = 128,
) -> dict[str, float]:
    """PSNR (dB) and T-block mask IoU of reconstructions of up to ``n`` frames."""
    pick = evenly_spaced(indices, n)
    was_training = ae.training
    ae.eval()
    recon = [
        to_uint8(
            ae.decode_float(ae.encode_float(frames_batch(frames, pick[i : i + batch], device)))
        )
        for i in range(0, len(pick), batch)
    ]
    ae.train(was_training)
    rec, real = np.concatenate(recon), frames[pick]
    return {"psnr": psnr(rec, real), "t_iou": t_iou(rec, real), "agent_iou": agent_iou(rec, real)}


def train_autoencoder(
    data: EpisodeData,
    out_dir: str | Path,
    cfg: WorldModelConfig,
    budget: Budget,
    device: str | torch.device = "cpu",
    resume: bool = False,
    on_progress: ProgressFn | None = None,
    train_cfg: TrainConfig | None = None,
) -> dict[str, float]:
    """Train (or resume) the autoencoder part in ``out_dir``; returns metrics including
    validation ``val_psnr`` and ``val_t_iou`` on held-out episodes."""
    tc = train_cfg or TrainConfig(batch_size=32, lr=2e-3, warmup_steps=100)
    apply_threads(tc)
    config = stage_config(out_dir, cfg, "autoencoder", resume)
    if data.image_shape != config.image_shape:
        raise ValueError(f"data frames {data.image_shape} != model {config.image_shape}")
    ae = init_part(out_dir, "autoencoder", config, resume, device)
    assert isinstance(ae, Autoencoder)
    train_eps, val_eps = data.split(tc.val_fraction, tc.seed)
    train_idx = data.frame_indices(train_eps)
    val_idx = data.frame_indices(val_eps) if len(val_eps) else train_idx
    acfg = config.autoencoder
    t_start = time.monotonic()

    def step_fn(state: LoopState) -> dict[str, Tensor]:
        x = frames_batch(data.frames, sample_frames(train_idx, tc.batch_size, state.rng), device)
        z = ae.encoder(x)
        noise = torch.randn(z.shape, generator=state.generator, device=z.device)
        pred = ae.decoder(z + acfg.latent_noise * noise)
        loss, parts = reconstruction_loss(pred, x, acfg)
        loss = loss + acfg.latent_l2 * z.pow(2).mean()
        return {"loss": loss, **parts}

    run = StageRun(Path(out_dir), tc, budget, resume, on_progress, device)
    metrics = train_part(
        run,
        part="autoencoder",
        module=ae,
        config=config,
        step_fn=step_fn,
        data=data.source,
        before_save=lambda: compute_latent_stats(ae, data.frames, train_idx, device),
    )
    val = evaluate_autoencoder(ae, data.frames, val_idx, device)
    metrics.update({f"val_{k}": v for k, v in val.items()})
    log.info("autoencoder: %s (%.0f s)", val, time.monotonic() - t_start)
    return metrics
