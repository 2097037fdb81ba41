"""Plane-to-image geometry of a camera: homographies, their fit, and correspondences.

Coordinates are *unit* coordinates in [-1, 1]: a board point ``p`` px is ``p / (board / 2)
- 1``; a pixel centre (col, row) of a W x H image is ``((col + 0.5) / W, (row + 0.5) / H) *
2 - 1`` (so for a top view that is the board resized, pixel -> board is the identity).
A homography ``G`` (3, 3) maps a pixel to the board plane: ``(x, y, w) = G (u, v, 1)``, the
board point ``(x / w, y / w)``; ``w`` is the point's depth along the camera's axis, up to
one scale (:func:`plane_depth`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def pixel_grid(h: int, w: int) -> Tensor:
    """(H, W, 2) unit coordinates (u, v) of every pixel centre."""
    v = (torch.arange(h, dtype=torch.float32) + 0.5) / h * 2 - 1
    u = (torch.arange(w, dtype=torch.float32) + 0.5) / w * 2 - 1
    gv, gu = torch.meshgrid(v, u, indexing="ij")
    return torch.stack([gu, gv], dim=-1)


def apply(g: Tensor, points: Tensor) -> tuple[Tensor, Tensor]:
    """Points (..., 2) through ``g`` (3, 3) -> (mapped (..., 2), w (...)), in float32 even
    under autocast (bfloat16 would misplace a pixel by about a board px)."""
    with torch.autocast(points.device.type, enabled=False):
        q = points.float() @ g[:, :2].float().T + g[:, 2].float()
    w = q[..., 2]
    safe = torch.where(w.abs() < 1e-9, torch.full_like(w, 1e-9), w)
    return q[..., :2] / safe[..., None], w


def plane_depth(g: Tensor, board_points: Tensor) -> Tensor:
    """Depth (...) of board points (..., 2) (unit coordinates) seen by the camera whose
    pixel -> board homography is ``g``: the third coordinate of ``g^-1 (p, 1)``, signed so
    that the board's centre is in front (larger: farther)."""
    h = torch.linalg.inv(g)
    w = board_points @ h[2, :2] + h[2, 2]
    return w * torch.sign(h[2, 2]).detach()


def fit_homography(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The homography (3, 3), ``g[2, 2] = 1``, mapping points src (M, 2) to dst (M, 2)
    (unit coordinates, M >= 4) in least squares (the direct linear transform)."""
    u, v = src[:, 0], src[:, 1]
    x, y = dst[:, 0], dst[:, 1]
    one, zero = np.ones_like(u), np.zeros_like(u)
    rows_x = np.stack([u, v, one, zero, zero, zero, -x * u, -x * v, -x], axis=1)
    rows_y = np.stack([zero, zero, zero, u, v, one, -y * u, -y * v, -y], axis=1)
    _, _, vt = np.linalg.svd(np.concatenate([rows_x, rows_y]))
    g = vt[-1].reshape(3, 3)
    return g / g[2, 2]


def robust_homography(src: np.ndarray, dst: np.ndarray, keep: float = 0.8) -> np.ndarray:
    """:func:`fit_homography`, refitted twice on the ``keep`` fraction of best-fitting
    pairs (outliers: correspondences spoiled by occlusion)."""
    g = fit_homography(src, dst)
    for _ in range(2):
        q = np.c_[src, np.ones(len(src))] @ g.T
        err = np.linalg.norm(q[:, :2] / q[:, 2:] - dst, axis=1)
        best = np.argsort(err)[: max(4, int(keep * len(src)))]
        g = fit_homography(src[best], dst[best])
    return g


def moved_blob_centres(
    before: np.ndarray, after: np.ndarray, background: np.ndarray, threshold: float = 40.0
) -> tuple[np.ndarray, np.ndarray]:
    """Where a lone moving object went, in frame pairs before, after (M, H, W, 3) uint8
    over ``background`` (H, W, 3) uint8: the centroid (unit coordinates) of the pixels
    that changed and now differ from the background (its new place, not the one it left).

    Returns centres (M, 2) and whether each pair had at least 3 such pixels (M,) bool."""
    a = after.astype(np.int32)
    changed = np.abs(a - before.astype(np.int32)).sum(-1) > threshold
    differ = np.abs(a - background.astype(np.int32)).sum(-1)
    weight = np.where(changed & (differ > threshold), differ, 0).astype(np.float64)
    h, w = weight.shape[1:]
    grid = pixel_grid(h, w).numpy().astype(np.float64)
    total = weight.sum(axis=(1, 2))
    centre = np.einsum("mhw,hwc->mc", weight, grid) / np.maximum(total, 1e-9)[:, None]
    return centre, (weight > 0).sum(axis=(1, 2)) >= 3


def vertical_lift(g: np.ndarray, eps: float = 1e-9) -> np.ndarray:
    """How a unit of height moves the camera whose pixel -> board homography is ``g``
    (3, 3): the column (3,) that, added ``h`` times to the last column of its board ->
    pixel homography ``g^-1`` (as given, unnormalised), maps the plane ``h`` board units
    (``h`` board / 2 px) above the board, up being the camera's side of it. Zeros when
    ``g`` shows no perspective (a camera looking straight down at the board, or an affine
    one): then no pinhole fits it.

    A pinhole ``g^-1 = s K [r1 r2 t]`` with square pixels and its principal point at the
    image centre, ``K = diag(f, f, 1)``: ``r1`` and ``r2`` orthonormal give ``f`` (least
    squares over both conditions), and the lift is ``s K (r1 x r2)``, the vertical's
    vanishing point, signed so that the camera's centre lies above the board. A start for
    a learned lift, not a calibration: a principal point elsewhere tilts it."""
    to_pixel = np.linalg.inv(np.asarray(g, np.float64))
    sign = 1.0 if to_pixel[2, 2] > 0 else -1.0  # the board's centre in front: t_z > 0
    a, b, c = (sign * to_pixel[:, k] for k in range(3))
    p = np.array([a[0] * b[0] + a[1] * b[1], a[:2] @ a[:2] - b[:2] @ b[:2]])
    q = np.array([a[2] * b[2], a[2] ** 2 - b[2] ** 2])
    inv_f2 = -float(p @ q) / max(float(p @ p), eps)  # 1 / f^2 from p / f^2 + q = 0
    if inv_f2 <= eps:
        return np.zeros(3)
    k_inv = np.array([np.sqrt(inv_f2), np.sqrt(inv_f2), 1.0])
    r1, r2, t = k_inv * a, k_inv * b, k_inv * c
    scale = np.sqrt(np.linalg.norm(r1) * np.linalg.norm(r2))  # s
    r3 = np.cross(r1 / np.linalg.norm(r1), r2 / np.linalg.norm(r2))
    if r3 @ t > 0:  # the camera's centre -R^T t must lie at positive height
        r3 = -r3
    return sign * scale * r3 / k_inv
