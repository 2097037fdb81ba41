"""The object-set dynamics: a GNS-style interaction network over a set of discs.

State ``s`` (B, 2 + 2 N): agent x, y, then N disc centres (board px). One step reads the
current and previous state and the previous and current action (absolute agent targets).

- **Agent**: a linear map of translation-invariant inputs (its velocity and both targets
  relative to it) gives its displacement; it is position-controlled, so it never sees a
  disc (fitted by least squares, :meth:`AgentMap.fit`).
- **Discs** (Sanchez-Gonzalez et al. 2020): nodes are the discs (their velocity and the
  near walls), the agent is a special node (its velocity and next displacement); edges
  join discs within ``radius`` and the agent to discs within ``agent_radius``, their inputs
  relative positions and velocities only, so the model is translation-invariant away from
  the walls and cannot see the goal. ``message_steps`` rounds of shared edge and node
  MLPs, then a decoder gives each disc's displacement and a "moving" logit.
- **Edge frames** (``edge_frames``, off by default): the same graph, but every edge reads
  its inputs in its own pair's frame and the discs carry vector channels
  (:mod:`factory.model.object_set.frames`), so the network is rotation-equivariant.
- **Coasting** (``coast``, off by default): a disc's step is a learned multiple of its
  last step plus the decoder's output, so the network models what contact adds, not the
  sliding itself.
- **Stillness**: only *active* discs (:func:`graph.active_discs`) may move, and only
  those whose logit says moving; every other disc keeps its position bit for bit, so a
  pile nothing touches stays exactly still.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from factory.model.object_set.config import SetDynamicsConfig
from factory.model.object_set.frames import FrameNet
from factory.model.object_set.graph import (
    active_discs,
    agent_edges,
    computed_nodes,
    disc_edges,
    mlp,
    wall_features,
)


class AgentMap(nn.Module):
    """``forward(prev, cur, prev_action, action)`` (B, 2) each -> next agent xy (B, 2)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.linear = nn.Linear(6, 2)

    def inputs(self, prev: Tensor, cur: Tensor, prev_action: Tensor, action: Tensor) -> Tensor:
        """(B, 6): the agent's velocity and both targets relative to it, in ``scale``."""
        return torch.cat([cur - prev, prev_action - cur, action - cur], dim=-1) / self.scale

    def forward(self, prev: Tensor, cur: Tensor, prev_action: Tensor, action: Tensor) -> Tensor:
        return cur + self.linear(self.inputs(prev, cur, prev_action, action)) * self.scale

    @torch.no_grad()
    def fit(self, states: Tensor, actions: Tensor) -> float:
        """Least squares on windows of agent xy (B, 3, 2) and actions (B, 3, 2); returns
        the mean residual in px."""
        x = self.inputs(states[:, 0], states[:, 1], actions[:, 0], actions[:, 1])
        y = (states[:, 2] - states[:, 1]) / self.scale
        x1 = torch.cat([x, torch.ones_like(x[:, :1])], dim=1).double()
        sol = torch.linalg.lstsq(x1, y.double()).solution.float()
        self.linear.weight.copy_(sol[:-1].T)
        self.linear.bias.copy_(sol[-1])
        return float(((x1.float() @ sol - y) * self.scale).norm(dim=-1).mean())


class _Round(nn.Module):
    """One message-passing round: disc edges, agent edges, then every node."""

    def __init__(self, hidden: int, layers: int) -> None:
        super().__init__()
        self.edge = mlp(3 * hidden, hidden, hidden, layers)
        self.agent_edge = mlp(3 * hidden, hidden, hidden, layers)
        self.node = mlp(3 * hidden, hidden, hidden, layers)


class SetDynamics(nn.Module):
    """``forward(prev, cur, prev_action, action)`` -> next state (B, S), the discs'
    moving logits (B, N) and which discs were active (B, N) bool."""

    def __init__(self, cfg: SetDynamicsConfig) -> None:
        super().__init__()
        if cfg.agent_dim != 2 or cfg.action_dim != 2:
            raise ValueError("the object-set dynamics models a 2D point agent and 2D discs")
        self.cfg = cfg
        self.agent = AgentMap(cfg.radius)
        # one network or the other, so a world-frame model's weights load as before
        self.frames = FrameNet(cfg) if cfg.edge_frames else None
        if self.frames is None:
            h, n = cfg.hidden, cfg.mlp_layers
            self.node_in = mlp(6, h, h, n)
            self.agent_in = mlp(4, h, h, n)
            self.edge_in = mlp(5, h, h, n)
            self.agent_edge_in = mlp(8, h, h, n)
            self.rounds = nn.ModuleList(_Round(h, n) for _ in range(cfg.message_steps))
            self.out = mlp(h, h, 3, n)
            last = self.out[-1]
            assert isinstance(last, nn.Linear)
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)
        # the coasting factor exists only where configured, so older weights load as before
        self.coast = nn.Parameter(torch.zeros(())) if cfg.coast else None

    @torch.no_grad()
    def fit_coast(self, states: Tensor) -> float:
        """Least squares of each disc's step on its last step, over windows of states
        (B, 3, S) where the disc moved in both (more than ``moved_px``) and lay farther
        than ``agent_radius`` from the agent (sliding, not pushed); sets and returns the
        coasting factor (0 where no disc qualifies, or without ``coast``)."""
        if self.coast is None:
            return 0.0
        d = _discs(states.flatten(0, 1)).unflatten(0, states.shape[:2])  # (B, 3, N, 2)
        last, step = d[:, 1] - d[:, 0], d[:, 2] - d[:, 1]
        far = (d[:, 1] - states[:, 1, None, :2]).norm(dim=-1) > self.cfg.agent_radius
        moved = self.cfg.moved_px
        both = far & (last.abs().amax(-1) > moved) & (step.abs().amax(-1) > moved)
        den = (last[both] ** 2).sum()
        self.coast.fill_(float((last[both] * step[both]).sum() / den) if den > 0 else 0.0)
        return float(self.coast)

    def active(self, prev: Tensor, cur: Tensor, agent_next: Tensor) -> Tensor:
        """(B, N) bool: the discs that may move (:func:`graph.active_discs`)."""
        c = self.cfg
        discs, before = _discs(cur), _discs(prev)
        return active_discs(
            before, discs, cur[:, :2], agent_next, c.reach_agent, c.reach_disc, c.hops
        )

    def disc_outputs(self, prev: Tensor, cur: Tensor, agent_next: Tensor, act: Tensor) -> Tensor:
        """(B, N, 3): each disc's displacement (in ``delta_scale``) and moving logit;
        messages flow only into active discs ``act`` (B, N).

        Only the nodes that can matter are computed: the active discs and the discs that
        send them messages (an inactive sender's own state still evolves over the rounds).
        Every other disc's outputs are 0; its position is kept anyway (:meth:`forward`)."""
        c = self.cfg
        discs, before = _discs(cur), _discs(prev)
        b_n, n = discs.shape[:2]
        vel = (discs - before) / c.vel_scale
        agent, agent_vel = cur[:, :2], (cur[:, :2] - prev[:, :2]) / c.vel_scale
        b, i, j = disc_edges(discs, act, c.radius)
        ab, ai = agent_edges(discs, agent, agent_next, act, c.agent_radius)
        nodes, local = computed_nodes(act, b * n + j)
        index = (local[b * n + i], local[b * n + j], local[ab * n + ai])
        rel, dvel = discs[b, i] - discs[b, j], vel[b, i] - vel[b, j]
        now, nxt = discs[ab, ai] - agent[ab], discs[ab, ai] - agent_next[ab]
        avel = vel[ab, ai] - agent_vel[ab]
        node_vel = vel.reshape(b_n * n, 2)[nodes]
        walls = wall_features(discs, c.walls, c.wall_range).reshape(b_n * n, -1)[nodes]
        if self.frames is not None:
            amove = ((agent_next - agent) / c.vel_scale)[ab]
            out = self.frames(node_vel, walls, rel, dvel, (now, nxt, avel, amove), index)
        else:
            g = self.agent_in(torch.cat([agent_vel, (agent_next - agent) / c.vel_scale], -1))
            out = self._world_outputs(node_vel, walls, rel, dvel, (now, nxt, avel), g[ab], index)
        full = out.new_zeros(b_n * n, 3).index_copy(0, nodes, out)
        return full.reshape(b_n, n, 3)

    def _world_outputs(
        self,
        vel: Tensor,
        walls: Tensor,
        rel: Tensor,
        dvel: Tensor,
        agent_geom: tuple[Tensor, Tensor, Tensor],
        g: Tensor,
        index: tuple[Tensor, Tensor, Tensor],
    ) -> Tensor:
        """(M, 3) for the computed discs, every input in board axes (shapes as
        :meth:`FrameNet.forward`; ``g`` (A, hidden) the agent's node per agent edge)."""
        recv, send, arecv = index
        now, nxt, avel = agent_geom
        r = self.cfg.radius
        e = self.edge_in(torch.cat([rel / r, rel.norm(dim=-1, keepdim=True) / r, dvel], -1))
        ea = self.agent_edge_in(
            torch.cat([now / r, now.norm(dim=-1, keepdim=True) / r,
                       nxt / r, nxt.norm(dim=-1, keepdim=True) / r, avel], -1)
        )  # fmt: skip
        hf = self.node_in(torch.cat([vel, walls], -1))  # (M, hidden)
        for rnd in self.rounds:
            assert isinstance(rnd, _Round)
            e = e + rnd.edge(torch.cat([e, hf[recv], hf[send]], -1))
            ea = ea + rnd.agent_edge(torch.cat([ea, hf[arecv], g], -1))
            agg = torch.zeros_like(hf).index_add(0, recv, e)
            agg_a = torch.zeros_like(hf).index_add(0, arecv, ea)
            hf = hf + rnd.node(torch.cat([hf, agg, agg_a], -1))
        out: Tensor = self.out(hf)
        return out

    def forward(
        self, prev: Tensor, cur: Tensor, prev_action: Tensor, action: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Next state (B, S), moving logits (B, N), active discs (B, N) bool.

        An active disc moves by its displacement where its gate's probability passes the
        threshold and not at all elsewhere; in training the gradient reaches the gate
        through that probability (straight-through), so rollouts train as they run.
        Inactive discs never move."""
        agent_next = self.agent(prev[:, :2], cur[:, :2], prev_action, action)
        act = self.active(prev, cur, agent_next)
        out = self.disc_outputs(prev, cur, agent_next, act)
        logit = out[..., 2]
        p = torch.sigmoid(logit)
        gate = (p > self.cfg.gate_threshold).to(p.dtype) + p - p.detach()  # value 0 or 1
        discs = _discs(cur)
        step = out[..., :2] * self.cfg.delta_scale
        if self.coast is not None:
            step = step + self.coast * (discs - _discs(prev))
        moved = discs + step * gate[..., None]
        new = torch.where(act[..., None], moved, discs)
        return torch.cat([agent_next, new.flatten(1)], dim=-1), logit, act

    def loss(
        self, states: Tensor, actions: Tensor, unroll: int, generator: torch.Generator | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Self-unrolled loss on windows: states (B, T, S), actions (B, T, 2), T >= unroll+2.

        Every disc of a window is shifted by its own constant jitter (``input_noise_px``:
        noisy relative positions, still discs stay still); the rollout starts from the
        first two states and feeds its own predictions back for ``unroll`` steps. Scored:
        every predicted disc and agent position (squared px, summed over the discs) and,
        on the first step, the active discs' gate (BCE against whether they moved)."""
        b, _, s = states.shape
        n = (s - 2) // 2
        if self.cfg.input_noise_px > 0:
            jitter = torch.randn(b, 1, n, 2, generator=generator, device=states.device)
            pad = torch.zeros(b, 1, 2, device=states.device)
            states = states + torch.cat([pad, jitter.flatten(2) * self.cfg.input_noise_px], -1)
        prev, cur = states[:, 0], states[:, 1]
        disc_err, agent_err = [], []
        logs: dict[str, Tensor] = {}
        bce = torch.zeros((), device=states.device)
        for t in range(unroll):
            nxt, logit, act = self(prev, cur, actions[:, t], actions[:, t + 1])
            true = states[:, t + 2]
            err = ((_discs(nxt) - _discs(true)) ** 2).sum(-1)  # (B, N)
            if t == 0:
                bce, logs = _first_step(logit, act, err, _discs(states[:, 1]), _discs(true),
                                        self.cfg.moved_px)  # fmt: skip
            disc_err.append(err)
            agent_err.append(((nxt[:, :2] - true[:, :2]) ** 2).sum(-1))
            prev, cur = cur, nxt
        discs_sq, agent_sq = torch.stack(disc_err, 1), torch.stack(agent_err, 1)
        scale = self.cfg.delta_scale**2
        loss = discs_sq.sum(-1).mean() / scale + agent_sq.mean() / scale + bce
        logs.update(
            disc_px=discs_sq.sqrt().mean().detach(),
            disc_px_last=discs_sq[:, -1].sqrt().mean().detach(),
            agent_px=agent_sq.sqrt().mean().detach(),
            gate_bce=bce.detach(),
        )
        return loss, logs


def _first_step(
    logit: Tensor, act: Tensor, err: Tensor, cur: Tensor, true: Tensor, moved_px: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """The gate's BCE over active discs and the first step's logs: the error of discs
    that truly moved (px) and the fraction of those the activity rule missed."""
    moved = (true - cur).abs().amax(-1) > moved_px  # (B, N)
    bce = F.binary_cross_entropy_with_logits(logit, moved.float(), reduction="none")
    bce = (bce * act).sum() / act.sum().clamp_min(1)
    n_moved = moved.sum().clamp_min(1)
    logs = {
        "moving_px": (err.sqrt() * moved).sum().detach() / n_moved,
        "missed": (moved & ~act).sum().detach().float() / n_moved,
    }
    return bce, logs


def _discs(state: Tensor) -> Tensor:
    """States (B, 2 + 2 N) -> disc centres (B, N, 2)."""
    return state[:, 2:].unflatten(1, (-1, 2))
