"""Validation metrics of the training stages, on the definitions of ``factory.eval.metrics``.

frames: (B, H, W, 3) uint8 numpy or tensors. Masks are PushT's colour masks (T-block,
agent, goal); IoU pools the whole batch, as the fidelity evaluation does.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from factory.eval import metrics as em


def _np(x: np.ndarray | Tensor) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


def psnr(pred: np.ndarray | Tensor, target: np.ndarray | Tensor) -> float:
    """PSNR in dB of uint8 frames (B, H, W, 3) over all pixels."""
    return em.psnr(_np(pred), _np(target))


def t_iou(pred: np.ndarray | Tensor, target: np.ndarray | Tensor) -> float:
    """IoU of the T-block masks over the batch."""
    return em.iou(em.t_mask(_np(pred)), em.t_mask(_np(target)))


def agent_iou(pred: np.ndarray | Tensor, target: np.ndarray | Tensor) -> float:
    """IoU of the agent masks over the batch."""
    return em.iou(em.agent_mask(_np(pred)), em.agent_mask(_np(target)))


def t_fraction(frames: np.ndarray | Tensor) -> float:
    """Fraction of T-block pixels over the batch."""
    return em.mask_fraction(em.t_mask(_np(frames)))


@torch.no_grad()
def to_uint8(x: Tensor) -> np.ndarray:
    """float (B, 3, H, W) in [-1, 1] -> uint8 (B, H, W, 3) numpy."""
    u8 = x.float().add(1).mul(127.5).round().clamp(0, 255).byte()
    return u8.permute(0, 2, 3, 1).cpu().numpy()
