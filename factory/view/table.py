"""The episode table of the data view: one row per episode, from metadata and block poses.

Nothing here decodes an image: a row comes from the episode's JSON metadata and the last
row of ``data/task_state`` (the block pose, read for every episode in one read of that small
array), so the table of a store of thousands of episodes is ready in a fraction of a
second.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from factory.envs.scoring import Scorer, scorer_for
from factory.errors import FactoryError
from factory.store import EpisodeStore
from factory.store.provenance import is_seeded

log = logging.getLogger(__name__)

POSE_KEY = "task_state"


@dataclass(frozen=True)
class EpisodeRow:
    """One episode as the table shows it. ``final_coverage``: the task score of the
    block pose in the last frame (the simulator's pose for ground-truth episodes, the
    model's own reading for generated ones); None without ``task_state`` or a scorer.
    ``seeded``: generated inside the model from a ground-truth reset, so it can be
    replayed side by side in the ground truth."""

    index: int
    source: str
    generator: str
    model_id: str | None
    length: int
    success: bool | None
    final_coverage: float | None
    seed: int | None
    score: float | None
    task: str
    seeded: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def world_name(store: EpisodeStore) -> str:
    """The ground-truth world a store's episodes belong to (``pusht-model`` -> ``pusht``)."""
    return str(store.attrs.get("env", "pusht")).removesuffix("-model")


def store_scorer(store: EpisodeStore) -> Scorer | None:
    """The task scorer of the store's world, or None when there is none (or no poses)."""
    if POSE_KEY not in store.schema.keys:
        return None
    try:
        return scorer_for(world_name(store))
    except FactoryError:
        log.info("%s: no scorer for env %r; no coverage shown", store.path, world_name(store))
        return None


def final_coverages(store: EpisodeStore) -> np.ndarray:
    """(E,) float64: each episode's last-frame coverage; nan where none can be computed."""
    scorer = store_scorer(store)
    out = np.full(store.n_episodes, np.nan)
    if scorer is None or not store.n_episodes:
        return out
    poses = store.load([POSE_KEY])[POSE_KEY]
    last = poses[store.episode_ends - 1]
    score, _ = scorer(np.asarray(last, np.float64))
    out[:] = score
    return out


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def episode_rows(store: EpisodeStore) -> list[EpisodeRow]:
    """Every episode's :class:`EpisodeRow`, in store order (metadata and poses only)."""
    metas = store.all_meta()
    lengths = store.episode_lengths
    coverage = final_coverages(store)
    return [
        EpisodeRow(
            index=i,
            source=m.source,
            generator=m.generator,
            model_id=m.model_id,
            length=int(lengths[i]),
            success=m.success,
            final_coverage=_finite(float(coverage[i])),
            seed=m.seed,
            score=_finite(m.score),
            task=m.task,
            seeded=is_seeded(m),
        )
        for i, m in enumerate(metas)
    ]


def coverage_curve(poses: np.ndarray, scorer: Scorer) -> np.ndarray:
    """poses (T, K) block poses -> (T,) float32 coverage of each frame."""
    score, _ = scorer(np.asarray(poses, np.float64))
    return np.asarray(score, np.float32)
