"""What the state kinds' part trainers share (``object_state``, ``object_set``).

Both learn a renderer, a dynamics and a reader from a store's frames, actions and world
states (agent xy, then the objects'); this module holds the windows they read, the data
every step function sees and the one way a part is opened and trained.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from factory.train.data import EpisodeData
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

StepFn = Callable[[LoopState], dict[str, Tensor]]


def windows(
    states: np.ndarray, actions: np.ndarray, idx: np.ndarray, device: str | torch.device
) -> tuple[Tensor, Tensor]:
    """Windows (B, T) of frame indices -> states (B, T, S), actions (B, T, 2).

    A repeated index (the padding at an episode start) takes the agent's own position as
    its action: the agent held at rest, as a rollout started from one state assumes."""
    s, a = states[idx], actions[idx].copy()
    rep = np.zeros(idx.shape, dtype=bool)
    rep[:, :-1] = idx[:, :-1] == idx[:, 1:]
    a[rep] = s[rep][:, :2]
    return torch.from_numpy(s).to(device), torch.from_numpy(a).to(device)


@dataclass
class PartData:
    """What every part's step function reads: the data, its states (N, S), the training
    episodes and their frames, the batch and device, and whether the part is new."""

    data: EpisodeData
    states: np.ndarray
    train_eps: np.ndarray
    frames_idx: np.ndarray
    batch: int
    device: str
    fresh: bool  # a new part, not a resumed one
    rng: np.random.Generator


def train_state_part(
    stage: str,
    data: EpisodeData,
    states: np.ndarray,
    out_dir: Path,
    config: Any,
    budget: Budget,
    tc: TrainConfig,
    step_for: Callable[[nn.Module, PartData], StepFn],
    *,
    device: str,
    resume: bool,
    on_progress: ProgressFn | None,
) -> dict[str, float]:
    """Open part ``stage`` (the directory's config updated for it; the module fresh or
    resumed), split ``data`` into training episodes by ``tc`` and train it with the step
    function ``step_for(module, part_data)`` builds; returns the loop's metrics."""
    run = StageRun(out_dir, tc, budget, resume, on_progress, device)
    cfg = stage_config(out_dir, config, stage, resume)
    module = init_part(out_dir, stage, cfg, resume, device)
    train_eps, _ = data.split(tc.val_fraction, seed=tc.seed)
    part = PartData(
        data, states, train_eps, data.frame_indices(train_eps), tc.batch_size, device,
        fresh=not (resume and stage in cfg.parts), rng=np.random.default_rng(tc.seed),
    )  # fmt: skip
    step_fn = step_for(module, part)
    return train_part(run, part=stage, module=module, config=cfg, step_fn=step_fn, data=data.source)
