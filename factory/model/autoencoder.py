"""Conv autoencoder: RGB frames <-> small latent grids.

``encode``: uint8 frames (B, H, W, 3) -> normalised latents (B, C, H/f, W/f) float32
(per-channel zero mean, unit std once :meth:`Autoencoder.set_latent_stats` has run).
``decode``: normalised latents -> uint8 frames (B, H, W, 3).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from factory.model.config import AutoencoderConfig
from factory.model.layers import (
    Downsample,
    ResBlock,
    Upsample,
    float_to_frames,
    frames_to_float,
    group_count,
)


class Encoder(nn.Module):
    """x: (B, 3, H, W) in [-1, 1] -> raw latent (B, C, H/f, W/f)."""

    def __init__(self, cfg: AutoencoderConfig) -> None:
        super().__init__()
        ch = cfg.channels
        self.unshuffle = nn.PixelUnshuffle(cfg.patch)
        self.stem = nn.Conv2d(3 * cfg.patch**2, ch[0], 3, padding=1)
        layers: list[nn.Module] = []
        for i, c in enumerate(ch):
            layers += [ResBlock(c, c, cfg.groups) for _ in range(cfg.blocks[i])]
            if i + 1 < len(ch):
                layers.append(Downsample(c, ch[i + 1]))
        self.body = nn.Sequential(*layers)
        self.norm = nn.GroupNorm(group_count(ch[-1], cfg.groups), ch[-1])
        self.out = nn.Conv2d(ch[-1], cfg.latent_channels, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        h = self.body(self.stem(self.unshuffle(x)))
        return self.out(nn.functional.silu(self.norm(h)))


class Decoder(nn.Module):
    """raw latent (B, C, h, w) -> x: (B, 3, h*f, w*f), roughly in [-1, 1]."""

    def __init__(self, cfg: AutoencoderConfig) -> None:
        super().__init__()
        ch = cfg.channels
        self.stem = nn.Conv2d(cfg.latent_channels, ch[-1], 3, padding=1)
        layers: list[nn.Module] = []
        for i in reversed(range(len(ch))):
            layers += [ResBlock(ch[i], ch[i], cfg.groups) for _ in range(cfg.blocks[i])]
            if i > 0:
                layers.append(Upsample(ch[i], ch[i - 1]))
        self.body = nn.Sequential(*layers)
        self.norm = nn.GroupNorm(group_count(ch[0], cfg.groups), ch[0])
        self.out = nn.Conv2d(ch[0], 3 * cfg.patch**2, 3, padding=1)
        self.shuffle = nn.PixelShuffle(cfg.patch)
        bg = torch.tensor(cfg.background, dtype=torch.float32) / 127.5 - 1.0
        nn.init.zeros_(self.out.weight)
        assert self.out.bias is not None
        with torch.no_grad():
            self.out.bias.copy_(bg.repeat_interleave(cfg.patch**2))

    def forward(self, z: Tensor) -> Tensor:
        h = self.body(self.stem(z))
        return self.shuffle(self.out(nn.functional.silu(self.norm(h))))


class Autoencoder(nn.Module):
    """Encoder + decoder + per-channel latent statistics (buffers ``latent_mean/std``)."""

    latent_mean: Tensor
    latent_std: Tensor

    def __init__(self, cfg: AutoencoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.register_buffer("latent_mean", torch.zeros(cfg.latent_channels))
        self.register_buffer("latent_std", torch.ones(cfg.latent_channels))

    def _stats(self) -> tuple[Tensor, Tensor]:
        return self.latent_mean[None, :, None, None], self.latent_std[None, :, None, None]

    def normalise(self, z_raw: Tensor) -> Tensor:
        mean, std = self._stats()
        return (z_raw - mean) / std

    def denormalise(self, z: Tensor) -> Tensor:
        mean, std = self._stats()
        return z * std + mean

    def encode_float(self, x: Tensor) -> Tensor:
        """x: (B, 3, H, W) float in [-1, 1] -> normalised latent (B, C, h, w)."""
        return self.normalise(self.encoder(x))

    def decode_float(self, z: Tensor) -> Tensor:
        """Normalised latent (B, C, h, w) -> (B, 3, H, W) float, roughly [-1, 1]."""
        return self.decoder(self.denormalise(z))

    def encode(self, frames: Tensor | np.ndarray) -> Tensor:
        """uint8 frames (B, H, W, 3) -> normalised latent (B, C, h, w) float32."""
        x = _as_tensor(frames, self.latent_mean.device)
        return self.encode_float(frames_to_float(x))

    def decode(self, z: Tensor) -> Tensor:
        """Normalised latent (B, C, h, w) -> uint8 frames (B, H, W, 3) on z's device."""
        return float_to_frames(self.decode_float(z))

    @torch.no_grad()
    def set_latent_stats(self, z_raw: Tensor) -> None:
        """Set the normalisation from raw latents (N, C, h, w)."""
        flat = z_raw.transpose(0, 1).reshape(z_raw.shape[1], -1).float()
        self.latent_mean.copy_(flat.mean(dim=1))
        self.latent_std.copy_(flat.std(dim=1).clamp_min(1e-6))


def _as_tensor(frames: Tensor | np.ndarray, device: torch.device) -> Tensor:
    if isinstance(frames, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(frames)).to(device)
    return frames.to(device)
