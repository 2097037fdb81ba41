"""Training stages of the ``object_state`` kind: renderer, dynamics, reader.

Each part's module returns ``(loss, logs)`` and every stage runs through the one loop
(:func:`factory.train.loop.train_part`): budgets, checkpoints and resume as for any part.

- ``renderer``: frames against their true states (MSE; logs PSNR).
- ``dynamics``: the agent's linear map is fitted by least squares on 50,000 transitions
  (then frozen: it is exact to about 0.03 px), then the block MLP trains on self-unrolled
  windows of states and actions; the unroll grows from 4 to 16 steps over the budget; a
  tenth of the windows start at an episode start with the padding a rollout uses (the
  agent at rest).
- ``reader``: the CNN on frames against their states (refinement needs no training).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from factory.errors import FactoryError
from factory.model.object_state.config import ObjectStateConfig
from factory.model.object_state.dynamics import ObjectDynamics
from factory.model.object_state.reader import StateReader
from factory.model.object_state.renderer import SpriteRenderer
from factory.train.data import EpisodeData, WindowSampler, sample_frames
from factory.train.loop import (
    Budget,
    LoopState,
    ProgressFn,
    TrainConfig,
)
from factory.train.state_parts import PartData, StepFn, train_state_part, windows

log = logging.getLogger(__name__)

STAGES = ("renderer", "dynamics", "reader")
SHARES = {"renderer": 0.15, "dynamics": 0.55, "reader": 0.30}
STAGE_TRAIN = {
    "renderer": TrainConfig(batch_size=32, lr=3e-2, warmup_steps=50),
    "dynamics": TrainConfig(batch_size=256, lr=1e-3, warmup_steps=200),
    "reader": TrainConfig(batch_size=64, lr=2e-3, warmup_steps=100),
}


@dataclass(frozen=True)
class DynamicsSchedule:
    """Unroll lengths over the budget: ``unrolls[i]`` from progress ``at[i]`` on."""

    unrolls: tuple[int, ...] = (4, 8, 16)
    at: tuple[float, ...] = (0.0, 0.25, 0.5)
    pad_prob: float = 0.1

    def unroll(self, progress: float) -> int:
        return [u for u, a in zip(self.unrolls, self.at, strict=True) if progress >= a][-1]


def world_states(data: EpisodeData) -> np.ndarray:
    """(N, 5) float32 agent xy + block pose; FactoryError without the object state."""
    if data.task_state is None:
        raise FactoryError(
            f"{data.source} has no object state (data/task_state); the object_state kind "
            "trains on it. For pixels only, use --kind latent_grid"
        )
    return np.concatenate([data.state[:, :2], data.task_state[:, :3]], axis=1).astype(np.float32)


def _frames(data: EpisodeData, idx: np.ndarray, device: str | torch.device) -> Tensor:
    """uint8 frames[idx] -> (B, 3, H, W) float in [0, 1]."""
    x = torch.from_numpy(data.frames[idx]).to(device)
    return x.permute(0, 3, 1, 2).float() / 255.0


def _renderer_step(module: SpriteRenderer, st: PartData) -> StepFn:
    if st.fresh:
        module.init_background(_frames(st.data, st.rng.choice(st.frames_idx, 512), st.device))

    def step_fn(ls: LoopState) -> dict[str, Tensor]:
        idx = sample_frames(st.frames_idx, st.batch, ls.rng)
        s = torch.from_numpy(st.states[idx]).to(st.device)
        loss, logs = module.loss(s, _frames(st.data, idx, st.device), ls.progress)
        return {"loss": loss, **logs}

    return step_fn


def _reader_step(module: StateReader, st: PartData) -> StepFn:
    def step_fn(ls: LoopState) -> dict[str, Tensor]:
        idx = sample_frames(st.frames_idx, st.batch, ls.rng)
        s = torch.from_numpy(st.states[idx]).to(st.device)
        loss, logs = module.loss(_frames(st.data, idx, st.device), s)
        return {"loss": loss, **logs}

    return step_fn


def _dynamics_step(module: ObjectDynamics, st: PartData, sched: DynamicsSchedule) -> StepFn:
    samplers: dict[int, WindowSampler] = {}
    actions = st.data.actions
    if st.fresh:
        n = min(50_000, len(st.states))
        fit = WindowSampler(st.data, 3, st.train_eps).sample(n, st.rng)
        res = module.fit_agent(*windows(st.states, actions, fit, st.device))
        log.info("agent map fitted by least squares: %.4f px", res)
    module.agent.requires_grad_(False)  # solved exactly; Adam's steps would only jitter it

    def step_fn(ls: LoopState) -> dict[str, Tensor]:
        u = sched.unroll(ls.progress)
        if u not in samplers:
            samplers[u] = WindowSampler(st.data, u + 2, st.train_eps, sched.pad_prob, 1)
        s, a = windows(st.states, actions, samplers[u].sample(st.batch, ls.rng), st.device)
        loss, logs = module.loss(s, a, u, ls.generator)
        return {"loss": loss, "unroll": torch.tensor(float(u)), **logs}

    return step_fn


def train_object_part(
    stage: str,
    data: EpisodeData,
    out_dir: Path,
    config: ObjectStateConfig,
    budget: Budget,
    *,
    device: str = "cpu",
    resume: bool = False,
    on_progress: ProgressFn | None = None,
    train_cfg: TrainConfig | None = None,
    schedule: DynamicsSchedule | None = None,
) -> dict[str, float]:
    """Train part ``stage`` (renderer, dynamics or reader) of an object_state model."""
    if stage not in STAGES:
        raise FactoryError(f"unknown object_state stage {stage!r}; expected {', '.join(STAGES)}")
    states = world_states(data)
    sched = schedule or DynamicsSchedule()

    def step_for(module: nn.Module, st: PartData) -> StepFn:
        if isinstance(module, SpriteRenderer):
            return _renderer_step(module, st)
        if isinstance(module, StateReader):
            return _reader_step(module, st)
        assert isinstance(module, ObjectDynamics)
        return _dynamics_step(module, st, sched)

    tc = train_cfg or STAGE_TRAIN[stage]
    return train_state_part(stage, data, states, out_dir, config, budget, tc, step_for,
                            device=device, resume=resume, on_progress=on_progress)  # fmt: skip
