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
from factory.model.rollout_base import to_tensor
from factory.model.state_rollout import StateRollout
from factory.model.world_model import StepOutput


class ObjectStateModel(StateRollout):
    """Dynamics, renderer and reader (any may be None while training) plus rollout state."""

    kind = "object_state"

    config: ObjectStateConfig
    dynamics: ObjectDynamics | None
    renderer: SpriteRenderer | None
    reader: StateReader | None

    def __init__(
        self,
        config: ObjectStateConfig,
        dynamics: ObjectDynamics | None = None,
        renderer: SpriteRenderer | None = None,
        reader: StateReader | None = None,
    ) -> None:
        super().__init__(config, dynamics, renderer, reader)
        self.agent_dim = config.dynamics.agent_dim

    def _parts(self) -> tuple[ObjectDynamics, SpriteRenderer]:
        if self.dynamics is None or self.renderer is None:
            raise ModelError("rollout needs the dynamics and renderer parts")
        return self.dynamics, self.renderer

    # -- reading and rendering -----------------------------------------------------------
    @torch.no_grad()
    def read_states(self, frames: np.ndarray | Tensor) -> Tensor:
        """uint8 frames (B, H, W, 3) -> states (B, 5): the reader, refined by the renderer."""
        img = self._frame_batch(frames)
        assert self.reader is not None  # _frame_batch refuses a model without one
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

    def _dynamics_step(
        self, prev: Tensor, cur: Tensor, prev_action: Tensor, action: Tensor
    ) -> Tensor:
        dyn, _ = self._parts()
        nxt, _ = dyn(prev, cur, prev_action, action)
        return nxt

    @torch.inference_mode()
    def step(self, actions: np.ndarray | Tensor) -> StepOutput:
        """Advance every rollout by one frame. actions: (B, A) float32 applied now."""
        _, ren = self._parts()
        nxt = self.advance(actions)
        frames = ren.render_uint8(nxt).cpu().numpy()
        s = nxt.cpu().numpy().astype(np.float32)
        return StepOutput(frames=frames, state=s[:, :2], task_state=s[:, 2:], latents=nxt)
