"""Differentiable "over" compositing of sparse RGBA patches in a depth order.

Every object contributes a patch of pixels; a pixel's colour is
``sum_k c_k a_k prod_{j nearer than k} (1 - a_j) + background prod_j (1 - a_j)``. The
entries of all patches are sorted by (pixel, nearness) once, and the products come from a
segmented cumulative sum of ``log(1 - a)``, so the cost grows with the patches' pixels,
not with objects times the frame.

With ``supersample`` S the entries lie on a grid S times finer than the frame, and each
frame pixel is the mean of its S x S samples (a box filter). The background is the same
in every sample of a pixel, so that mean is ``background (1 - mean over the samples of
(1 - transmittance)) + mean of the entries' weighted colours``: only the covered samples
are ever visited, and no frame at the fine resolution is built.
"""

from __future__ import annotations

import torch
from torch import Tensor

MAX_ALPHA = 1.0 - 1e-6  # keeps log(1 - a) finite


def composite(
    background: Tensor,
    batch: int,
    pixel: Tensor,
    nearness: Tensor,
    rgb: Tensor,
    alpha: Tensor,
    supersample: int = 1,
) -> Tensor:
    """Composite E patch entries over a background (3, H, W) -> ``batch`` frames
    (B, 3, H, W), each pixel the box filter of its ``supersample``^2 samples.

    ``pixel`` (E,) long is each entry's flat index into the batch's samples (``b H' W' +
    row W' + col`` with ``H' = S H``, ``W' = S W``), ``nearness`` (E,) long its object's
    rank from the camera (0: the nearest; unique per sample), ``rgb`` (E, 3) and
    ``alpha`` (E,) its colour and opacity.
    """
    _, h, w = background.shape
    ss = supersample
    order = torch.argsort(pixel * (int(nearness.max()) + 1) + nearness) if len(pixel) else pixel
    pixel, rgb = pixel[order], rgb[order]
    a = alpha[order].clamp(0.0, MAX_ALPHA)
    log_t = torch.log1p(-a).double()
    cum = torch.cumsum(log_t, 0) - log_t  # exclusive, over all entries
    start = torch.ones_like(pixel, dtype=torch.bool)
    start[1:] = pixel[1:] != pixel[:-1]
    first = torch.cumsum(start.long(), 0) - 1  # each entry's segment (covered sample)
    seg_start = cum[start]  # (G,)
    weight = a * torch.exp(cum - seg_start[first]).to(a.dtype)  # a times what lies in front
    seg_log_t = torch.zeros_like(seg_start).index_add(0, first, log_t)  # (G,)
    covered = -torch.expm1(seg_log_t).to(a.dtype)  # 1 - transmittance of each sample
    out = _frame_index(pixel, h, w, ss)  # (E,) each entry's frame pixel
    n = batch * h * w
    cover = a.new_zeros(n).index_add(0, out[start], covered) / (ss * ss)
    colour = background.flatten(1).T.repeat(batch, 1) * (1.0 - cover)[:, None]
    colour = colour.index_add(0, out, weight[:, None] * rgb / (ss * ss))
    return colour.reshape(batch, h, w, 3).permute(0, 3, 1, 2)


def _frame_index(sample: Tensor, h: int, w: int, ss: int) -> Tensor:
    """Flat sample indices (E,) on the S-times finer grid -> flat frame pixels (E,)."""
    if ss == 1:
        return sample
    fine_w, per_frame = w * ss, h * w * ss * ss
    b, rest = sample // per_frame, sample % per_frame
    row, col = rest // fine_w // ss, rest % fine_w // ss
    return b * (h * w) + row * w + col
