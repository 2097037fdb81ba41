"""State -> frame: learned sprites in each object's own frame over a learned background.

Every appearance is learned from frames: the background (goal and walls included), each
object's colour and shape (an RGBA texture in the object's own frame) and which object is
drawn in front. The state only places the textures: each output pixel is mapped into each
object's frame (a spatial transformer, as in Attend-Infer-Repeat) and the texture sampled
there. So the renderer fits any pose it never saw, and all views render the same state.

Pixel centres map to the board as an image resize does: column ``j`` of ``W`` samples the
board at ``(j + 0.5) * board / W - 0.5`` plus a learned offset.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from factory.model.object_state.config import RendererConfig
from factory.model.object_state.geometry import to_frame


class Sprite(nn.Module):
    """An RGBA texture (4, S, S) over ``[-extent, extent]^2`` of an object's frame."""

    def __init__(self, extent: float, texels_per_unit: float) -> None:
        super().__init__()
        size = max(4, round(2 * extent * texels_per_unit))
        self.extent = extent
        self.rgb = nn.Parameter(torch.zeros(3, size, size))  # colour logits
        self.alpha = nn.Parameter(torch.full((1, size, size), -2.0))

    def sample(self, points: Tensor, blur: int = 1) -> tuple[Tensor, Tensor]:
        """points (B, H, W, 2) in the object's frame -> rgb (B, 3, H, W), alpha (B, 1, H, W).

        ``blur`` > 1 box-filters the texture first (a wider basin when fitting poses)."""
        tex = torch.sigmoid(torch.cat([self.rgb, self.alpha], dim=0))[None]
        if blur > 1:
            tex = F.avg_pool2d(tex, blur, stride=1, padding=blur // 2, count_include_pad=False)
        grid = points / self.extent
        out = F.grid_sample(
            tex.expand(points.shape[0], -1, -1, -1),
            grid,
            mode="bilinear",
            padding_mode="zeros",
            align_corners=False,
        )
        return out[:, :3], out[:, 3:]


class SpriteRenderer(nn.Module):
    """``forward(state)`` (B, 5) -> frames (B, 3, H, W) float in [0, 1]."""

    def __init__(self, cfg: RendererConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h, w = cfg.image_size
        self.background = nn.Parameter(torch.ones(3, h, w))
        self.agent = Sprite(cfg.agent_extent, cfg.texels_per_unit)
        self.block = Sprite(cfg.block_extent, cfg.texels_per_unit)
        self.offset = nn.Parameter(torch.full((2,), 0.5))
        self.order = nn.Parameter(torch.zeros(()))
        ys = (torch.arange(h, dtype=torch.float32) + 0.5) * cfg.board / h - 0.5
        xs = (torch.arange(w, dtype=torch.float32) + 0.5) * cfg.board / w - 0.5
        gy, gx = torch.meshgrid(ys, xs, indexing="ij")
        self.pixels: Tensor
        self.register_buffer("pixels", torch.stack([gx, gy], dim=-1), persistent=False)

    @torch.no_grad()
    def init_background(self, frames: Tensor) -> None:
        """Start the background at the per-pixel median of frames (N, 3, H, W) in [0, 1]."""
        self.background.copy_(frames.median(dim=0).values)

    def forward(self, state: Tensor, blur: int = 1) -> Tensor:
        b = state.shape[0]
        pts = (self.pixels + self.offset)[None].expand(b, -1, -1, -1)  # (B, H, W, 2)

        def local(origin: Tensor, angle: Tensor) -> Tensor:
            return to_frame(pts, origin[:, None, None], angle[:, None, None])

        zero = torch.zeros(b, device=state.device, dtype=state.dtype)
        a_rgb, a_alpha = self.agent.sample(local(state[:, :2], zero), blur)
        b_rgb, b_alpha = self.block.sample(local(state[:, 2:4], state[:, 4]), blur)
        bg = self.background[None].expand(b, -1, -1, -1)
        block_front = _over(_over(bg, a_rgb, a_alpha), b_rgb, b_alpha)
        agent_front = _over(_over(bg, b_rgb, b_alpha), a_rgb, a_alpha)
        w = torch.sigmoid(self.order)
        return (w * block_front + (1 - w) * agent_front).clamp(0.0, 1.0)

    def loss(
        self, state: Tensor, frames: Tensor, progress: float = 1.0
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """MSE against frames (B, 3, H, W) in [0, 1] plus the opacity prior, which ramps in
        over the second half of training (``progress`` in [0, 1]: shapes first, then
        decided opacities); logs PSNR."""
        mse = ((self(state) - frames) ** 2).mean()
        alphas = [torch.sigmoid(s.alpha) for s in (self.agent, self.block)]
        binary = torch.stack([(a * (1 - a)).mean() for a in alphas]).sum()
        ramp = min(max(2.0 * progress - 1.0, 0.0), 1.0)
        loss = mse + self.cfg.binary_weight * ramp * binary
        return loss, {"psnr": -10 * torch.log10(mse.detach()), "binary": binary.detach()}

    def render_uint8(self, state: Tensor) -> Tensor:
        """(B, 5) -> (B, H, W, 3) uint8 frames."""
        img = self(state)
        return (img * 255.0).round().to(torch.uint8).permute(0, 2, 3, 1)


def _over(under: Tensor, rgb: Tensor, alpha: Tensor) -> Tensor:
    return under * (1 - alpha) + rgb * alpha
