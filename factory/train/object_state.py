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
from torch import Tensor

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
    StageRun,
    TrainConfig,
    init_part,
    stage_config,
    train_part,
)

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
            f"{data.source} has no object state (data/gt_state); the object_state kind "
            "trains on it. For pixels only, use --kind latent_grid"
        )
    return np.concatenate([data.state[:, :2], data.task_state[:, :3]], axis=1).astype(np.float32)


def _frames(data: EpisodeData, idx: np.ndarray, device: str | torch.device) -> Tensor:
    """uint8 frames[idx] -> (B, 3, H, W) float in [0, 1]."""
    x = torch.from_numpy(data.frames[idx]).to(device)
    return x.permute(0, 3, 1, 2).float() / 255.0


def _windows(
    states: np.ndarray, actions: np.ndarray, idx: np.ndarray, device: str | torch.device
) -> tuple[Tensor, Tensor]:
    """Windows (B, T) of frame indices -> states (B, T, 5), actions (B, T, 2).

    A repeated index (the padding at an episode start) takes the agent's own position as
    its action: the agent held at rest, as a rollout started from one state assumes."""
    s, a = states[idx], actions[idx].copy()
    rep = np.zeros(idx.shape, dtype=bool)
    rep[:, :-1] = idx[:, :-1] == idx[:, 1:]
    a[rep] = s[rep][:, :2]
    return torch.from_numpy(s).to(device), torch.from_numpy(a).to(device)


def _train_run(
    stage: str, out_dir: Path, budget: Budget, device: str, resume: bool,
    on_progress: ProgressFn | None, train_cfg: TrainConfig | None,
) -> StageRun:  # fmt: skip
    tc = train_cfg or STAGE_TRAIN[stage]
    return StageRun(out_dir, tc, budget, resume, on_progress, device)


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
    states = world_states(data)
    run = _train_run(stage, out_dir, budget, device, resume, on_progress, train_cfg)
    cfg = stage_config(out_dir, config, stage, resume)
    module = init_part(out_dir, stage, cfg, resume, device)
    rng = np.random.default_rng(run.cfg.seed)
    train_eps, _ = data.split(run.cfg.val_fraction, seed=run.cfg.seed)
    frames_idx = data.frame_indices(train_eps)
    bsz = run.cfg.batch_size
    if stage == "renderer":
        assert isinstance(module, SpriteRenderer)
        if not (resume and "renderer" in cfg.parts):
            module.init_background(_frames(data, rng.choice(frames_idx, 512), device))

        def step_fn(st: LoopState) -> dict[str, Tensor]:
            idx = sample_frames(frames_idx, bsz, st.rng)
            s = torch.from_numpy(states[idx]).to(device)
            loss, logs = module.loss(s, _frames(data, idx, device), st.progress)
            return {"loss": loss, **logs}

    elif stage == "reader":
        assert isinstance(module, StateReader)

        def step_fn(st: LoopState) -> dict[str, Tensor]:
            idx = sample_frames(frames_idx, bsz, st.rng)
            s = torch.from_numpy(states[idx]).to(device)
            loss, logs = module.loss(_frames(data, idx, device), s)
            return {"loss": loss, **logs}

    elif stage == "dynamics":
        assert isinstance(module, ObjectDynamics)
        sched = schedule or DynamicsSchedule()
        samplers: dict[int, WindowSampler] = {}
        if not (resume and "dynamics" in cfg.parts):
            fit = WindowSampler(data, 3, train_eps).sample(min(50_000, len(data.frames)), rng)
            res = module.fit_agent(*_windows(states, data.actions, fit, device))
            log.info("agent map fitted by least squares: %.4f px", res)
        module.agent.requires_grad_(False)  # solved exactly; Adam's steps would only jitter it

        def step_fn(st: LoopState) -> dict[str, Tensor]:
            u = sched.unroll(st.progress)
            if u not in samplers:
                samplers[u] = WindowSampler(data, u + 2, train_eps, sched.pad_prob, 1)
            s, a = _windows(states, data.actions, samplers[u].sample(bsz, st.rng), device)
            loss, logs = module.loss(s, a, u, st.generator)
            return {"loss": loss, "unroll": torch.tensor(float(u)), **logs}

    else:
        raise FactoryError(f"unknown object_state stage {stage!r}; expected {', '.join(STAGES)}")
    return train_part(run, part=stage, module=module, config=cfg, step_fn=step_fn,
                      data=data.source)  # fmt: skip
