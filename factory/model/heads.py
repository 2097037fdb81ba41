"""Keypoint read-out heads on a latent: robot state and task state.

A head turns a latent (B, C, h, w) into a small vector: convolutions at the latent's
resolution make heatmaps whose spatial soft-argmax coordinates, with pooled features, go
through an MLP. The dynamics' state head (agent xy) and task head (PushT: block x, y,
sin, cos of its angle) are both this module.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from factory.model.layers import coord_grid


class KeypointHead(nn.Module):
    """(B, C, h, w) latent -> (B, out_dim) normalised read-out."""

    def __init__(self, in_channels: int, channels: int, keypoints: int, out_dim: int) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(in_channels + 2, channels, 3, padding=1),
            nn.SiLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.SiLU(),
        )
        self.heat = nn.Conv2d(channels, keypoints, 1)
        self.mlp = nn.Sequential(
            nn.Linear(2 * keypoints + channels, 128), nn.SiLU(), nn.Linear(128, out_dim)
        )

    def forward(self, z: Tensor) -> Tensor:
        b, _, h, w = z.shape
        grid = coord_grid(b, h, w, z.device, z.dtype)
        feats = self.convs(torch.cat([z, grid], dim=1))
        attn = torch.softmax(self.heat(feats).flatten(2), dim=-1)  # (B, n, h*w)
        xy = torch.einsum("bnp,bcp->bnc", attn, grid.flatten(2)).flatten(1)
        return self.mlp(torch.cat([xy, feats.mean(dim=(2, 3))], dim=1))


def pose_to_target(pose: Tensor, mean: Tensor, std: Tensor, angle: bool = True) -> Tensor:
    """Task pose (..., P) with the angle (rad) last -> head target (..., P + 1):
    normalised positions, then sin and cos of the angle; ``angle`` False: every number is
    a position -> (..., P), normalised."""
    if not angle:
        return (pose.float() - mean) / std
    pos = (pose[..., :-1].float() - mean) / std
    ang = pose[..., -1:].float()
    return torch.cat([pos, torch.sin(ang), torch.cos(ang)], dim=-1)


def target_to_pose(out: Tensor, mean: Tensor, std: Tensor, angle: bool = True) -> Tensor:
    """Inverse of :func:`pose_to_target`: (..., P + 1) -> (..., P), angle in [0, 2 pi)
    (``angle`` False: (..., P) -> (..., P))."""
    if not angle:
        return out.float() * std + mean
    pos = out[..., :-2].float() * std + mean
    ang = torch.atan2(out[..., -2], out[..., -1]).remainder(2.0 * math.pi)
    return torch.cat([pos, ang[..., None]], dim=-1)
