"""Frame -> state: a CNN's estimate, then the learned renderer fitted to the frame.

The CNN regresses the state; ``refine`` then moves that estimate, by gradient descent on
the photometric error between the renderer's frame and the observed one (coarse to fine),
to the state the renderer says made the frame. Both parts are learned; no simulator runs.
"""

from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from factory.eval.metrics import reader_errors_torch
from factory.model.object_state.config import ReaderConfig
from factory.model.object_state.geometry import wrap_angle
from factory.model.object_state.renderer import SpriteRenderer

ANGLE_PX = 50.0
"""Radians to board px in the fit (an arc at 50 px): positions and angle move alike."""


class StateReader(nn.Module):
    """``forward(frames)`` (B, 3, H, W) in [0, 1] -> state (B, 5) (px, px, px, px, rad)."""

    def __init__(self, cfg: ReaderConfig, board: float = 512.0) -> None:
        super().__init__()
        self.cfg = cfg
        self.board = board
        w = cfg.width
        chans = [5, w, 2 * w, 2 * w, 4 * w, 4 * w]
        convs: list[nn.Module] = []
        for cin, cout in itertools.pairwise(chans):
            convs += [
                nn.Conv2d(cin, cout, 3, stride=2, padding=1),
                nn.GroupNorm(8, cout),
                nn.SiLU(),
            ]
        self.convs = nn.Sequential(*convs)
        h, wd = cfg.image_size
        cells = math.ceil(h / 32) * math.ceil(wd / 32)
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(4 * w * cells, 256), nn.SiLU(), nn.Linear(256, 6)
        )
        ys = torch.linspace(-1, 1, h)[:, None].expand(h, wd)
        xs = torch.linspace(-1, 1, wd)[None].expand(h, wd)
        self.coords: Tensor
        self.register_buffer("coords", torch.stack([xs, ys])[None], persistent=False)

    def raw(self, frames: Tensor) -> Tensor:
        """(B, 3, H, W) -> (B, 6): agent xy, block xy in [0, 1] board units, cos, sin."""
        x = torch.cat([frames * 2 - 1, self.coords.expand(frames.shape[0], -1, -1, -1)], 1)
        return self.head(self.convs(x))

    def forward(self, frames: Tensor) -> Tensor:
        out = self.raw(frames)
        xy = out[:, :4] * self.board
        return torch.cat([xy, torch.atan2(out[:, 5], out[:, 4])[:, None]], dim=-1)

    def loss(self, frames: Tensor, states: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """MSE on positions (board units) and the angle's cos/sin; logs errors in px/deg."""
        out = self.raw(frames)
        target = torch.cat(
            [states[:, :4] / self.board, torch.cos(states[:, 4:5]), torch.sin(states[:, 4:5])], 1
        )
        scale = torch.tensor([1, 1, 1, 1, 0.1, 0.1], device=frames.device) * self.board / 50
        loss = (((out - target) * scale) ** 2).mean()
        with torch.no_grad():
            read = torch.cat([out[:, :4] * self.board, torch.atan2(out[:, 5:], out[:, 4:5])], 1)
            err = reader_errors_torch(read[:, :2], states[:, :2], read[:, 2:], states[:, 2:5])
        return loss, {
            "agent_px": err["agent_err_px"].mean(),
            "block_px": err["block_err_px"].mean(),
            "angle_deg": err["angle_err_deg"].mean(),
        }


def refine(renderer: SpriteRenderer, frames: Tensor, init: Tensor, steps: int, lr: float) -> Tensor:
    """Fit the state (B, 5) so that ``renderer(state)`` matches frames (B, 3, H, W).

    Adam on (x, y, x, y, 50 * angle) from ``init``, its step size decaying from ``lr`` to a
    tenth (cosine); the first half of the steps renders with blurred textures (a wider
    basin), the second half sharp. Each row is fitted on its own.
    """
    if steps <= 0:
        return init
    with torch.inference_mode(False), torch.enable_grad():  # callers may be in either mode
        return _fit(renderer, frames.clone(), init.clone(), steps, lr)


def _fit(renderer: SpriteRenderer, frames: Tensor, init: Tensor, steps: int, lr: float) -> Tensor:
    scale = torch.tensor([1, 1, 1, 1, 1 / ANGLE_PX], device=init.device)
    frames = frames.detach()
    u = (init / scale).detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([u], lr=lr)
    for i in range(steps):
        opt.param_groups[0]["lr"] = lr * (0.1 + 0.45 * (1 + math.cos(math.pi * i / steps)))
        blur = 5 if i < steps // 2 else 1
        target = frames if blur == 1 else _blur(frames, 3)
        err = (renderer(u * scale, blur=blur) - target) ** 2
        (u.grad,) = torch.autograd.grad(err.flatten(1).mean(1).sum(), [u])
        opt.step()
    out = (u * scale).detach()
    return torch.cat([out[:, :4], wrap_angle(out[:, 4:5])], dim=-1)


def _blur(frames: Tensor, k: int) -> Tensor:
    return F.avg_pool2d(frames, k, stride=1, padding=k // 2, count_include_pad=False)
