"""The disc set as a graph: which discs may move, their edges and boundary inputs.

Shapes: ``B`` scenes, ``N`` discs; discs (B, N, 2), the agent (B, 2), board px. Every
quantity here depends on positions only through differences (translation-invariant)
except the wall inputs, and treats the discs as a set (permutation-equivariant).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def mlp(n_in: int, hidden: int, n_out: int, layers: int) -> nn.Sequential:
    """``layers`` hidden SiLU layers of width ``hidden``, then a linear output."""
    mods: list[nn.Module] = []
    width = n_in
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.SiLU()]
        width = hidden
    mods.append(nn.Linear(width, n_out))
    return nn.Sequential(*mods)


def gathered_mlp(net: nn.Sequential, parts: list[tuple[Tensor, Tensor | None]]) -> Tensor:
    """``net`` applied to the concatenation of ``parts``, each a (K or M, d_i) input with an
    index (K,) into its rows or None (already one row per output row): (K, out).

    The same function as ``net(torch.cat([x[i] for x, i in parts], -1))`` up to float
    rounding, but the first layer multiplies each indexed part once per row of its source
    and gathers the products, not once per gathered row: an edge MLP reading its two
    discs' latents does the discs' share of its first layer per disc, not per edge
    (E is about 4.4 M in a pile). Gathers use ``index_select``, whose gradient is a
    scatter-add (faster on a CPU than advanced indexing's)."""
    first = net[0]
    assert isinstance(first, nn.Linear)
    blocks = first.weight.split([x.shape[-1] for x, _ in parts], dim=1)
    dense = [(x, w) for (x, i), w in zip(parts, blocks, strict=True) if i is None]
    if not dense:
        raise ValueError("gathered_mlp needs at least one part with one row per output row")
    y = torch.cat([x for x, _ in dense], -1) @ torch.cat([w for _, w in dense], 1).T
    y = y + first.bias
    for (x, i), w in zip(parts, blocks, strict=True):
        if i is not None:
            y = y + (x @ w.T).index_select(0, i)
    out: Tensor = net[1:](y)
    return out


def pair_distances(discs: Tensor) -> Tensor:
    """(B, N, N) distances between discs (B, N, 2), from their differences (exactly
    symmetric, and unchanged by a shift of the scene up to rounding)."""
    return (discs[:, :, None] - discs[:, None, :]).norm(dim=-1)


def segment_distance(points: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """Distances (B, N) from points (B, N, 2) to the segments from a (B, 2) to b (B, 2)."""
    ab = (b - a)[:, None]  # (B, 1, 2)
    ap = points - a[:, None]
    t = (ap * ab).sum(-1) / (ab * ab).sum(-1).clamp_min(1e-12)
    closest = a[:, None] + t.clamp(0.0, 1.0)[..., None] * ab
    return (points - closest).norm(dim=-1)


def active_discs(
    prev: Tensor,
    discs: Tensor,
    agent: Tensor,
    agent_next: Tensor,
    reach_agent: float,
    reach_disc: float,
    hops: int,
) -> Tensor:
    """(B, N) bool: the discs that may move this step.

    A disc is active when it moved in the last step (prev (B, N, 2) -> discs), when the
    agent's path from ``agent`` to ``agent_next`` (B, 2) passes within ``reach_agent`` of
    it, or, repeated ``hops`` times, when an active disc lies within ``reach_disc``.
    """
    act = (discs != prev).any(dim=-1)
    act = act | (segment_distance(discs, agent, agent_next) < reach_agent)
    close = pair_distances(discs) < reach_disc  # (B, N, N), the diagonal included
    for _ in range(hops):
        grown = act | (close & act[:, None, :]).any(dim=-1)
        if torch.equal(grown, act):
            break
        act = grown
    return act


def wall_features(discs: Tensor, walls: tuple[float, float], wall_range: float) -> Tensor:
    """(B, N, 4): for each wall (x low, x high, y low, y high), 1 - distance / range,
    clamped at 0 (1 at the wall, 0 beyond ``wall_range``)."""
    lo, hi = walls
    x, y = discs[..., 0], discs[..., 1]
    dist = torch.stack([x - lo, hi - x, y - lo, hi - y], dim=-1)
    return torch.relu(1.0 - dist / wall_range)


def disc_edges(discs: Tensor, active: Tensor, radius: float) -> tuple[Tensor, Tensor, Tensor]:
    """Edges into active discs from every other disc within ``radius``: the scene
    index (E,), the receiver (E,) and the sender (E,) disc index."""
    n = discs.shape[1]
    near = pair_distances(discs) < radius
    eye = torch.eye(n, dtype=torch.bool, device=discs.device)
    mask = near & ~eye[None] & active[:, :, None]
    b, i, j = mask.nonzero(as_tuple=True)
    return b, i, j


def agent_edges(
    discs: Tensor, agent: Tensor, agent_next: Tensor, active: Tensor, radius: float
) -> tuple[Tensor, Tensor]:
    """Edges from the agent into active discs it is within ``radius`` of, now or at its
    next position: the scene index (E',) and the receiver disc index (E',)."""
    now = (discs - agent[:, None]).norm(dim=-1) < radius
    nxt = (discs - agent_next[:, None]).norm(dim=-1) < radius
    b, i = ((now | nxt) & active).nonzero(as_tuple=True)
    return b, i


def computed_nodes(active: Tensor, senders: Tensor) -> tuple[Tensor, Tensor]:
    """The discs a step computes: the active ones (B, N) and every sender of an edge into
    one (flat indices ``b * N + j``, (E,)). Returns their flat indices (M,) and a map
    (B * N,) from flat index to position among them (-1 where not computed)."""
    need = active.flatten().clone()
    need[senders] = True
    nodes = need.nonzero().squeeze(1)
    local = torch.full_like(need, -1, dtype=torch.long)
    local[nodes] = torch.arange(len(nodes), device=nodes.device)
    return nodes, local
