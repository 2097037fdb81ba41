"""Differentiable "over" compositing of sparse RGBA patches in a depth order.

Every object contributes a patch of pixels; a pixel's colour is
``sum_k c_k a_k prod_{j nearer than k} (1 - a_j) + background prod_j (1 - a_j)``. The
entries of all patches are sorted by (pixel, nearness) once, and the products come from a
segmented cumulative sum of ``log(1 - a)``, so the cost grows with the patches' pixels,
not with objects times the frame.
"""

from __future__ import annotations

import torch
from torch import Tensor

MAX_ALPHA = 1.0 - 1e-6  # keeps log(1 - a) finite


def composite(
    background: Tensor, batch: int, pixel: Tensor, nearness: Tensor, rgb: Tensor, alpha: Tensor
) -> Tensor:
    """Composite E patch entries over a background (3, H, W) -> ``batch`` frames
    (B, 3, H, W).

    ``pixel`` (E,) long is each entry's flat index into the batch's pixels (``b H W +
    row W + col``), ``nearness`` (E,) long its object's rank from the camera (0: the
    nearest; unique per pixel), ``rgb`` (E, 3) and ``alpha`` (E,) its colour and opacity.
    """
    _, h, w = background.shape
    b = batch
    order = torch.argsort(pixel * (int(nearness.max()) + 1) + nearness) if len(pixel) else pixel
    pixel, rgb = pixel[order], rgb[order]
    a = alpha[order].clamp(0.0, MAX_ALPHA)
    log_t = torch.log1p(-a).double()
    cum = torch.cumsum(log_t, 0) - log_t  # exclusive, over all entries
    start = torch.ones_like(pixel, dtype=torch.bool)
    start[1:] = pixel[1:] != pixel[:-1]
    first = torch.cumsum(start.long(), 0) - 1  # each entry's segment
    seg_start = cum[start]  # (G,)
    weight = a * torch.exp(cum - seg_start[first]).to(a.dtype)  # a times what lies in front
    flat = background.flatten(1).T.repeat(b, 1)  # (B H W, 3)
    trans = torch.zeros(b * h * w, dtype=log_t.dtype, device=a.device)
    trans = trans.index_add(0, pixel, log_t)
    colour = flat * torch.exp(trans).to(a.dtype)[:, None]
    colour = colour.index_add(0, pixel, weight[:, None] * rgb)
    return colour.reshape(b, h, w, 3).permute(0, 3, 1, 2)
