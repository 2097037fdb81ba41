"""State probe: a small CNN that reads the task state off a frame.

frame (B, H, W, 3) uint8 -> (agent x, agent y, block x, block y, sin angle, cos angle),
positions divided by ``position_scale`` (the PushT board is 512 px). It is trained on
ground-truth frames and read on generated ones.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from factory.model.config import ProbeConfig
from factory.model.layers import coord_grid, frames_to_float

N_OUTPUTS = 6


class StateProbe(nn.Module):
    """CoordConv CNN with spatial soft-argmax keypoints, then an MLP to 6 outputs."""

    def __init__(self, cfg: ProbeConfig) -> None:
        super().__init__()
        self.cfg = cfg
        layers: list[nn.Module] = []
        c_prev = 5
        for i, c in enumerate(cfg.channels):
            stride = 2 if i < cfg.downsample else 1
            layers += [nn.Conv2d(c_prev, c, 3, stride=stride, padding=1), nn.SiLU()]
            c_prev = c
        self.convs = nn.Sequential(*layers)
        self.heat = nn.Conv2d(c_prev, cfg.keypoints, 1)
        self.mlp = nn.Sequential(
            nn.Linear(2 * cfg.keypoints + c_prev, cfg.hidden),
            nn.SiLU(),
            nn.Linear(cfg.hidden, cfg.hidden),
            nn.SiLU(),
            nn.Linear(cfg.hidden, N_OUTPUTS),
        )

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, 3, H, W) float in [-1, 1] -> (B, 6) normalised targets."""
        b, _, h, w = x.shape
        feats = self.convs(torch.cat([x, coord_grid(b, h, w, x.device, x.dtype)], dim=1))
        fh, fw = feats.shape[-2:]
        grid = coord_grid(b, fh, fw, x.device, x.dtype).flatten(2)  # (B, 2, P)
        attn = torch.softmax(self.heat(feats).flatten(2), dim=-1)  # (B, n, P)
        xy = torch.einsum("bnp,bcp->bnc", attn, grid).flatten(1)
        return self.mlp(torch.cat([xy, feats.mean(dim=(2, 3))], dim=1))

    def targets(self, agent_xy: Tensor, block_pose: Tensor) -> Tensor:
        """Training targets (B, 6) from agent_xy (B, 2) and block_pose (B, 3) [x, y, angle]."""
        s = self.cfg.position_scale
        ang = block_pose[:, 2:3].float()
        return torch.cat(
            [agent_xy.float() / s, block_pose[:, :2].float() / s, torch.sin(ang), torch.cos(ang)],
            dim=1,
        )

    def decode_outputs(self, out: Tensor) -> tuple[Tensor, Tensor]:
        """(B, 6) -> agent_xy (B, 2) px, block_pose (B, 3) [x px, y px, angle in (-pi, pi]]."""
        s = self.cfg.position_scale
        angle = torch.atan2(out[:, 4], out[:, 5])
        angle = torch.where(angle <= -torch.pi, angle + 2 * torch.pi, angle)
        return out[:, :2] * s, torch.cat([out[:, 2:4] * s, angle[:, None]], dim=1)

    @torch.no_grad()
    def predict(self, frames: Tensor | np.ndarray) -> tuple[Tensor, Tensor]:
        """uint8 frames (B, H, W, 3) -> agent_xy (B, 2), block_pose (B, 3), float32."""
        dev = next(self.parameters()).device
        x = (
            torch.from_numpy(np.ascontiguousarray(frames))
            if isinstance(frames, np.ndarray)
            else frames
        )
        return self.decode_outputs(self(frames_to_float(x.to(dev))))
