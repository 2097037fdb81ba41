"""``ObjectStateModel``: the object-state kind behind the rollout protocol.

The rollout state is, per batch row, the current and previous world state (B, 2, 5) and
the previous action (B, 2). A rollout starts from known states (a seeded reset gives them
exactly) or from frames, which the reader turns into states. Each step runs the dynamics
once and the renderer once; the task state is the model's own block pose, not a reading.

Padding: started from a single state (or without context actions), the previous state is
that state and the previous action holds the agent where it is ("the world stood still":
an agent at rest), as in training at episode starts, which are rests after a reset.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from factory.errors import ModelError
from factory.model.object_state.config import ObjectStateConfig
from factory.model.object_state.dynamics import ObjectDynamics
from factory.model.object_state.reader import StateReader, refine
from factory.model.object_state.renderer import SpriteRenderer
from factory.model.rollout_base import RolloutBase, to_tensor
from factory.model.world_model import StepOutput


class ObjectStateModel(RolloutBase):
    """Dynamics, renderer and reader (any may be None while training) plus rollout state."""

    kind = "object_state"

    def __init__(
        self,
        config: ObjectStateConfig,
        dynamics: ObjectDynamics | None = None,
        renderer: SpriteRenderer | None = None,
        reader: StateReader | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.dynamics = dynamics
        self.renderer = renderer
        self.reader = reader
        self.use_bf16 = False
        self._states: Tensor | None = None  # (B, 2, 5): previous, current
        self._prev_action: Tensor | None = None  # (B, 2)

    @property
    def context(self) -> int:
        return self.config.context

    @property
    def has_task_reader(self) -> bool:
        return True

    @property
    def task_reader(self) -> str:
        """What gives the task state during a rollout: the model's own state."""
        return "state"

    def _parts(self) -> tuple[ObjectDynamics, SpriteRenderer]:
        if self.dynamics is None or self.renderer is None:
            raise ModelError("rollout needs the dynamics and renderer parts")
        return self.dynamics, self.renderer

    # -- reading and rendering -----------------------------------------------------------
    @torch.no_grad()
    def read_states(self, frames: np.ndarray | Tensor) -> Tensor:
        """uint8 frames (B, H, W, 3) -> states (B, 5): the reader, refined by the renderer."""
        if self.reader is None:
            raise ModelError("this model has no reader part, so it cannot start from frames")
        x = to_tensor(frames, self.device)
        if x.dim() != 4:
            raise ValueError(f"frames must be (B, H, W, 3), got {tuple(x.shape)}")
        self.check_compatible(image_shape=tuple(x.shape[1:]))
        img = x.permute(0, 3, 1, 2).float() / 255.0
        init = self.reader(img)
        if self.renderer is None:
            return init
        cfg = self.config.reader
        return refine(self.renderer, img, init, cfg.refine_steps, cfg.refine_lr)

    def read_frames(self, frames: np.ndarray | Tensor) -> tuple[np.ndarray, np.ndarray]:
        """uint8 frames (B, H, W, 3) -> agent_xy (B, 2), block_pose (B, 3) float32 numpy."""
        s = self.read_states(frames).cpu().numpy().astype(np.float32)
        return s[:, :2], s[:, 2:]

    reconstructs = "renderer at the true state"
    frame_reader = "reader"
    starts_from_states = True

    def reconstruct(self, frames: np.ndarray, states: np.ndarray | None = None) -> np.ndarray:
        """The renderer's frames (N, H, W, 3) at ``states`` (N, 5), else at the reader's
        reading of ``frames``."""
        s = self.read_states(frames) if states is None else states
        return self.render(s)

    def last_reading(self, rows: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The current (agent (n, 2), block pose (n, 3)) of ``rows`` (default all): the
        rollout's own state."""
        if self._states is None:
            raise RuntimeError("call start() before last_reading()")
        s = self._states[:, 1].cpu().numpy().astype(np.float32)
        if rows is not None:
            s = s[list(rows)]
        return s[:, :2], s[:, 2:]

    @torch.inference_mode()
    def render(self, states: np.ndarray | Tensor) -> np.ndarray:
        """States (B, 5) -> uint8 frames (B, H, W, 3) numpy."""
        _, ren = self._parts()
        s = to_tensor(states, self.device).float()
        return ren.render_uint8(s).cpu().numpy()

    # -- rollout -------------------------------------------------------------------------
    def _context_states(
        self, frames: np.ndarray | Tensor | None, states: np.ndarray | Tensor | None
    ) -> Tensor:
        """(B, K', 5) states: the given ones, else the reader's reading of every frame."""
        if states is not None:
            s = to_tensor(states, self.device).float()
            if s.dim() == 2:
                s = s[:, None]
            if s.dim() != 3 or s.shape[-1] != self.config.state_dim:
                raise ValueError(
                    f"states must be (B, K', {self.config.state_dim}), got {tuple(s.shape)}"
                )
            return s
        if frames is None:
            raise ValueError("start needs context frames or states")
        f = to_tensor(frames, self.device)
        if f.dim() != 5 or f.shape[1] < 1:
            raise ValueError(f"context_frames must be (B, K', H, W, 3), got {tuple(f.shape)}")
        b, k = f.shape[:2]
        keep = min(k, self.context)
        return self.read_states(f[:, -keep:].flatten(0, 1)).unflatten(0, (b, keep))

    def _prepare(
        self,
        frames: np.ndarray | Tensor | None,
        actions: np.ndarray | Tensor | None,
        states: np.ndarray | Tensor | None,
    ) -> tuple[Tensor, Tensor]:
        s = self._context_states(frames, states)
        b, k = s.shape[:2]
        acts = torch.zeros(b, 0, self.config.action_dim, device=self.device)
        if actions is not None:
            acts = to_tensor(actions, self.device).float()
        if acts.dim() != 3 or acts.shape[0] != b or acts.shape[-1] != self.config.action_dim:
            raise ValueError(f"context_actions must be (B, K'-1, A), got {tuple(acts.shape)}")
        window = s[:, -2:] if k >= 2 else s[:, -1:].expand(-1, 2, -1)
        if k >= 2 and acts.shape[1]:
            prev_action = acts[:, -1]
        else:  # at rest: the agent was held where it is
            window = s[:, -1:].expand(-1, 2, -1)
            prev_action = s[:, -1, : self.config.dynamics.agent_dim]
        return window.contiguous(), prev_action.contiguous()

    @torch.no_grad()
    def start(
        self,
        context_frames: np.ndarray | Tensor | None = None,
        context_actions: np.ndarray | Tensor | None = None,
        seed: int = 0,
        states: np.ndarray | Tensor | None = None,
    ) -> None:
        """Begin B rollouts from states (B, K', 5) when given, else from context frames
        (B, K', H, W, 3) uint8 read by the reader; context_actions (B, K'-1, A) or None.
        ``seed`` is accepted for the protocol: this kind's rollout draws no noise."""
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
        # cannot be updated in place outside inference mode (start_slots reads frames
        # with the reader's refinement, which needs autograd, so it cannot run in it)
        self._states, self._prev_action = self._states.clone(), self._prev_action.clone()
        self._states[rows], self._prev_action[rows] = window, prev

    def keep_slots(self, slots: np.ndarray | list[int]) -> None:
        """Keep only rows ``slots`` (n,), in that order."""
        if self._states is None or self._prev_action is None:
            raise RuntimeError("call start() before keep_slots()")
        rows = self._rows(slots)
        self._states = self._states[rows].contiguous()
        self._prev_action = self._prev_action[rows].contiguous()

    @property
    def batch_size(self) -> int:
        return 0 if self._states is None else int(self._states.shape[0])

    @torch.inference_mode()
    def step(self, actions: np.ndarray | Tensor) -> StepOutput:
        """Advance every rollout by one frame. actions: (B, A) float32 applied now."""
        dyn, ren = self._parts()
        if self._states is None or self._prev_action is None:
            raise RuntimeError("call start() before step()")
        a = to_tensor(actions, self.device).float()
        if tuple(a.shape) != (self.batch_size, self.config.action_dim):
            raise ValueError(f"actions must be (B, A), got {tuple(a.shape)}")
        nxt, _ = dyn(self._states[:, 0], self._states[:, 1], self._prev_action, a)
        self._states = torch.stack([self._states[:, 1], nxt], dim=1)
        self._prev_action = a
        frames = ren.render_uint8(nxt).cpu().numpy()
        s = nxt.cpu().numpy().astype(np.float32)
        return StepOutput(frames=frames, state=s[:, :2], task_state=s[:, 2:], latents=nxt)

    def step_many(self, actions: np.ndarray | Tensor) -> list[StepOutput]:
        """T steps of known actions (B, T, A): open-loop replay."""
        acts = to_tensor(actions, self.device)
        if acts.dim() != 3 or acts.shape[0] != self.batch_size:
            raise ValueError(f"actions must be (B, T, A), got {tuple(acts.shape)}")
        return [self.step(acts[:, t]) for t in range(acts.shape[1])]
