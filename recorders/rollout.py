"""Run one generator episode in a ``World`` and package it for the episode store.

The store convention (diffusion_policy's): step ``t`` holds the observation *before*
action ``t``. An episode of ``T`` steps therefore has ``T`` frames and ``T`` actions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from factory.store import EpisodeMeta
from factory.world import World, WorldObs
from recorders.generators.base import ActionGenerator


@dataclass(frozen=True)
class EpisodeResult:
    """One recorded episode.

    data: ``image`` (T, H, W, 3) uint8, ``action`` (T, A) float32, ``state`` (T, S) float32,
    ``gt_state`` (T, K) float32 — the world's task state (privileged in the ground truth).
    """

    data: dict[str, np.ndarray]
    meta: EpisodeMeta


def run_episode(
    world: World,
    generator: ActionGenerator,
    seed: int,
    steps: int,
    *,
    source: str,
    stop_on_success: bool = False,
    config: np.ndarray | None = None,
    model_id: str | None = None,
) -> EpisodeResult:
    """Reset ``world`` (batch size 1) from ``seed`` or ``config`` (C,) and run ``steps`` steps.

    With ``stop_on_success`` the episode ends on the first successful observation, which is
    recorded with a hold action so that the last frame shows the success.
    """
    start = time.perf_counter()
    if config is None:
        obs = world.reset(seeds=np.array([seed]))
    else:
        obs = world.reset(configs=np.asarray(config, dtype=np.float64)[None])
    generator.reset(seed, obs.item(0))
    frames: list[np.ndarray] = []
    actions: list[np.ndarray] = []
    states: list[np.ndarray] = []
    task_states: list[np.ndarray] = []
    scores: list[float] = []
    succeeded = False
    for _ in range(steps):
        action = np.asarray(generator.act(obs.item(0)), dtype=np.float32)
        _append(obs, action, frames, actions, states, task_states)
        obs = world.step(action[None])
        scores.append(float(obs.score[0]))
        succeeded = succeeded or bool(obs.success[0])
        if stop_on_success and succeeded:
            _append(obs, action, frames, actions, states, task_states)
            break
    data = {
        "image": np.stack(frames),
        "action": np.stack(actions),
        "state": np.stack(states),
        "gt_state": np.stack(task_states),
    }
    final = scores[-1] if scores else float(obs.score[0])
    meta = EpisodeMeta(
        source=source,
        generator=generator.name,
        generator_params=generator.params(),
        seed=int(seed),
        model_id=model_id,
        task=world.spec.task,
        success=succeeded,
        score=float(final),
        wall_time_s=time.perf_counter() - start,
        extra={"max_score": float(max(scores, default=final)), "world": world.spec.name},
    )
    return EpisodeResult(data=data, meta=meta)


def _append(
    obs: WorldObs,
    action: np.ndarray,
    frames: list[np.ndarray],
    actions: list[np.ndarray],
    states: list[np.ndarray],
    task_states: list[np.ndarray],
) -> None:
    frames.append(obs.frames[0])
    actions.append(action)
    states.append(obs.state[0].astype(np.float32))
    task_states.append(obs.task_state[0].astype(np.float32))
