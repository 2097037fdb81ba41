"""What one generated episode is made from (:class:`GenJob`) and what comes out of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from factory.record.recorder import EpisodeResult, Policy

SlotGenerator = Policy
"""A closed-loop action source (see :class:`factory.record.recorder.Policy`)."""


@dataclass(frozen=True)
class GenJob:
    """One episode to generate.

    The initial frame comes from ``context_frames`` (K', H, W, 3) uint8 with
    ``context_actions`` (K'-1, A) when given (real frames from a store; ``context_states``
    (K', S) their world states where the store has them), otherwise from the
    ground-truth env's reset to ``config`` (C,) or, without one, to ``seed``. The generator
    is ``generator`` built with ``generator_params``; ``params_extra`` (e.g. a replay's
    perturbation) joins its recorded parameters and ``extra`` the episode's ``meta.extra``.
    """

    seed: int
    generator: str
    generator_params: dict[str, Any]
    steps: int
    stop_on_success: bool = False
    config: np.ndarray | None = None
    context_frames: np.ndarray | None = None
    context_actions: np.ndarray | None = None
    context_states: np.ndarray | None = None
    params_extra: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"a job needs steps >= 1, got {self.steps}")


GeneratedEpisode = EpisodeResult
"""One generated episode: ``task_state`` is the model's reading of the block pose (its
reader's or its state's), ``state`` the model's agent xy (see
:class:`factory.record.EpisodeResult`)."""
