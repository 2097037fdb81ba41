"""Object-frame transforms shared by the dynamics, renderer and reader.

Shapes: ``(..., 2)`` points or vectors, ``(...)`` angles in radians.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def wrap_angle(a: Tensor) -> Tensor:
    """Angles wrapped to (-pi, pi]."""
    return a - 2 * math.pi * torch.ceil((a - math.pi) / (2 * math.pi))


def rotate(v: Tensor, angle: Tensor) -> Tensor:
    """Rotate vectors ``v`` (..., 2) by ``angle`` (...) counter-clockwise."""
    c, s = torch.cos(angle), torch.sin(angle)
    x, y = v[..., 0], v[..., 1]
    return torch.stack([c * x - s * y, s * x + c * y], dim=-1)


def to_frame(points: Tensor, origin: Tensor, angle: Tensor) -> Tensor:
    """World points (..., 2) in the frame at ``origin`` (..., 2) turned by ``angle`` (...)."""
    return rotate(points - origin, -angle)
