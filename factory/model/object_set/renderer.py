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
from factory.model.object_set.homography import apply, plane_depth, vertical_lift
from factory.model.object_state.renderer import Sprite

FAR = 1e6
"""Board px given to pixels whose ray misses the board plane (no sprite reaches there)."""

HEIGHT_STEP = 0.1
"""A learned layer height moves this many units of lift per unit of its raw parameter."""

KINDS = ("disc", "agent")


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
        self.disc = Sprite(cfg.disc_extent, cfg.texels_per_unit)  # the bottom layer
        self.agent = Sprite(cfg.agent_extent, cfg.texels_per_unit)
        upper = cfg.layers - 1
        self.disc_upper = nn.ModuleList(
            [Sprite(cfg.disc_extent, cfg.texels_per_unit) for _ in range(upper)]
        )
        self.agent_upper = nn.ModuleList(
            [Sprite(cfg.agent_extent, cfg.texels_per_unit) for _ in range(upper)]
        )
        if upper:
            self.lift_raw = nn.Parameter(torch.zeros(3))
        if upper and cfg.learn_heights:  # per kind (disc, agent) and layer, from 0 .. 1
            self.heights_raw = nn.Parameter(torch.zeros(len(KINDS), cfg.layers))

    def homography(self) -> Tensor:
        """(3, 3) pixel -> board homography in unit coordinates."""
        delta = torch.cat([self.h_raw, self.h_raw.new_zeros(1)]) * self.cfg.homography_step
        return self.h_base + delta.reshape(3, 3)

    def plane(self, height: float | Tensor) -> tuple[Tensor, Tensor]:
        """The (3, 3) pixel -> plane and plane -> pixel homographies of the plane
        ``height`` layer steps above the board (0: the board itself): the board's plane ->
        pixel map with ``height`` times the learned ``lift`` (the projection's third
        column) added to its last column, and its inverse."""
        g = self.homography()
        to_pixel = torch.linalg.inv(g)
        if isinstance(height, float) and height == 0.0:
            return g, to_pixel
        lift = self.lift_raw * self.cfg.homography_step
        zero = lift.new_zeros(3)
        to_pixel = to_pixel + height * torch.stack([zero, zero, lift], dim=1)
        return torch.linalg.inv(to_pixel), to_pixel

    def sprites(self, which: str) -> list[tuple[float | Tensor, Sprite]]:
        """(height, sprite) of every layer of the ``disc`` or ``agent`` sprite, bottom
        first; the heights are 0 .. 1 evenly (0 alone for a flat sprite), moved by their
        learned offsets with ``learn_heights``."""
        if which == "disc":
            bottom, upper = self.disc, self.disc_upper
        else:
            bottom, upper = self.agent, self.agent_upper
        layers = [bottom, *(s for s in upper if isinstance(s, Sprite))]
        top = max(len(layers) - 1, 1)
        if not (self.cfg.learn_heights and self.cfg.layers > 1):
            return [(k / top, sprite) for k, sprite in enumerate(layers)]
        raw = self.heights_raw[KINDS.index(which)] * HEIGHT_STEP
        return [(k / top + raw[k], sprite) for k, sprite in enumerate(layers)]

    @torch.no_grad()
    def set_homography(self, g: np.ndarray | Tensor) -> None:
        """Start from homography ``g`` (3, 3) (normalised to ``g[2, 2] = 1``)."""
        g = torch.as_tensor(np.asarray(g), dtype=torch.float32)
        self.h_base.copy_(g / g[2, 2])
        self.h_raw.zero_()

    @torch.no_grad()
    def start_lift(self) -> None:
        """Start the layers' lift ``cfg.lift_start`` board px up (toward the camera, as
        :func:`vertical_lift` finds it from the homography); a flat sprite has none."""
        if self.cfg.layers == 1:
            return
        lift = vertical_lift(self.homography().cpu().numpy()) * (
            self.cfg.lift_start / (self.cfg.board / 2)
        )
        self.lift_raw.copy_(torch.as_tensor(lift / self.cfg.homography_step))

    @torch.no_grad()
    def rise(self) -> Tensor:
        """() px: how far up the image the disc's top layer's plane shows the board's
        centre above its bottom layer's (negative: down)."""
        heights = [h for h, _ in self.sprites("disc")]
        rows = _centre_rows([self.plane(h)[1] for h in (heights[0], heights[-1])])
        return (rows[0] - rows[1]) / 2 * self.cfg.image_size[0]

    def layer_nearness(self, which: str) -> list[int]:
        """Per layer of the ``disc`` or ``agent`` sprite (bottom first), its nearness
        within the object (0: drawn over every other layer): with ``order_by_rise``, by
        how high up the image its plane shows the board's centre (ties: the higher index
        nearer), else by index, the top layer nearest."""
        return self._nearness([self.plane(h)[1] for h, _ in self.sprites(which)])

    def _nearness(self, to_pixel: list[Tensor]) -> list[int]:
        """:meth:`layer_nearness` of the layers whose (3, 3) plane -> pixel homographies
        are ``to_pixel`` (bottom first)."""
        n = len(to_pixel)
        if not self.cfg.order_by_rise or n == 1:
            return [n - 1 - k for k in range(n)]
        rows = _centre_rows(to_pixel).tolist()
        order = sorted(range(n), key=lambda k: (rows[k], -k))  # highest in the image first
        near = [0] * n
        for position, k in enumerate(order):
            near[k] = position
        return near

    def depths(self, state: Tensor) -> Tensor:
        """(B, N + 1) depth of every disc, then the agent, along the camera's axis."""
        pts = torch.cat([state[:, 2:].unflatten(1, (-1, 2)), state[:, None, :2]], dim=1)
        return plane_depth(self.homography(), pts / (self.cfg.board / 2) - 1)

    def forward(self, state: Tensor) -> Tensor:
        b = state.shape[0]
        discs = state[:, 2:].unflatten(1, (-1, 2))  # (B, N, 2)
        n, layers, ss = discs.shape[1], self.cfg.layers, self.cfg.supersample
        # nearness: each object's rank from the camera (0: the nearest), the agent first
        # among equals (drawn over discs at its depth); within an object its higher layers
        # are nearer (a camera looking down sees what is higher over what is lower:
        # layer_nearness)
        depth = self.depths(state).detach()
        order = torch.argsort(torch.cat([depth[:, n:], depth[:, :n]], 1), dim=1, stable=True)
        rank = torch.empty_like(order).scatter_(
            1, order, torch.arange(n + 1, device=state.device).expand(b, -1).contiguous()
        )  # (B, 1 + N): the agent, then the discs
        entries = []
        for which, centres, obj_rank in (
            ("disc", discs, rank[:, 1:]),
            ("agent", state[:, None, :2], rank[:, :1]),
        ):
            stack = [(sprite, *self.plane(height)) for height, sprite in self.sprites(which)]
            within = self._nearness([to_pixel for _, _, to_pixel in stack])
            for k, (sprite, g, to_pixel) in enumerate(stack):
                near = obj_rank * layers + within[k]
                entries.append(self._patches(sprite, centres, g, to_pixel, near))
        pixel, near, rgb, alpha = (torch.cat(parts) for parts in zip(*entries, strict=True))
        frames = composite(self.background, b, pixel, near, rgb, alpha, ss)
        return frames.clamp(0.0, 1.0)

    def _patches(
        self, sprite: Sprite, centres: Tensor, g: Tensor, to_pixel: Tensor, rank: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The entries of each object's patch at centres (B, M, 2) board px: its sprite
        sampled in a square of pixels around its image position (the sprite's largest
        footprint anywhere on the board), on the plane whose pixel -> plane homography is
        ``g`` (``to_pixel`` its inverse), at the composited resolution (``supersample``
        times the frame's). Returns, for the E entries, the flat pixel (E,), the object's
        ``rank`` (B, M) (E,), rgb (E, 3) and alpha (E,); an entry outside the frame has
        alpha 0 (and, without gradients, one too faint to change a pixel is dropped)."""
        h, w = (d * self.cfg.supersample for d in self.cfg.image_size)
        half = self.cfg.board / 2
        b, m = centres.shape[:2]
        with torch.no_grad():
            # without gradients, only the texels that can show matter (a smaller patch)
            extent = sprite.extent if torch.is_grad_enabled() else _reach(sprite)
            size = self._patch_size(extent, to_pixel)
            pix, _ = apply(to_pixel, centres / half - 1)  # unit coordinates
            corner = ((pix + 1) / 2 * torch.tensor([w, h], device=g.device) - size / 2).round()
            steps = torch.arange(size, device=g.device)
            cols = (corner[..., 0, None, None].long() + steps[None, :]).expand(-1, -1, size, -1)
            rows = (corner[..., 1, None, None].long() + steps[:, None]).expand(-1, -1, -1, size)
            inside = (cols >= 0) & (cols < w) & (rows >= 0) & (rows < h)  # (B, M, P, P)
            scene = torch.arange(b, device=g.device)[:, None, None, None]
            pixel = scene * (h * w) + rows.clamp(0, h - 1) * w + cols.clamp(0, w - 1)
        unit = torch.stack([(cols + 0.5) / w, (rows + 0.5) / h], dim=-1) * 2 - 1
        board, depth = apply(g, unit.reshape(-1, 2))  # (B M P P, 2)
        board = torch.where((depth > 0)[..., None], (board + 1) * half, FAR)
        local = board.reshape(b, m, -1, 2) - centres[:, :, None]  # (B, M, P P, 2)
        rgb, alpha = sprite.sample(local.reshape(1, 1, -1, 2))  # (1, 3, 1, E), (1, 1, 1, E)
        alpha = alpha[0, 0, 0] * inside.reshape(-1)
        near = rank[:, :, None].expand(b, m, size * size).reshape(-1)
        rgb, pixel = rgb[0, :, 0].T, pixel.reshape(-1)
        if not torch.is_grad_enabled():
            shown = (alpha > 1e-4).nonzero()[:, 0]
            pixel, near, rgb, alpha = pixel[shown], near[shown], rgb[shown], alpha[shown]
        return pixel, near, rgb, alpha

    def _patch_size(self, extent: float, to_pixel: Tensor) -> int:
        """Pixels (P) a square patch needs to hold a sprite of ``extent`` anywhere on the
        board (``to_pixel``: the plane -> pixel homography): its largest projected width or
        height at the board's corners, plus 2 (at the composited resolution)."""
        h, w = (d * self.cfg.supersample for d in self.cfg.image_size)
        half, board = self.cfg.board / 2, self.cfg.board
        corners = torch.tensor([[0.0, 0.0], [board, 0.0], [0.0, board], [board, board]])
        signs = torch.tensor([[-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0], [1.0, 1.0]])
        square = corners[:, None] + extent * signs[None]  # (4, 4, 2)
        pix, _ = apply(to_pixel.cpu(), square / half - 1)
        span = (pix.amax(1) - pix.amin(1)) / 2 * torch.tensor([w, h])
        return min(math.ceil(float(span.max())) + 2, max(h, w))

    def binary(self) -> Tensor:
        """The opacity prior: mean alpha (1 - alpha) over both sprites' texels."""
        alphas = [torch.sigmoid(s.alpha) for w in KINDS for _, s in self.sprites(w)]
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
        """Squared error against each camera's frames (B, 3, H, W) in [0, 1], its pixels
        weighed by :func:`foreground_weights` and normalised to their mean (plain MSE with
        ``fg_weight`` 0), summed over cameras, plus the opacity prior, which ramps in over
        the second half of training (``progress`` in [0, 1]); logs each camera's PSNR
        (of the plain MSE)."""
        loss = state.new_zeros(())
        logs: dict[str, Tensor] = {}
        ramp = min(max(2.0 * progress - 1.0, 0.0), 1.0)
        for name, target in frames.items():
            cam = self.camera(name)
            se = ((cam(state) - target) ** 2).mean(dim=1)  # (B, H, W)
            weight = foreground_weights(target, cam.background.detach(), self.cfg.fg_weight)
            fit = (weight * se).mean() / weight.mean()
            loss = loss + fit + self.cfg.binary_weight * ramp * cam.binary()
            logs[f"psnr_{name}"] = -10 * torch.log10(se.detach().mean())
            if self.cfg.layers > 1:
                logs[f"rise_{name}"] = cam.rise()
        return loss, logs


FOREGROUND = 0.1
"""A pixel is foreground when some channel differs from the background by this much."""


def foreground_weights(target: Tensor, background: Tensor, fg_weight: float) -> Tensor:
    """(B, H, W) loss weights of frames target (B, 3, H, W) over ``background`` (3, H, W):
    ``1 + fg_weight`` on the pixels some channel of which differs from the background by
    at least :data:`FOREGROUND`, and on their 8 neighbours (where a misplaced edge
    shows), 1 elsewhere."""
    if fg_weight == 0:
        return target.new_ones(target.shape[0], *target.shape[2:])
    fg = ((target - background).abs().amax(dim=1, keepdim=True) >= FOREGROUND).float()
    near = torch.nn.functional.max_pool2d(fg, 3, stride=1, padding=1)[:, 0]
    return 1.0 + fg_weight * near


def _centre_rows(to_pixel: list[Tensor]) -> Tensor:
    """(L,) the image row (unit coordinates) at which each plane -> pixel homography (3, 3)
    of ``to_pixel`` shows the board's centre, (0, 0, 1) in unit coordinates."""
    t = torch.stack(to_pixel).detach()
    return t[:, 1, 2] / t[:, 2, 2]


def _reach(sprite: Sprite, threshold: float = 1e-3) -> float:
    """Half-width (board px) of the centred square that holds every texel of ``sprite``
    more opaque than ``threshold``, plus one texel (bilinear sampling reaches it): past
    it the sprite changes no pixel by more than ``threshold`` of its colour."""
    alpha = torch.sigmoid(sprite.alpha[0])  # (S, S)
    n = alpha.shape[-1]
    seen = (alpha > threshold).nonzero()
    if len(seen) == 0:
        return 0.0
    centre = (seen.float() + 0.5) / n * 2 - 1  # texel centres in [-1, 1]
    return min(float(centre.abs().max()) + 2.0 / n, 1.0) * sprite.extent


def _uint8(img: Tensor) -> Tensor:
    """(B, 3, H, W) in [0, 1] -> (B, H, W, 3) uint8."""
    return (img * 255.0).round().to(torch.uint8).permute(0, 2, 3, 1)
