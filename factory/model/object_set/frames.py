"""Edge-frame message passing: the disc interaction network with every input in a pair's
own frame, so the learned contact law is the same in every direction.

The world-frame network (:class:`~factory.model.object_set.dynamics.SetDynamics` without
``edge_frames``) reads relative positions and velocities in board axes, so it must learn
one collision law per direction of approach. Here each edge reads its inputs in the frame
of its own pair: ``u`` along the pair's line (receiver minus sender), ``p`` = ``u``
turned by 90 degrees. What an edge sends back is a latent (rotation-invariant) and
``vectors`` vectors given by their ``u`` and ``p`` components, so every round is exactly
rotation-equivariant: turn the discs, their velocities and the agent together and each
displacement turns with them. Only the walls, which the board fixes, break the symmetry;
a disc reads them as its wall vector and two invariants of it (the summed closeness and
the vector's length), so a quarter turn about the board's centre, which maps the walls
onto themselves, turns every step exactly.

Per disc: a latent ``s`` (M, hidden) and ``vectors`` vector channels ``v`` (M, C, 2);
channel 0 starts as the disc's velocity, channel 1 as its wall vector (the inward normals
of the walls within ``wall_range``, weighted by how near each is), the rest at 0. The
decoder gives each disc's displacement as a learned combination of its channels and their
90-degree turns (coefficients from the disc's invariants), and its moving logit.

Shapes: E disc edges, A agent edges, M computed discs (indices into them: ``recv`` and
``send`` (E,), ``arecv`` (A,)).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from factory.model.object_set.config import SetDynamicsConfig
from factory.model.object_set.graph import gathered_mlp, mlp


def turn(v: Tensor) -> Tensor:
    """Vectors (..., 2) turned by +90 degrees."""
    return torch.stack([-v[..., 1], v[..., 0]], dim=-1)


def unit(v: Tensor) -> Tensor:
    """Vectors (..., 2) scaled to length 1 (a zero vector stays 0)."""
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-6)


def in_frame(vecs: Tensor, u: Tensor) -> Tensor:
    """Vectors (K, C, 2) in the frames ``u`` (K, 2): (K, 2 C), their ``u`` then ``p``
    components."""
    along = (vecs * u[:, None]).sum(-1)
    across = (vecs * turn(u)[:, None]).sum(-1)
    return torch.cat([along, across], dim=-1)


def from_frame(coef: Tensor, u: Tensor) -> Tensor:
    """Coefficients (K, 2 C) in the frames ``u`` (K, 2) -> vectors (K, C, 2)."""
    c = coef.shape[1] // 2
    return coef[:, :c, None] * u[:, None] + coef[:, c:, None] * turn(u)[:, None]


def invariants(v: Tensor) -> Tensor:
    """Vector channels (M, C, 2) -> (M, C (C + 1) / 2): their rotation-invariant dot
    products (the Gram matrix's upper triangle)."""
    c = v.shape[1]
    gram = v @ v.transpose(1, 2)
    rows, cols = torch.triu_indices(c, c, device=v.device)
    return gram[:, rows, cols]


def wall_vectors(feats: Tensor) -> Tensor:
    """Wall closeness (K, 4) (x low, x high, y low, y high; 1 at the wall) -> (K, 2): the
    walls' inward normals weighted by it."""
    return torch.stack([feats[:, 0] - feats[:, 1], feats[:, 2] - feats[:, 3]], dim=-1)


class _FrameRound(nn.Module):
    """One round: disc edges and agent edges in their frames, then every disc."""

    def __init__(self, hidden: int, vectors: int, layers: int) -> None:
        super().__init__()
        h, c = hidden, vectors
        self.edge = mlp(3 * h + 4 * c, h, h + 2 * c, layers)
        self.agent_edge = mlp(2 * h + 2 * c, h, h + 2 * c, layers)
        self.node = mlp(3 * h + c * (c + 1) // 2, h, h, layers)


class FrameNet(nn.Module):
    """``forward(...)`` -> (M, 3): each computed disc's displacement (in ``delta_scale``)
    and moving logit."""

    cpu_compile = True
    """``torch.compile`` pays on a CPU (:func:`factory.train.accel.compile_cpu_parts`):
    1.19x to 1.29x the eager steps/s over the dynamics stage's schedule after a cold
    warm-up of about 2.3 minutes on two cores (``bench/set_train_speed.py``), 15% more steps
    in 90 CPU-minutes (docs/BENCHMARKS.md)."""

    def __init__(self, cfg: SetDynamicsConfig) -> None:
        super().__init__()
        h, c, n = cfg.hidden, cfg.vectors, cfg.mlp_layers  # c >= 2: the config checks it
        self.cfg = cfg
        self.node_in = mlp(3, h, h, n)
        self.edge_in = mlp(1 + 2, h, h, n)
        self.agent_edge_in = mlp(2 + 6, h, h, n)
        self.rounds = nn.ModuleList(_FrameRound(h, c, n) for _ in range(cfg.message_steps))
        self.out = mlp(h + c * (c + 1) // 2, h, 2 * c + 1, n)
        last = self.out[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def forward(
        self,
        vel: Tensor,
        walls: Tensor,
        rel: Tensor,
        dvel: Tensor,
        agent_geom: tuple[Tensor, Tensor, Tensor, Tensor],
        index: tuple[Tensor, Tensor, Tensor],
    ) -> Tensor:
        """vel (M, 2) in ``vel_scale`` and walls (M, 4) per computed disc; rel (E, 2)
        receiver minus sender in px and dvel (E, 2) their velocity difference per disc
        edge; ``agent_geom``: per agent edge the disc minus the agent now and next (A, 2)
        each in px, the disc's velocity relative to the agent's and the
        agent's next displacement (A, 2) each in ``vel_scale``; ``index``: recv, send,
        arecv."""
        recv, send, arecv = index
        r, c = self.cfg.radius, self.cfg.vectors
        rel = rel / r
        now, nxt, avel, amove = agent_geom
        now, nxt = now / r, nxt / r
        wall = wall_vectors(walls)
        near = [vel.norm(dim=-1, keepdim=True), walls.sum(-1, keepdim=True),
                wall.norm(dim=-1, keepdim=True)]  # fmt: skip
        s = self.node_in(torch.cat(near, -1))  # what turning the board leaves alone
        v = torch.cat([vel[:, None], wall[:, None], s.new_zeros(len(s), c - 2, 2)], dim=1)
        u = unit(rel)
        dist = rel.norm(dim=-1, keepdim=True)
        e = self.edge_in(torch.cat([dist, in_frame(dvel[:, None], u)], -1))
        ua = unit(nxt)
        ageo = torch.stack([now, avel, amove], dim=1)  # (A, 3, 2)
        ea = self.agent_edge_in(
            torch.cat([now.norm(dim=-1, keepdim=True), nxt.norm(dim=-1, keepdim=True),
                       in_frame(ageo, ua)], -1)
        )  # fmt: skip
        h = e.shape[1]
        for rnd in self.rounds:
            assert isinstance(rnd, _FrameRound)
            pair = [in_frame(v.index_select(0, k), u) for k in (recv, send)]
            out = gathered_mlp(rnd.edge, [(e, None), (s, recv), (s, send),
                                          (torch.cat(pair, -1), None)])  # fmt: skip
            e = e + out[:, :h]
            ain = [ea, s.index_select(0, arecv), in_frame(v.index_select(0, arecv), ua)]
            aout = rnd.agent_edge(torch.cat(ain, -1))
            ea = ea + aout[:, :h]
            agg = torch.zeros_like(s).index_add(0, recv, e)
            agg_a = torch.zeros_like(s).index_add(0, arecv, ea)
            msg = from_frame(out[:, h:], u).flatten(1)
            amsg = from_frame(aout[:, h:], ua).flatten(1)
            flat = v.flatten(1).index_add(0, recv, msg).index_add(0, arecv, amsg)
            v = flat.unflatten(1, (c, 2))
            s = s + rnd.node(torch.cat([s, agg, agg_a, invariants(v)], -1))
        coef = self.out(torch.cat([s, invariants(v)], -1))
        step = (coef[:, :c, None] * v + coef[:, c : 2 * c, None] * turn(v)).sum(1)
        return torch.cat([step, coef[:, 2 * c :]], dim=-1)
