"""State -> one frame per camera: learned sprites on the board plane, seen through a
learned homography, over a learned background, composited far to near.

Every camera renders the same state (B, 2 + 2 N). Each has its own background image,
pixel -> board homography (:mod:`.homography`), and RGBA disc and agent sprites in
board-plane coordinates around each object's centre (so a side camera's puck, whose top
lies beyond its foot on the board plane, is a sprite reaching that far). Each output pixel
is mapped onto the board and every sprite sampled there (a spatial transformer, as in
Attend-Infer-Repeat). The objects are drawn in the order of their depth along the
camera's axis (the learned homography's own depth of each centre; the agent last among
equals), far to near, each "over" the ones behind. Nothing is hand-drawn: appearance,
geometry and order are all learned from each camera's frames.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from factory.model.object_set.composite import composite
from factory.model.object_set.config import SetRendererConfig
from factory.model.object_set.homography import apply, plane_depth
from factory.model.object_state.renderer import Sprite

FAR = 1e6
"""Board px given to pixels whose ray misses the board plane (no sprite reaches there)."""


class CameraRenderer(nn.Module):
    """``forward(state)`` (B, 2 + 2 N) -> frames (B, 3, H, W) float in [0, 1]."""

    def __init__(self, cfg: SetRendererConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h, w = cfg.image_size
        self.background = nn.Parameter(torch.ones(3, h, w))
        self.h_raw = nn.Parameter(torch.zeros(8))
        self.h_base: Tensor
        self.register_buffer("h_base", torch.eye(3))  # saved: the fitted start
        self.disc = Sprite(cfg.disc_extent, cfg.texels_per_unit)
        self.agent = Sprite(cfg.agent_extent, cfg.texels_per_unit)

    def homography(self) -> Tensor:
        """(3, 3) pixel -> board homography in unit coordinates."""
        delta = torch.cat([self.h_raw, self.h_raw.new_zeros(1)]) * self.cfg.homography_step
        return self.h_base + delta.reshape(3, 3)

    @torch.no_grad()
    def set_homography(self, g: np.ndarray | Tensor) -> None:
        """Start from homography ``g`` (3, 3) (normalised to ``g[2, 2] = 1``)."""
        g = torch.as_tensor(np.asarray(g), dtype=torch.float32)
        self.h_base.copy_(g / g[2, 2])
        self.h_raw.zero_()

    def depths(self, state: Tensor) -> Tensor:
        """(B, N + 1) depth of every disc, then the agent, along the camera's axis."""
        pts = torch.cat([state[:, 2:].unflatten(1, (-1, 2)), state[:, None, :2]], dim=1)
        return plane_depth(self.homography(), pts / (self.cfg.board / 2) - 1)

    def forward(self, state: Tensor) -> Tensor:
        b = state.shape[0]
        g = self.homography()
        discs = state[:, 2:].unflatten(1, (-1, 2))  # (B, N, 2)
        n = discs.shape[1]
        # nearness: each object's rank from the camera (0: the nearest), the agent first
        # among equals (drawn over discs at its depth)
        depth = self.depths(state).detach()
        order = torch.argsort(torch.cat([depth[:, n:], depth[:, :n]], 1), dim=1, stable=True)
        rank = torch.empty_like(order).scatter_(
            1, order, torch.arange(n + 1, device=state.device).expand(b, -1).contiguous()
        )  # (B, 1 + N): the agent, then the discs
        entries = [
            self._patches(self.disc, discs, g, rank[:, 1:]),
            self._patches(self.agent, state[:, None, :2], g, rank[:, :1]),
        ]
        pixel, near, rgb, alpha = (torch.cat(parts) for parts in zip(*entries, strict=True))
        return composite(self.background, b, pixel, near, rgb, alpha).clamp(0.0, 1.0)

    def _patches(
        self, sprite: Sprite, centres: Tensor, g: Tensor, rank: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The entries of each object's patch at centres (B, M, 2) board px: its sprite
        sampled in a square of pixels around its image position (the sprite's largest
        footprint anywhere on the board). Returns, for the E entries inside the frame,
        the flat pixel (E,), the object's ``rank`` (B, M) (E,), rgb (E, 3), alpha (E,)."""
        h, w = self.cfg.image_size
        half = self.cfg.board / 2
        with torch.no_grad():
            size = self._patch_size(sprite.extent, g)
            pix, _ = apply(torch.linalg.inv(g), centres / half - 1)  # unit coordinates
            corner = ((pix + 1) / 2 * torch.tensor([w, h], device=g.device) - size / 2).round()
            steps = torch.arange(size, device=g.device)
            cols = (corner[..., 0, None, None].long() + steps[None, :]).expand(-1, -1, size, -1)
            rows = (corner[..., 1, None, None].long() + steps[:, None]).expand(-1, -1, -1, size)
            inside = (cols >= 0) & (cols < w) & (rows >= 0) & (rows < h)  # (B, M, P, P)
        unit = torch.stack([(cols + 0.5) / w, (rows + 0.5) / h], dim=-1) * 2 - 1
        board, depth = apply(g, unit[inside])  # (E, 2)
        board = torch.where((depth > 0)[..., None], (board + 1) * half, FAR)
        owner = inside.nonzero()[:, :2]  # (E, 2): scene, object
        local = board - centres[owner[:, 0], owner[:, 1]]
        rgb, alpha = sprite.sample(local[None, None])  # (1, 3, 1, E), (1, 1, 1, E)
        pixel = owner[:, 0] * (h * w) + rows[inside] * w + cols[inside]
        near = rank[owner[:, 0], owner[:, 1]]
        return pixel, near, rgb[0, :, 0].T, alpha[0, 0, 0]

    def _patch_size(self, extent: float, g: Tensor) -> int:
        """Pixels (P) a square patch needs to hold a sprite of ``extent`` anywhere on the
        board: its largest projected width or height at the board's corners, plus 2."""
        h, w = self.cfg.image_size
        half, board = self.cfg.board / 2, self.cfg.board
        corners = torch.tensor([[0.0, 0.0], [board, 0.0], [0.0, board], [board, board]])
        signs = torch.tensor([[-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0], [1.0, 1.0]])
        square = corners[:, None] + extent * signs[None]  # (4, 4, 2)
        pix, _ = apply(torch.linalg.inv(g).cpu(), square / half - 1)
        span = (pix.amax(1) - pix.amin(1)) / 2 * torch.tensor([w, h])
        return min(math.ceil(float(span.max())) + 2, max(h, w))

    def binary(self) -> Tensor:
        """The opacity prior: mean alpha (1 - alpha) over both sprites' texels."""
        alphas = [torch.sigmoid(s.alpha) for s in (self.disc, self.agent)]
        return torch.stack([(a * (1 - a)).mean() for a in alphas]).sum()


class SetRenderer(nn.Module):
    """One :class:`CameraRenderer` per name in ``cfg.cameras``, all rendering one state."""

    def __init__(self, cfg: SetRendererConfig) -> None:
        super().__init__()
        if not cfg.cameras:
            raise ValueError("the object-set renderer needs at least one camera")
        self.cfg = cfg
        self.cameras = nn.ModuleDict({name: CameraRenderer(cfg) for name in cfg.cameras})

    def camera(self, name: str) -> CameraRenderer:
        cam = self.cameras[name]
        assert isinstance(cam, CameraRenderer)
        return cam

    def forward(self, state: Tensor, camera: str | None = None) -> Tensor:
        """(B, S) -> (B, 3, H, W) frames of ``camera`` (default: the main one)."""
        return self.camera(camera or self.cfg.cameras[0])(state)

    def render_uint8(self, state: Tensor) -> dict[str, Tensor]:
        """(B, S) -> every camera's (B, H, W, 3) uint8 frames, by name."""
        return {name: _uint8(self.camera(name)(state)) for name in self.cfg.cameras}

    def loss(
        self, state: Tensor, frames: dict[str, Tensor], progress: float = 1.0
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """MSE against each camera's frames (B, 3, H, W) in [0, 1] (summed over cameras),
        plus the opacity prior, which ramps in over the second half of training
        (``progress`` in [0, 1]); logs each camera's PSNR."""
        loss = state.new_zeros(())
        logs: dict[str, Tensor] = {}
        ramp = min(max(2.0 * progress - 1.0, 0.0), 1.0)
        for name, target in frames.items():
            cam = self.camera(name)
            mse = ((cam(state) - target) ** 2).mean()
            loss = loss + mse + self.cfg.binary_weight * ramp * cam.binary()
            logs[f"psnr_{name}"] = -10 * torch.log10(mse.detach())
        return loss, logs


def _uint8(img: Tensor) -> Tensor:
    """(B, 3, H, W) in [0, 1] -> (B, H, W, 3) uint8."""
    return (img * 255.0).round().to(torch.uint8).permute(0, 2, 3, 1)
