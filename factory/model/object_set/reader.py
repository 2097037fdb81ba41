"""Top frame -> state: a heatmap net finds the agent and the set of discs.

A fully convolutional net (full resolution, translation-equivariant) predicts per pixel a
disc-centre heatmap, an agent-centre heatmap and each one's sub-pixel offset (as
CenterNet, Zhou et al. 2019). Reading takes the agent at its map's maximum and the N discs
at the N highest local maxima of theirs (3 x 3 peaks), each plus its offset. Training is
permutation-invariant by construction: the targets are maps drawn from the set, with no
order to match. Pixels map to the board as an image resize does: pixel (col, row) covers
board ``[col, col + 1) * board / W``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from factory.model.object_set.config import SetReaderConfig

DISC, AGENT = 0, 1  # heatmap channels; offsets: 2-3 the disc's, 4-5 the agent's


class SetReader(nn.Module):
    """``forward(frames)`` (B, 3, H, W) in [0, 1] -> state (B, 2 + 2 N) board px."""

    def __init__(self, cfg: SetReaderConfig, n_discs: int, board: float = 512.0) -> None:
        super().__init__()
        self.cfg, self.n_discs, self.board = cfg, n_discs, board
        w = cfg.width
        mods: list[nn.Module] = [nn.Conv2d(3, w, 3, padding=1), nn.SiLU()]
        for k in range(cfg.layers - 1):
            d = 1 + k % 2
            mods += [nn.Conv2d(w, w, 3, padding=d, dilation=d), nn.GroupNorm(4, w), nn.SiLU()]
        mods.append(nn.Conv2d(w, 6, 1))
        self.net = nn.Sequential(*mods)
        head = mods[-1]
        assert isinstance(head, nn.Conv2d) and head.bias is not None
        nn.init.constant_(head.bias[:2], -4.0)  # start with few peaks (CenterNet's prior)

    def maps(self, frames: Tensor) -> Tensor:
        """(B, 3, H, W) -> (B, 6, H, W): disc and agent logits, their offsets (px)."""
        return self.net(frames * 2 - 1)

    def forward(self, frames: Tensor) -> Tensor:
        return self.read(self.maps(frames))

    def read(self, maps: Tensor) -> Tensor:
        """Maps (B, 6, H, W) -> state (B, 2 + 2 N): the agent, then the discs in order of
        their peak's height."""
        _, _, h, w = maps.shape
        flat = maps.flatten(2)  # (B, 6, H W)
        agent_cell = flat[:, AGENT].argmax(dim=1, keepdim=True)  # (B, 1)
        heat = torch.sigmoid(maps[:, DISC])
        peaks = heat * (heat == F.max_pool2d(heat[:, None], 3, 1, 1)[:, 0])
        disc_cells = peaks.flatten(1).topk(self.n_discs, dim=1).indices  # (B, N)
        agent = self._board(agent_cell, flat[:, 4:6], h, w)
        discs = self._board(disc_cells, flat[:, 2:4], h, w)
        return torch.cat([agent.flatten(1), discs.flatten(1)], dim=1)

    def _board(self, cells: Tensor, offsets: Tensor, h: int, w: int) -> Tensor:
        """Cells (B, M) of an H x W map and offset maps (B, 2, H W) -> (B, M, 2) board px."""
        col, row = (cells % w).float(), torch.div(cells, w, rounding_mode="floor").float()
        off = offsets.gather(2, cells[:, None].expand(-1, 2, -1)).transpose(1, 2)
        scale = torch.tensor([self.board / w, self.board / h], device=cells.device)
        return (torch.stack([col, row], -1) + 0.5 + off) * scale

    def loss(self, frames: Tensor, states: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """Focal loss on the disc heatmap (CenterNet's), cross-entropy on the agent's cell,
        L1 on both offsets at the true cells; logs read errors in board px (the disc set's
        by Chamfer distance)."""
        maps = self.maps(frames)
        _, _, h, w = maps.shape
        size = torch.tensor([w, h], device=states.device, dtype=states.dtype)
        px = states.unflatten(1, (-1, 2)) * (size / self.board) - 0.5  # (B, 1 + N, 2) pixels
        cells = torch.minimum(px.round().clamp_min(0), size - 1)
        index = (cells[..., 1] * w + cells[..., 0]).long()  # (B, 1 + N)
        flat = maps.flatten(2)
        target = _heat_targets(px[:, 1:], index[:, 1:], h, w, self.cfg.sigma)
        focal = _focal(flat[:, DISC], target) / self.n_discs
        agent_ce = F.cross_entropy(flat[:, AGENT], index[:, 0])
        true_off = px - cells
        off_d = flat[:, 2:4].gather(2, index[:, None, 1:].expand(-1, 2, -1)).transpose(1, 2)
        off_a = flat[:, 4:6].gather(2, index[:, None, :1].expand(-1, 2, -1)).transpose(1, 2)
        off = torch.cat([off_a, off_d], 1)
        l1 = (off - true_off).abs().mean()
        with torch.no_grad():
            read = self.read(maps).unflatten(1, (-1, 2))
            true = states.unflatten(1, (-1, 2))
            logs = {
                "agent_px": (read[:, 0] - true[:, 0]).norm(dim=-1).mean(),
                "disc_px": chamfer_px(read[:, 1:], true[:, 1:]).mean(),
            }
        return focal + agent_ce + l1, logs


def _heat_targets(px: Tensor, index: Tensor, h: int, w: int, sigma: float) -> Tensor:
    """(B, H W) target heatmap: the max over discs px (B, N, 2) of a Gaussian of width
    ``sigma`` pixels, exactly 1 at each disc's cell ``index`` (B, N)."""
    cols = torch.arange(w, device=px.device, dtype=px.dtype)
    rows = torch.arange(h, device=px.device, dtype=px.dtype)
    gx = torch.exp(-((cols - px[..., :1]) ** 2) / (2 * sigma**2))  # (B, N, W)
    gy = torch.exp(-((rows - px[..., 1:]) ** 2) / (2 * sigma**2))  # (B, N, H)
    heat = (gy[..., :, None] * gx[..., None, :]).amax(dim=1).flatten(1)  # (B, H W)
    return heat.scatter(1, index, 1.0)


def _focal(logits: Tensor, target: Tensor) -> Tensor:
    """CenterNet's penalty-reduced focal loss, summed per image, mean over the batch."""
    p = torch.sigmoid(logits).clamp(1e-4, 1 - 1e-4)
    pos = target >= 1.0
    pos_loss = -((1 - p) ** 2) * torch.log(p) * pos
    neg_loss = -((1 - target) ** 4) * p**2 * torch.log(1 - p) * ~pos
    return (pos_loss + neg_loss).sum(1).mean()


def chamfer_px(a: Tensor, b: Tensor) -> Tensor:
    """(B,) symmetric Chamfer distance between point sets a (B, N, 2) and b (B, M, 2): the
    mean over both of each point's distance to the other set's nearest."""
    d = (a[:, :, None] - b[:, None]).norm(dim=-1)  # (B, N, M)
    return 0.5 * (d.min(dim=2).values.mean(1) + d.min(dim=1).values.mean(1))
