"""The object-state dynamics: state in, state out, inputs in each object's own frame.

State ``s`` (B, 5): agent x, y, block x, y, angle (board px, rad). One step reads the
current and previous state and the previous and current action (absolute agent targets).

- **Agent**: a learned linear map of translation-invariant inputs (its velocity and the two
  targets relative to it) gives its displacement. The robot is position-controlled, so this
  part never sees the block.
- **Block** (GNS-style): the agent's position, velocity, commanded target and predicted
  next position, the block's own last motion and the nearby walls' directions, all rotated
  into the block's frame, feed an MLP. It outputs the block's displacement in its own
  frame (rotated back) and a "moving" logit; at inference a block whose logit says still
  does not move at all, so an agent clear of it leaves it exactly where it is. The goal
  is no input.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from factory.model.object_state.config import ObjectDynamicsConfig
from factory.model.object_state.geometry import rotate, to_frame, wrap_angle


class ObjectDynamics(nn.Module):
    """``forward(prev, cur, prev_action, action)`` -> next state (B, 5) and logs."""

    def __init__(self, cfg: ObjectDynamicsConfig) -> None:
        super().__init__()
        if cfg.agent_dim != 2 or cfg.action_dim != 2:
            raise ValueError("the object-state dynamics models a 2D point robot and one body")
        self.cfg = cfg
        self.agent = nn.Linear(6, 2)
        layers: list[nn.Module] = []
        width = 21
        for _ in range(cfg.layers):
            layers += [nn.Linear(width, cfg.hidden), nn.SiLU()]
            width = cfg.hidden
        last = nn.Linear(width, 4)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self.block = nn.Sequential(*layers, last)

    def agent_inputs(
        self, prev: Tensor, cur: Tensor, prev_action: Tensor, action: Tensor
    ) -> Tensor:
        """(B, 6) translation-invariant agent inputs: its velocity and both targets."""
        return torch.cat([cur - prev, prev_action - cur, action - cur], dim=-1) / self.cfg.scale

    @torch.no_grad()
    def fit_agent(self, states: Tensor, actions: Tensor) -> float:
        """Least-squares fit of the agent map on windows states (B, 3, 5), actions (B, 3, 2);
        returns the mean residual in px (a closed-form start for gradient training)."""
        x = self.agent_inputs(states[:, 0, :2], states[:, 1, :2], actions[:, 0], actions[:, 1])
        y = (states[:, 2, :2] - states[:, 1, :2]) / self.cfg.scale
        x1 = torch.cat([x, torch.ones_like(x[:, :1])], dim=1).double()
        sol = torch.linalg.lstsq(x1, y.double()).solution.float()
        self.agent.weight.copy_(sol[:-1].T)
        self.agent.bias.copy_(sol[-1])
        return float(((x1.float() @ sol - y) * self.cfg.scale).norm(dim=-1).mean())

    def agent_next(self, prev: Tensor, cur: Tensor, prev_action: Tensor, action: Tensor) -> Tensor:
        """(B, 2) next agent position from positions (B, 2) and targets (B, 2)."""
        return cur + self.agent(self.agent_inputs(prev, cur, prev_action, action)) * self.cfg.scale

    def block_inputs(
        self, prev: Tensor, cur: Tensor, prev_action: Tensor, action: Tensor, agent_next: Tensor
    ) -> Tensor:
        """(B, 21) inputs in the block's frame at ``cur``."""
        s = self.cfg.scale
        origin, angle = cur[:, 2:4], cur[:, 4]
        agent = cur[:, :2]
        rel = [
            to_frame(agent, origin, angle),
            to_frame(agent_next, origin, angle),
            to_frame(action, origin, angle),
            to_frame(prev_action, origin, angle),
        ]
        vel = [
            rotate(agent - prev[:, :2], -angle),
            rotate(origin - prev[:, 2:4], -angle),
        ]
        spin = wrap_angle(angle - prev[:, 4])[:, None]
        walls = self.wall_inputs(origin, angle)
        return torch.cat(
            [*(r / s for r in rel), *(v / s * 10 for v in vel), spin * 10, walls], dim=-1
        )

    def wall_inputs(self, origin: Tensor, angle: Tensor) -> Tensor:
        """(B, 8): each wall's inward normal in the block's frame, scaled by how close the
        block's origin is to it (1 at the wall, 0 beyond ``wall_range``)."""
        lo, hi = self.cfg.walls
        x, y = origin[:, 0], origin[:, 1]
        dist = torch.stack([x - lo, hi - x, y - lo, hi - y], dim=1)  # (B, 4)
        near = torch.relu(1.0 - dist / self.cfg.wall_range)
        normals = torch.tensor([[1, 0], [-1, 0], [0, 1], [0, -1]], dtype=origin.dtype)
        vecs = normals.to(origin.device)[None] * near[..., None]  # (B, 4, 2)
        return rotate(vecs, -angle[:, None]).flatten(1)

    def forward(
        self,
        prev: Tensor,
        cur: Tensor,
        prev_action: Tensor,
        action: Tensor,
        hard_gate: bool = True,
    ) -> tuple[Tensor, Tensor]:
        """Next state (B, 5) and the block's moving logit (B,).

        ``hard_gate``: a block whose logit is below the threshold does not move (inference);
        otherwise its displacement is scaled by the gate's probability (training)."""
        agent_next = self.agent_next(prev[:, :2], cur[:, :2], prev_action, action)
        out = self.block(self.block_inputs(prev, cur, prev_action, action, agent_next))
        logit = out[:, 3]
        p = torch.sigmoid(logit)
        gate = (p > self.cfg.gate_threshold).to(p.dtype) if hard_gate else p
        angle = cur[:, 4]
        d_xy = rotate(out[:, :2] * self.cfg.delta_scale, angle) * gate[:, None]
        d_ang = out[:, 2] * self.cfg.angle_scale * gate
        block = torch.cat([cur[:, 2:4] + d_xy, wrap_angle(angle + d_ang)[:, None]], dim=-1)
        return torch.cat([agent_next, block], dim=-1), logit

    def loss(
        self, states: Tensor, actions: Tensor, unroll: int, generator: torch.Generator | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Self-unrolled loss on windows: states (B, T, 5), actions (B, T, 2), T >= unroll+2.

        Starts from the true first two states (with input noise), feeds its own predictions
        back for ``unroll`` steps, and scores every predicted state (block position in px,
        angle as arc length at 50 px, agent in px) plus the gate's BCE on the first step.
        """
        b = states.shape[0]
        noise = self.cfg.input_noise_px
        prev, cur = states[:, 0], states[:, 1]
        if noise > 0:
            jitter = torch.randn(b, 2, 5, generator=generator, device=states.device) * noise
            jitter[..., 4] /= 50.0
            prev, cur = prev + jitter[:, 0], cur + jitter[:, 1]
        pos_err, ang_err, agent_err = [], [], []
        bce = torch.zeros((), device=states.device)
        for t in range(unroll):
            nxt, logit = self(prev, cur, actions[:, t], actions[:, t + 1], hard_gate=False)
            true = states[:, t + 2]
            if t == 0:
                moved = _moved(states[:, 1], true)
                bce = F.binary_cross_entropy_with_logits(logit, moved)
            pos_err.append(((nxt[:, 2:4] - true[:, 2:4]) ** 2).sum(-1))
            ang_err.append((50.0 * wrap_angle(nxt[:, 4] - true[:, 4])) ** 2)
            agent_err.append(((nxt[:, :2] - true[:, :2]) ** 2).sum(-1))
            prev, cur = cur, nxt
        pos, ang = torch.stack(pos_err, 1), torch.stack(ang_err, 1)
        agent = torch.stack(agent_err, 1)
        block_loss = (pos + ang).mean() / self.cfg.delta_scale**2
        loss = block_loss + agent.mean() / self.cfg.delta_scale**2 + bce
        logs = {
            "block_px": pos.sqrt().mean().detach(),
            "block_px_last": pos[:, -1].sqrt().mean().detach(),
            "agent_px": agent.sqrt().mean().detach(),
            "gate_bce": bce.detach(),
        }
        return loss, logs


def _moved(cur: Tensor, nxt: Tensor) -> Tensor:
    """(B,) 1.0 where the block moved between two states (more than 0.01 px or 1e-4 rad)."""
    d_xy = (nxt[:, 2:4] - cur[:, 2:4]).abs().amax(-1)
    d_ang = wrap_angle(nxt[:, 4] - cur[:, 4]).abs()
    return ((d_xy > 1e-2) | (d_ang > 1e-4)).float()
