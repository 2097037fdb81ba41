"""Motion priors for the latent dynamics: warp the last latent by a predicted flow.

Pure functions. A flow is given in latent cells per step, (B, 2, h, w) with x then y.
"""

from __future__ import annotations

import torch
from torch import Tensor


def bounded_flow(raw: Tensor, flow_max: float) -> Tensor:
    """Raw network output (B, 2, h, w) -> flow in cells, |flow| < flow_max (0 at 0)."""
    return flow_max * torch.tanh(raw / flow_max)


def warp(z: Tensor, flow: Tensor) -> Tensor:
    """Backward-warp latents z (B, C, h, w) by flow (B, 2, h, w) in cells: the output at
    cell p samples z at p - flow(p) (bilinear, border padding). Zero flow is the identity."""
    h, w = z.shape[-2:]
    ys = torch.arange(h, device=z.device, dtype=z.dtype)
    xs = torch.arange(w, device=z.device, dtype=z.dtype)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    src_x = gx[None] - flow[:, 0]
    src_y = gy[None] - flow[:, 1]
    grid = torch.stack(
        [(2.0 * src_x + 1.0) / w - 1.0, (2.0 * src_y + 1.0) / h - 1.0], dim=-1
    )  # (B, h, w, 2) in align_corners=False coordinates
    return torch.nn.functional.grid_sample(
        z, grid, mode="bilinear", padding_mode="border", align_corners=False
    )
