"""``StateRollout``: the rollout state shared by the kinds that model the world's state.

Per batch row it holds the previous and current world state (B, 2, S) and the previous
action (B, A). A kind supplies :meth:`StateRollout._context_states` (known states, or
frames read into states) and its own ``step``; starting, restarting and dropping rows,
the current reading and open-loop replay are the same for every such kind.

Padding: started from a single state (or without context actions), the previous state is
that state and the previous action holds the agent where it is ("the world stood still":
an agent at rest), as in training at episode starts, which are rests after a reset.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from factory.errors import ModelError
from factory.model.rollout_base import RolloutBase, to_tensor
from factory.model.world_model import StepOutput


class StateRollout(RolloutBase):
    """Rollout bookkeeping over ``_states`` (B, 2, S) and ``_prev_action`` (B, A)."""

    agent_dim = 2  # leading state entries that are the agent's position
    _states: Tensor | None = None
    _prev_action: Tensor | None = None
    config: Any
    dynamics: Any
    renderer: Any
    reader: Any

    def __init__(self, config: Any, dynamics: Any, renderer: Any, reader: Any) -> None:
        """The kind's config and parts (any may be None while training), no rollout yet."""
        super().__init__()
        self.config = config
        self.dynamics = dynamics
        self.renderer = renderer
        self.reader = reader
        self.use_bf16 = False
        self._states = None  # (B, 2, S): previous, current
        self._prev_action = None  # (B, A)

    @property
    def context(self) -> int:
        return int(self.config.context)

    def _context_states(
        self, frames: np.ndarray | Tensor | None, states: np.ndarray | Tensor | None
    ) -> Tensor:
        """(B, K', S) float states of the context: ``states`` or the frames' reading."""
        raise NotImplementedError

    def _dynamics_step(
        self, prev: Tensor, cur: Tensor, prev_action: Tensor, action: Tensor
    ) -> Tensor:
        """The kind's dynamics: next states (B, S) from the previous and current states
        (B, S) and the previous and current actions (B, A)."""
        raise NotImplementedError

    def step(self, actions: np.ndarray | Tensor) -> StepOutput:
        raise NotImplementedError

    @torch.inference_mode()
    def advance(self, actions: np.ndarray | Tensor) -> Tensor:
        """Advance every rollout by one step of the dynamics alone, rendering nothing:
        actions (B, A) applied now -> the next states (B, S). ``step`` is this plus the
        renderer; a caller that needs only states (robustness replays) calls this."""
        if self._states is None or self._prev_action is None:
            raise RuntimeError("call start() before step()")
        a = to_tensor(actions, self.device).float()
        if tuple(a.shape) != (self.batch_size, self.config.action_dim):
            raise ValueError(f"actions must be (B, A), got {tuple(a.shape)}")
        nxt = self._dynamics_step(self._states[:, 0], self._states[:, 1], self._prev_action, a)
        self._states = torch.stack([self._states[:, 1], nxt], dim=1)
        self._prev_action = a
        return nxt

    @property
    def has_task_reader(self) -> bool:
        return True

    @property
    def task_reader(self) -> str:
        """What gives the task state during a rollout: the model's own state."""
        return "state"

    def _frame_batch(self, frames: np.ndarray | Tensor) -> Tensor:
        """uint8 frames (B, H, W, 3) of the model's size -> (B, 3, H, W) float in [0, 1];
        ModelError without a reader to read them."""
        if getattr(self, "reader", None) is None:
            raise ModelError("this model has no reader part, so it cannot start from frames")
        x = to_tensor(frames, self.device)
        if x.dim() != 4:
            raise ValueError(f"frames must be (B, H, W, 3), got {tuple(x.shape)}")
        self.check_compatible(image_shape=tuple(x.shape[1:]))
        return x.permute(0, 3, 1, 2).float() / 255.0

    @property
    def batch_size(self) -> int:
        return 0 if self._states is None else int(self._states.shape[0])

    def _prepare(
        self,
        frames: np.ndarray | Tensor | None,
        actions: np.ndarray | Tensor | None,
        states: np.ndarray | Tensor | None,
    ) -> tuple[Tensor, Tensor]:
        """(window (B, 2, S), previous action (B, A)) from the context."""
        s = self._context_states(frames, states)
        b, k = s.shape[:2]
        acts = torch.zeros(b, 0, self.config.action_dim, device=self.device)
        if actions is not None:
            acts = to_tensor(actions, self.device).float()
        if acts.dim() != 3 or acts.shape[0] != b or acts.shape[-1] != self.config.action_dim:
            raise ValueError(f"context_actions must be (B, K'-1, A), got {tuple(acts.shape)}")
        if k >= 2 and acts.shape[1]:
            return s[:, -2:].contiguous(), acts[:, -1].contiguous()
        # at rest: the agent was held where it is
        return s[:, -1:].expand(-1, 2, -1).contiguous(), s[:, -1, : self.agent_dim].contiguous()

    @torch.no_grad()
    def start(
        self,
        context_frames: np.ndarray | Tensor | None = None,
        context_actions: np.ndarray | Tensor | None = None,
        seed: int = 0,
        states: np.ndarray | Tensor | None = None,
    ) -> None:
        """Begin B rollouts from states (B, K', S) when given, else from context frames
        (B, K', H, W, 3) uint8 read by the reader; context_actions (B, K'-1, A) or None.
        ``seed`` is accepted for the protocol: these kinds' rollouts draw no noise."""
        del seed
        self._states, self._prev_action = self._prepare(context_frames, context_actions, states)

    @torch.no_grad()
    def start_slots(
        self,
        slots: np.ndarray | list[int],
        context_frames: np.ndarray | Tensor | None = None,
        context_actions: np.ndarray | Tensor | None = None,
        states: np.ndarray | Tensor | None = None,
    ) -> None:
        """Restart only rows ``slots`` (n,) from new context (as :meth:`start`)."""
        if self._states is None or self._prev_action is None:
            raise RuntimeError("call start() before start_slots()")
        rows = self._rows(slots)
        window, prev = self._prepare(context_frames, context_actions, states)
        if window.shape[0] != len(rows):
            raise ValueError(f"{len(rows)} slots but {window.shape[0]} context rollouts")
        # out of place: after a step the rollout state is an inference tensor, which
        # cannot be updated in place outside inference mode (start_slots may read frames
        # with a reader's refinement, which needs autograd, so it cannot run in it)
        self._states, self._prev_action = self._states.clone(), self._prev_action.clone()
        self._states[rows], self._prev_action[rows] = window, prev

    def keep_slots(self, slots: np.ndarray | list[int]) -> None:
        """Keep only rows ``slots`` (n,), in that order."""
        if self._states is None or self._prev_action is None:
            raise RuntimeError("call start() before keep_slots()")
        rows = self._rows(slots)
        self._states = self._states[rows].contiguous()
        self._prev_action = self._prev_action[rows].contiguous()

    def nudge(self, delta: np.ndarray | Tensor) -> None:
        """Add ``delta`` (B, S) to every rollout's current state: a perturbation of the
        model's own state (robustness replays), not an observation."""
        if self._states is None:
            raise RuntimeError("call start() before nudge()")
        d = to_tensor(delta, self.device).float()
        if tuple(d.shape) != tuple(self._states[:, 1].shape):
            raise ValueError(
                f"delta must be {tuple(self._states[:, 1].shape)}, got {tuple(d.shape)}"
            )
        self._states = torch.stack([self._states[:, 0], self._states[:, 1] + d], dim=1)

    def last_reading(self, rows: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The current (agent (n, agent_dim), objects (n, S - agent_dim)) of ``rows``
        (default all): the rollout's own state, not a reading of frames."""
        if self._states is None:
            raise RuntimeError("call start() before last_reading()")
        s = self._states[:, 1].cpu().numpy().astype(np.float32)
        if rows is not None:
            s = s[list(rows)]
        return s[:, : self.agent_dim], s[:, self.agent_dim :]

    def step_many(self, actions: np.ndarray | Tensor) -> list[StepOutput]:
        """T steps of known actions (B, T, A): open-loop replay."""
        acts = to_tensor(actions, self.device)
        if acts.dim() != 3 or acts.shape[0] != self.batch_size:
            raise ValueError(f"actions must be (B, T, A), got {tuple(acts.shape)}")
        return [self.step(acts[:, t]) for t in range(acts.shape[1])]
