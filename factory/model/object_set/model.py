"""``ObjectSetModel``: the object-set kind behind the rollout protocol.

The rollout state is, per batch row, the current and previous world state (B, 2, S), S =
2 + 2 N, and the previous action (B, 2). A rollout starts from known states (a seeded
reset gives them exactly) or from frames, which the reader turns into states (its discs in
its own order: the dynamics treats them as a set). Each step runs the dynamics once and
every camera's renderer once; the task state is the model's own disc positions.

Padding: started from a single state (or without context actions), the previous state is
that state and the previous action holds the agent where it is (an agent at rest, as at
episode starts in training).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from factory.errors import ModelError
from factory.model.object_set.config import ObjectSetConfig
from factory.model.object_set.dynamics import SetDynamics
from factory.model.object_set.reader import SetReader
from factory.model.object_set.renderer import SetRenderer
from factory.model.rollout_base import to_tensor
from factory.model.state_rollout import StateRollout
from factory.model.world_model import StepOutput


class ObjectSetModel(StateRollout):
    """Dynamics, renderer and reader (any may be None while training) plus rollout state."""

    kind = "object_set"
    reconstructs = "renderer at the true state"
    frame_reader = "reader"
    starts_from_states = True

    config: ObjectSetConfig
    dynamics: SetDynamics | None
    renderer: SetRenderer | None
    reader: SetReader | None

    def __init__(
        self,
        config: ObjectSetConfig,
        dynamics: SetDynamics | None = None,
        renderer: SetRenderer | None = None,
        reader: SetReader | None = None,
    ) -> None:
        super().__init__(config, dynamics, renderer, reader)

    @property
    def cameras(self) -> tuple[str, ...]:
        """The cameras each step renders: ``frames`` the first, ``views`` the others."""
        return self.config.cameras

    def _parts(self) -> tuple[SetDynamics, SetRenderer]:
        if self.dynamics is None or self.renderer is None:
            raise ModelError("rollout needs the dynamics and renderer parts")
        return self.dynamics, self.renderer

    # -- reading and rendering -----------------------------------------------------------
    @torch.no_grad()
    def read_states(self, frames: np.ndarray | Tensor) -> Tensor:
        """uint8 top frames (B, H, W, 3) -> states (B, S): the reader's."""
        img = self._frame_batch(frames)
        assert self.reader is not None  # _frame_batch refuses a model without one
        return self.reader(img)

    def read_frames(self, frames: np.ndarray | Tensor) -> tuple[np.ndarray, np.ndarray]:
        """uint8 frames (B, H, W, 3) -> agent_xy (B, 2), disc xy (B, 2 N) float32 numpy."""
        s = self.read_states(frames).cpu().numpy().astype(np.float32)
        return s[:, :2], s[:, 2:]

    def reconstruct(self, frames: np.ndarray, states: np.ndarray | None = None) -> np.ndarray:
        """The main camera's frames (N, H, W, 3) at ``states`` (N, S), else at the
        reader's reading of ``frames``."""
        s = self.read_states(frames) if states is None else states
        return self.render(s)

    @torch.inference_mode()
    def render_views(self, states: np.ndarray | Tensor) -> dict[str, np.ndarray]:
        """States (B, S) -> every camera's uint8 frames (B, H, W, 3), by name."""
        _, ren = self._parts()
        s = to_tensor(states, self.device).float()
        return {k: v.cpu().numpy() for k, v in ren.render_uint8(s).items()}

    def render(self, states: np.ndarray | Tensor) -> np.ndarray:
        """States (B, S) -> the main camera's uint8 frames (B, H, W, 3)."""
        return self.render_views(states)[self.cameras[0]]

    def last_views(self, rows: list[int] | None = None) -> dict[str, np.ndarray]:
        """The cameras after the main one at the current state of ``rows`` (default
        all), each (n, H, W, 3) uint8."""
        if self._states is None:
            raise RuntimeError("call start() before last_views()")
        s = self._states[:, 1] if rows is None else self._states[list(rows), 1]
        views = self.render_views(s)
        return {cam: views[cam] for cam in self.cameras[1:]}

    # -- rollout -------------------------------------------------------------------------
    def _context_states(
        self, frames: np.ndarray | Tensor | None, states: np.ndarray | Tensor | None
    ) -> Tensor:
        """(B, K', S) states: the given ones, else the reader's reading of the last
        ``context`` frames."""
        if states is not None:
            s = to_tensor(states, self.device).float()
            s = s[:, None] if s.dim() == 2 else s
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
        s = self.read_states(f[:, -keep:].flatten(0, 1)).unflatten(0, (b, keep))
        # the reader orders each frame's discs its own way: the agent's motion is read from
        # both frames, the discs from the last one (taken to be at rest)
        return torch.cat([s[..., :2], s[:, -1:, 2:].expand(-1, keep, -1)], dim=-1)

    def _dynamics_step(
        self, prev: Tensor, cur: Tensor, prev_action: Tensor, action: Tensor
    ) -> Tensor:
        dyn, _ = self._parts()
        nxt, _, _ = dyn(prev, cur, prev_action, action)
        return nxt

    @torch.inference_mode()
    def step(self, actions: np.ndarray | Tensor) -> StepOutput:
        """Advance every rollout by one frame. actions: (B, A) float32 applied now."""
        _, ren = self._parts()
        nxt = self.advance(actions)
        frames = {k: v.cpu().numpy() for k, v in ren.render_uint8(nxt).items()}
        s = nxt.cpu().numpy().astype(np.float32)
        main, *others = self.cameras
        return StepOutput(
            frames=frames[main],
            state=s[:, :2],
            task_state=s[:, 2:],
            latents=nxt,
            views={cam: frames[cam] for cam in others},
        )
