"""``WorldModel``: the trained parts plus a batched, autoregressive rollout.

Usage::

    wm = load_model_dir("runs/model", device="cpu")
    wm.start(context_frames, context_actions, seed=0)   # (B, K', H, W, 3), (B, K'-1, A)
    out = wm.step(actions)                               # (B, A) -> StepOutput

Action convention (the dataset's): ``actions[t]`` is the action applied at frame ``t``
(it leads to frame ``t + 1``). So ``context_actions[:, j]`` is the action applied at
context frame ``j``, and the action applied at the last context frame is the first
:meth:`WorldModel.step`'s argument.

Padding: with fewer than K context frames, the first frame is repeated at the front of
the window, and those padded frames get the first known action (``context_actions[:, 0]``,
or, with a single context frame, the first step's action): "the world stood still".
Training sees the same padding at episode starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from factory.errors import ModelError
from factory.model.autoencoder import Autoencoder
from factory.model.config import WorldModelConfig
from factory.model.dynamics import Dynamics
from factory.model.probe import StateProbe
from factory.model.rollout_base import RolloutBase, to_tensor


@dataclass
class StepOutput:
    """One rollout step.

    frames: (B, H, W, 3) uint8; state: (B, S) float32 robot state (raw units, e.g. board
    px) from the dynamics' state head; task_state: (B, 3) float32 block pose from the probe
    (None without a probe); latents: the model's own rollout state on its device: (B, C,
    h, w) float32 latents for ``latent_grid``, the (B, 5) world state for ``object_state``;
    views: every camera after the main one (the model's ``cameras[1:]``), each (B, H, W, 3)
    uint8 like ``frames`` (empty for a model of one camera).
    """

    frames: np.ndarray
    state: np.ndarray
    task_state: np.ndarray | None
    latents: Tensor
    views: dict[str, np.ndarray] = field(default_factory=dict)


class WorldModel(RolloutBase):
    """Container of the parts (any may be None while training) and the rollout state."""

    def __init__(
        self,
        config: WorldModelConfig,
        autoencoder: Autoencoder | None = None,
        dynamics: Dynamics | None = None,
        probe: StateProbe | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.autoencoder = autoencoder
        self.dynamics = dynamics
        self.probe = probe
        self.use_bf16 = False
        self._window: Tensor | None = None
        self._actions: Tensor | None = None
        self._pad_rows = torch.zeros(0, dtype=torch.bool)
        self._generator: torch.Generator | None = None
        self._last_frames: Tensor | None = None  # (B, H, W, 3) uint8: the last context frames

    @property
    def kind(self) -> str:
        return "latent_grid"

    @property
    def cameras(self) -> tuple[str, ...]:
        """``()`` for a model of the store's main camera; ``(camera,)`` for one trained on
        another camera (``config.camera``, e.g. pile's ``side``): its frames are that view."""
        return self.config.cameras

    @property
    def context(self) -> int:
        """Context frames the dynamics reads (its window K)."""
        return int(self.config.dynamics.context)

    def _require(self) -> tuple[Autoencoder, Dynamics]:
        if self.autoencoder is None or self.dynamics is None:
            raise ModelError("rollout needs the autoencoder and dynamics parts")
        return self.autoencoder, self.dynamics

    def _require_ae(self) -> Autoencoder:
        if self.autoencoder is None:
            raise ModelError("this model has no autoencoder part")
        return self.autoencoder

    @contextlib.contextmanager
    def _autocast(self) -> Iterator[None]:
        if self.use_bf16 and self.device.type == "cuda":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                yield
        else:
            yield

    @torch.inference_mode()
    def encode(self, frames: np.ndarray | Tensor) -> Tensor:
        """uint8 frames (B, H, W, 3) -> normalised latents (B, C, h, w) float32."""
        ae = self._require_ae()
        with self._autocast():
            return ae.encode(frames).float()

    @torch.inference_mode()
    def decode(self, latents: Tensor) -> np.ndarray:
        """Normalised latents (B, C, h, w) -> uint8 frames (B, H, W, 3) numpy."""
        ae = self._require_ae()
        with self._autocast():
            return ae.decode(latents.to(self.device)).cpu().numpy()

    @torch.inference_mode()
    def read_frames(self, frames: np.ndarray | Tensor) -> tuple[np.ndarray, np.ndarray]:
        """uint8 frames (B, H, W, 3) -> agent_xy (B, 2), block_pose (B, 3) float32 numpy.

        With a dynamics task head, both are read off the frames' latents (state and task
        heads); otherwise the image probe reads them."""
        dyn = self.dynamics
        if dyn is not None and dyn.task_head is not None and self.autoencoder is not None:
            z = self.encode(frames)
            with self._autocast():
                agent, block = dyn.read_state(z), dyn.read_task(z)
            return agent.float().cpu().numpy(), block.float().cpu().numpy()
        if self.probe is None:
            raise ModelError("this model has no probe part and no task head")
        agent, block = self.probe.predict(frames)
        return agent.float().cpu().numpy(), block.float().cpu().numpy()

    reconstructs = "autoencoder"

    @property
    def frame_reader(self) -> str:
        """What reads real frames: the task head (through the encoder) or the probe."""
        return self.task_reader

    starts_from_states = False

    def reconstruct(self, frames: np.ndarray, states: np.ndarray | None = None) -> np.ndarray:
        """(N, H, W, 3) uint8 -> the autoencoder's reconstruction (``states`` unused)."""
        del states
        return self.decode(self.encode(frames))

    def last_reading(self, rows: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The reader's (agent (n, 2), block pose (n, 3)) of the last context frames of
        ``rows`` (default: every row)."""
        if self._last_frames is None:
            raise RuntimeError("call start() before last_reading()")
        frames = self._last_frames if rows is None else self._last_frames[list(rows)]
        return self.read_frames(frames)

    @property
    def has_task_reader(self) -> bool:
        """Whether the model can read the task state (a probe or a dynamics task head)."""
        dyn = self.dynamics
        return self.probe is not None or (dyn is not None and dyn.task_head is not None)

    @property
    def task_reader(self) -> str:
        """Which part reads the task state: ``task_head`` or ``probe``."""
        dyn = self.dynamics
        return "task_head" if dyn is not None and dyn.task_head is not None else "probe"

    @torch.inference_mode()
    def start(
        self,
        context_frames: np.ndarray | Tensor | None = None,
        context_actions: np.ndarray | Tensor | None = None,
        seed: int = 0,
        states: np.ndarray | Tensor | None = None,
    ) -> None:
        """Begin B rollouts from real context.

        context_frames: (B, K', H, W, 3) uint8, K' >= 1; context_actions: (B, K'-1, A)
        float32 (the actions applied at all but the last context frame) or None when
        K' == 1. ``seed`` fixes the rollout's noise (own ``torch.Generator``). ``states``
        is ignored: this kind starts from pixels alone.
        """
        del states
        if context_frames is None:
            raise ModelError("the latent_grid kind starts from context frames")
        window, actions, pad = self._prepare_context(context_frames, context_actions)
        self._window, self._actions, self._pad_rows = window, actions, pad
        self._last_frames = to_tensor(context_frames, torch.device("cpu"))[:, -1].clone()
        self._generator = torch.Generator(device=self.device).manual_seed(int(seed))

    @torch.inference_mode()
    def start_slots(
        self,
        slots: np.ndarray | list[int],
        context_frames: np.ndarray | Tensor | None = None,
        context_actions: np.ndarray | Tensor | None = None,
        states: np.ndarray | Tensor | None = None,
    ) -> None:
        """Restart only the batch rows ``slots`` (n,) from new context; the others go on.

        context_frames: (n, K', H, W, 3) uint8; context_actions: (n, K'-1, A) or None, as in
        :meth:`start` (``states`` ignored). Needs a running rollout (:meth:`start`); the
        noise generator is kept, so the restarted rows draw from the same stream as the
        rest of the batch.
        """
        del states
        if self._window is None or self._actions is None or self._last_frames is None:
            raise RuntimeError("call start() before start_slots()")
        if context_frames is None:
            raise ModelError("the latent_grid kind starts from context frames")
        rows = self._rows(slots)
        window, actions, pad = self._prepare_context(context_frames, context_actions)
        if window.shape[0] != len(rows):
            raise ValueError(f"{len(rows)} slots but {window.shape[0]} context rollouts")
        self._window[rows] = window
        self._actions[rows] = actions
        self._pad_rows[rows] = pad
        self._last_frames[rows.cpu()] = to_tensor(context_frames, torch.device("cpu"))[:, -1]

    @torch.inference_mode()
    def keep_slots(self, slots: np.ndarray | list[int]) -> None:
        """Keep only the batch rows ``slots`` (n,), in that order (drops finished rollouts)."""
        if self._window is None or self._actions is None:
            raise RuntimeError("call start() before keep_slots()")
        rows = self._rows(slots)
        self._window = self._window[rows].contiguous()
        self._actions = self._actions[rows].contiguous()
        self._pad_rows = self._pad_rows[rows]
        if self._last_frames is not None:
            self._last_frames = self._last_frames[rows.cpu()].contiguous()

    @property
    def batch_size(self) -> int:
        """Rows of the running rollout (0 before :meth:`start`)."""
        return 0 if self._window is None else int(self._window.shape[0])

    def _prepare_context(
        self, context_frames: np.ndarray | Tensor, context_actions: np.ndarray | Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Latent window (B, K, C, h, w), normalised actions (B, K-1, A), pad rows (B,) bool.

        A pad row had no context actions: its K-1 window actions take the first step's.
        """
        _, dyn = self._require()
        frames = to_tensor(context_frames, self.device)
        if frames.dim() != 5 or frames.shape[1] < 1:
            raise ValueError(f"context_frames must be (B, K', H, W, 3), got {tuple(frames.shape)}")
        self.check_compatible(image_shape=tuple(frames.shape[2:]))
        b, kp = frames.shape[:2]
        k, a_dim = dyn.cfg.context, dyn.cfg.action_dim
        acts = torch.zeros(b, 0, a_dim, device=self.device)
        if context_actions is not None:
            acts = to_tensor(context_actions, self.device).float()
        if tuple(acts.shape) != (b, kp - 1, a_dim):
            raise ValueError(
                f"context_actions must be (B, K'-1, A) = {(b, kp - 1, a_dim)}, "
                f"got {tuple(acts.shape)}"
            )
        frames, acts = frames[:, -k:], acts[:, max(0, acts.shape[1] - (k - 1)) :]
        lat = self.encode(frames.flatten(0, 1)).unflatten(0, (b, frames.shape[1]))
        n_pad = k - lat.shape[1]
        lat = torch.cat([lat[:, :1].expand(-1, n_pad, -1, -1, -1), lat], dim=1)
        acts = dyn.normalise_actions(acts)
        first = acts[:, :1] if acts.shape[1] else torch.zeros(b, 1, a_dim, device=self.device)
        window_actions = torch.cat([first.expand(-1, k - 1 - acts.shape[1], -1), acts], dim=1)
        pad = torch.full((b,), acts.shape[1] == 0 and k > 1, dtype=torch.bool, device=self.device)
        return lat.contiguous(), window_actions.contiguous(), pad

    @torch.inference_mode()
    def step(self, actions: np.ndarray | Tensor) -> StepOutput:
        """Advance every rollout by one frame. actions: (B, A) float32 applied now."""
        a = self._normalised_step_actions(actions)
        return self._advance(a[:, None])[0]

    @torch.inference_mode()
    def step_many(self, actions: np.ndarray | Tensor) -> list[StepOutput]:
        """Advance every rollout by T frames of known actions (B, T, A): open-loop replay.

        A model that predicts ``chunk`` frames per call takes T / chunk calls here (each
        with the real later actions); :meth:`step` would hold the current action instead.
        """
        _, dyn = self._require()
        acts = to_tensor(actions, self.device)
        if acts.dim() != 3 or acts.shape[0] != self.batch_size:
            raise ValueError(f"actions must be (B, T, A), got {tuple(acts.shape)}")
        out: list[StepOutput] = []
        f = dyn.cfg.chunk
        for t0 in range(0, acts.shape[1], f):
            a = torch.stack(
                [
                    self._normalised_step_actions(acts[:, t])
                    for t in range(t0, min(t0 + f, acts.shape[1]))
                ],
                dim=1,
            )
            out.extend(self._advance(a))
        return out

    def _normalised_step_actions(self, actions: np.ndarray | Tensor) -> Tensor:
        """(B, A) raw -> normalised; fills the padded window actions on the first step."""
        _, dyn = self._require()
        if self._window is None or self._actions is None:
            raise RuntimeError("call start() before step()")
        a = dyn.normalise_actions(to_tensor(actions, self.device))
        if tuple(a.shape) != (self._window.shape[0], dyn.cfg.action_dim):
            raise ValueError(f"actions must be (B, A), got {tuple(a.shape)}")
        if bool(self._pad_rows.any()):
            pad = self._pad_rows
            self._actions[pad] = a[pad][:, None].expand(-1, self._actions.shape[1], -1)
            self._pad_rows = torch.zeros_like(pad)
        return a

    def _advance(self, a: Tensor) -> list[StepOutput]:
        """One network call for n <= chunk frames of normalised actions a (B, n, A)."""
        ae, dyn = self._require()
        assert self._window is not None and self._actions is not None
        n = a.shape[1]
        act_window = torch.cat([self._actions, a], dim=1)  # (B, K - 1 + n, A)
        with self._autocast():
            z_all = dyn.sample_chunk(self._window, act_window, self._generator).float()[:, :n]
        outs = []
        for j in range(n):
            with self._autocast():
                z = z_all[:, j]
                frames = ae.decode(z)
                if dyn.cfg.renorm == "reencode":
                    z = ae.encode(frames).float()
                state = dyn.read_state(z).float()
                task = self._task_state(z, frames)
            outs.append(
                StepOutput(
                    frames=frames.cpu().numpy(),
                    state=state.cpu().numpy(),
                    task_state=task,
                    latents=z,
                )
            )
            self._window = torch.cat([self._window[:, 1:], z[:, None]], dim=1)
        self._actions = act_window[:, n:]
        return outs

    def _task_state(self, z: Tensor, frames: Tensor) -> np.ndarray | None:
        """(B, 3) block pose from the dynamics' task head on z, else the probe on frames."""
        assert self.dynamics is not None
        if self.dynamics.task_head is not None:
            return self.dynamics.read_task(z).float().cpu().numpy()
        if self.probe is not None:
            return self.probe.predict(frames)[1].float().cpu().numpy()
        return None
