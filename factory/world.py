"""The ``World`` interface: one contract for the ground-truth env and the world model.

Everything that acts (recording node, generators, policy evaluation) steps a ``World``.
A world holds ``batch_size`` independent episodes that advance in lockstep.

Shapes: ``B`` batch, ``H, W`` image size, ``A`` action dim, ``S`` robot-state dim,
``K`` task-state dim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class WorldSpec:
    """Static description of a world.

    ``action_meaning`` says what an action is, e.g. "absolute agent target xy in board
    pixels [0, 512]^2". ``task_state_names`` names the task-state vector, e.g.
    ("block_x", "block_y", "block_angle"). ``cameras`` names the views, the main one
    (``WorldObs.frames``) first and the others in ``WorldObs.views``; ``()`` means one
    unnamed main camera (PushT).
    """

    name: str
    image_shape: tuple[int, int, int]
    action_dim: int
    state_dim: int
    fps: float
    action_meaning: str
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    task_state_names: tuple[str, ...] = ()
    config_names: tuple[str, ...] = ()
    task: str = ""
    cameras: tuple[str, ...] = ()

    @property
    def extra_cameras(self) -> tuple[str, ...]:
        """The cameras after the main one: the keys of ``WorldObs.views``."""
        return self.cameras[1:]


@dataclass(frozen=True)
class Observation:
    """One episode's view of a world at one time step.

    frame: (H, W, 3) uint8 the main camera; state: (S,) float32; task_state: (K,) float32
    (privileged ground truth in the real env, the probe's estimate inside the model);
    views: camera name -> (H, W, 3) uint8 for every camera after the main one.
    """

    frame: np.ndarray
    state: np.ndarray
    task_state: np.ndarray
    score: float
    success: bool
    views: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class WorldObs:
    """A batch of observations.

    frames: (B, H, W, 3) uint8 the main camera; state: (B, S) float32; task_state: (B, K)
    float32; score: (B,) float32 (PushT: goal coverage in [0, 1]); success: (B,) bool.
    ``views`` holds every camera after the main one (``spec.cameras[1:]``), each
    (B, H, W, 3) uint8 like ``frames``. ``info`` holds backend-specific extras (e.g.
    ``contact``: (B,) bool in PushT).
    """

    frames: np.ndarray
    state: np.ndarray
    task_state: np.ndarray
    score: np.ndarray
    success: np.ndarray
    info: dict[str, np.ndarray] = field(default_factory=dict)
    views: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return int(self.frames.shape[0])

    def item(self, i: int) -> Observation:
        """Episode ``i`` of the batch as an :class:`Observation`."""
        return Observation(
            frame=self.frames[i],
            state=self.state[i],
            task_state=self.task_state[i],
            score=float(self.score[i]),
            success=bool(self.success[i]),
            views={name: frames[i] for name, frames in self.views.items()},
        )


@runtime_checkable
class World(Protocol):
    """A batched, resettable environment that renders frames.

    ``reset`` takes either ``seeds`` (B,) — a seeded random initial configuration — or
    ``configs`` (B, C) — an explicit initial configuration in the world's own convention
    (PushT: agent x, y, block x, y, angle as ``info["block_pose"]`` reports them).
    ``step`` takes actions (B, A) float32 and returns the next observation batch.
    """

    spec: WorldSpec
    batch_size: int

    def reset(
        self, seeds: np.ndarray | None = None, configs: np.ndarray | None = None
    ) -> WorldObs: ...

    def step(self, actions: np.ndarray) -> WorldObs: ...

    def close(self) -> None: ...
