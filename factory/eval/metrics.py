"""Pure metric functions (DESIGN §4). All take numpy arrays and return floats or arrays.

Frames are ``(..., H, W, 3) uint8``. PushT colours (gym-pusht's pygame renderer): the
T-block is LightSlateGray (fill about (143, 163, 184), outline (119, 136, 153)), the goal
LightGreen (144, 238, 144), the agent RoyalBlue (65, 105, 225), the background white.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def psnr(pred: np.ndarray, target: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB of uint8 images, averaged over all pixels."""
    mse = np.mean((pred.astype(np.float64) - target.astype(np.float64)) ** 2)
    return float(10.0 * np.log10(255.0**2 / max(mse, 1e-10)))


def ssim(pred: np.ndarray, target: np.ndarray, window: int = 7) -> float:
    """Mean structural similarity of uint8 RGB images ``(..., H, W, 3)``.

    Uniform ``window`` x ``window`` filter, constants of Wang et al. 2004 (as skimage's
    default), computed per channel and averaged.
    """
    x = _as_nchw(pred)
    y = _as_nchw(target)
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mu_x, mu_y = _box(x, window), _box(y, window)
    var_x = _box(x * x, window) - mu_x**2
    var_y = _box(y * y, window) - mu_y**2
    cov = _box(x * y, window) - mu_x * mu_y
    num = (2 * mu_x * mu_y + c1) * (2 * cov + c2)
    den = (mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2)
    return float((num / den).mean())


def _as_nchw(frames: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(frames)).to(torch.float64)
    t = t.reshape(-1, *t.shape[-3:])
    return t.permute(0, 3, 1, 2)


def _box(x: torch.Tensor, window: int) -> torch.Tensor:
    return F.avg_pool2d(x, window, stride=1)


def t_mask(frames: np.ndarray) -> np.ndarray:
    """T-block pixels ``(..., H, W)`` bool: slate grey, bluish but far less than the agent."""
    r, g, b = _channels(frames)
    blue_minus_red = b - r
    return (blue_minus_red > 15) & (blue_minus_red <= 90) & (b >= g) & (r < 225)


def agent_mask(frames: np.ndarray) -> np.ndarray:
    """Agent pixels ``(..., H, W)`` bool: strongly blue."""
    r, _, b = _channels(frames)
    return (b - r > 90) & (b > 150)


def goal_mask(frames: np.ndarray) -> np.ndarray:
    """Visible goal-region pixels ``(..., H, W)`` bool: light green."""
    r, g, b = _channels(frames)
    return (g - r > 40) & (g - b > 40)


def _channels(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    f = frames.astype(np.int16)
    return f[..., 0], f[..., 1], f[..., 2]


def iou(pred_mask: np.ndarray, true_mask: np.ndarray) -> float:
    """Intersection over union of two boolean masks; 1.0 when both are empty."""
    union = np.logical_or(pred_mask, true_mask).sum()
    if union == 0:
        return 1.0
    return float(np.logical_and(pred_mask, true_mask).sum() / union)


def mask_fraction(mask: np.ndarray) -> float:
    """Fraction of pixels set in a ``(..., H, W)`` mask."""
    return float(mask.mean())


def angle_error_deg(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Absolute wrapped angle difference in degrees, elementwise, in [0, 180]."""
    diff = np.angle(np.exp(1j * (np.asarray(pred) - np.asarray(target))))
    return np.degrees(np.abs(diff))


def position_error(pred: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Euclidean distance of ``(..., 2)`` points (same units as the input)."""
    return np.linalg.norm(np.asarray(pred) - np.asarray(target), axis=-1)


def block_pose_errors(block: np.ndarray, true_block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Position error (board px) and wrapped angle error (deg, in [0, 180]) of block poses
    ``(..., 3)`` (x, y board px, angle rad) against the truth: two ``(...)`` arrays."""
    block, true_block = np.asarray(block), np.asarray(true_block)
    return (
        position_error(block[..., :2], true_block[..., :2]),
        angle_error_deg(block[..., 2], true_block[..., 2]),
    )


def reader_errors(
    agent: np.ndarray,
    true_agent: np.ndarray,
    block: np.ndarray | None = None,
    true_block: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per-frame errors of a read state against the truth: the one definition every
    reader (probe, task head, object-state reader) is measured by.

    agent, true_agent: (N, D) robot positions (board px); block, true_block: (N, 3) block
    poses (x, y board px, angle rad). Returns ``agent_err_px`` (N,) Euclidean distance and,
    with the block, ``block_err_px`` (N,) its position's distance and ``angle_err_deg``
    (N,) the wrapped angle difference in [0, 180]. :func:`reader_errors_torch` is the same
    on tensors.
    """
    out = {"agent_err_px": position_error(agent, true_agent)}
    if block is not None and true_block is not None:
        out["block_err_px"], out["angle_err_deg"] = block_pose_errors(block, true_block)
    return out


def reader_errors_torch(
    agent: torch.Tensor,
    true_agent: torch.Tensor,
    block: torch.Tensor | None = None,
    true_block: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """:func:`reader_errors` on tensors (same shapes, keys and units), on their device and
    without a host copy (for per-step training logs)."""
    out = {"agent_err_px": (agent - true_agent).norm(dim=-1)}
    if block is not None and true_block is not None:
        out["block_err_px"] = (block[:, :2] - true_block[:, :2]).norm(dim=-1)
        diff = torch.remainder(block[:, 2] - true_block[:, 2] + torch.pi, 2 * torch.pi)
        out["angle_err_deg"] = torch.rad2deg((diff - torch.pi).abs())
    return out


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation of two 1-D arrays (nan when either is constant)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    xc, yc = x - x.mean(), y - y.mean()
    den = np.sqrt((xc**2).sum() * (yc**2).sum())
    return float((xc * yc).sum() / den) if den > 0 else float("nan")


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation, ties given their average rank."""
    return pearson(_ranks(np.asarray(x)), _ranks(np.asarray(y)))


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    for value in np.unique(x):
        tie = x == value
        ranks[tie] = ranks[tie].mean()
    return ranks


def mmrv(sim: np.ndarray, real: np.ndarray) -> float:
    """Mean maximum rank violation (SIMPLER): lower is better, 0 is a perfect ranking.

    MMRV = (1/N) sum_i max_j |r_i - r_j| * 1[(s_i > s_j) != (r_i > r_j)], strict ``>``.
    """
    s, r = np.asarray(sim, np.float64), np.asarray(real, np.float64)
    violated = (s[:, None] > s[None, :]) != (r[:, None] > r[None, :])
    cost = np.abs(r[:, None] - r[None, :]) * violated
    return float(cost.max(axis=1).mean()) if len(s) else float("nan")
