"""The long closed-loop stability rollout of ``factory eval fidelity``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from factory.envs.model_world import ModelWorld
from factory.eval import metrics as m
from factory.eval.fidelity import StabilityStats
from factory.model.protocol import RolloutModel
from factory.record.runner import EpisodeRunner, EpisodeSpec
from factory.world import WorldObs

Progress = Callable[[str, int, int], None]


def stability_run(
    model: RolloutModel,
    model_id: str,
    reference: np.ndarray,
    frames: int,
    seed: int,
    on_progress: Progress | None = None,
) -> dict[str, Any]:
    """A ``frames``-long closed-loop rollout at batch 1 under ``play`` actions, summarised
    against ``reference`` real frames (N, H, W, 3) uint8 (see :class:`StabilityStats`)."""
    from factory.generators import make_generator

    stats = StabilityStats(
        real_t_fraction=m.mask_fraction(m.t_mask(reference)), real_mean=float(reference.mean())
    )

    def on_step(t: int, obs: WorldObs) -> None:
        finite = bool(np.isfinite(obs.state).all() and np.isfinite(obs.task_state).all())
        stats.add(obs.frames[0], obs.task_state[0], finite)
        if on_progress is not None and (t + 1) % 100 == 0:
            on_progress("stability", t + 1, frames)

    world = ModelWorld(model, batch_size=1, seed=seed, model_id=model_id)
    try:
        runner = EpisodeRunner(world, source="world_model", model_id=model_id, record=False)
        runner.run([make_generator("play")], [EpisodeSpec(seed, frames)], on_step)
    finally:
        world.close()
    return stats.summary()
