"""Small building blocks shared by the autoencoder, dynamics model and probe."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def group_count(channels: int, groups: int) -> int:
    """The largest divisor of ``channels`` that is <= ``groups``."""
    g = max(1, min(groups, channels))
    while channels % g:
        g -= 1
    return g


class ResBlock(nn.Module):
    """GroupNorm-SiLU-conv residual block, optionally modulated by an embedding (AdaGN).

    x: (B, C_in, H, W); emb: (B, emb_dim) or None -> (B, C_out, H, W). With an embedding,
    the second norm is scaled and shifted: h = GN(h) * (1 + scale) + shift.
    """

    def __init__(self, c_in: int, c_out: int, groups: int, emb_dim: int = 0) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(group_count(c_in, groups), c_in)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm2 = nn.GroupNorm(group_count(c_out, groups), c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.emb = nn.Linear(emb_dim, 2 * c_out) if emb_dim > 0 else None
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()
        nn.init.zeros_(self.conv2.weight)
        assert self.conv2.bias is not None
        nn.init.zeros_(self.conv2.bias)

    def forward(self, x: Tensor, emb: Tensor | None = None) -> Tensor:
        h = self.conv1(nn.functional.silu(self.norm1(x)))
        h = self.norm2(h)
        if self.emb is not None and emb is not None:
            scale, shift = self.emb(emb)[:, :, None, None].chunk(2, dim=1)
            h = h * (1.0 + scale) + shift
        h = self.conv2(nn.functional.silu(h))
        return self.skip(x) + h


class Downsample(nn.Module):
    """Stride-2 3x3 conv: (B, C_in, H, W) -> (B, C_out, H/2, W/2)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, stride=2, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class Upsample(nn.Module):
    """Nearest 2x upsample then 3x3 conv: (B, C_in, H, W) -> (B, C_out, 2H, 2W)."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(nn.functional.interpolate(x, scale_factor=2.0, mode="nearest"))


def sinusoidal_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """Sinusoidal features of a scalar per sample: t (B,) -> (B, dim)."""
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(half, device=t.device, dtype=torch.float32) / half
    )
    args = t.float()[:, None] * freqs[None] * 100.0
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=1)
    return emb


def coord_grid(batch: int, h: int, w: int, device: torch.device, dtype: torch.dtype) -> Tensor:
    """Coordinate channels in [-1, 1]: (B, 2, h, w) (x then y)."""
    ys = torch.linspace(-1.0, 1.0, h, device=device, dtype=dtype)
    xs = torch.linspace(-1.0, 1.0, w, device=device, dtype=dtype)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([gx, gy])[None].expand(batch, 2, h, w)


def frames_to_float(frames: Tensor) -> Tensor:
    """uint8 frames (B, H, W, 3) -> float (B, 3, H, W) in [-1, 1]."""
    return frames.permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def float_to_frames(x: Tensor) -> Tensor:
    """float (B, 3, H, W) in [-1, 1] -> uint8 frames (B, H, W, 3), rounded and clamped."""
    return x.float().add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1)
