"""Collect episodes in a ground-truth env with a scripted generator, into one store.

Episode ``i`` uses seed ``seed + i``. With ``append``, episodes whose generator and seed
are already in the store are skipped, so rerunning an interrupted command resumes it.
With ``workers > 1`` several env processes feed the single writer (this process).
"""

from __future__ import annotations

import logging
import multiprocessing as mp
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from factory.envs import make_world, recorded_world
from factory.errors import FactoryError
from factory.generators import EXPERTS, check_generator_world, labels_actions, make_generator
from factory.record import (
    EpisodeResult,
    check_output,
    close_output,
    done_episodes,
    open_output,
)
from factory.record.runner import run_episode
from factory.store import EpisodeStore
from factory.world import WorldSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectConfig:
    """What ``factory collect`` does."""

    out: Path
    env: str = "pusht"
    generator: str = "play"
    episodes: int = 10
    seed: int = 0
    steps: int = 200
    resolution: int = 96
    workers: int = 1
    append: bool = False
    source: Path | None = None
    stop_on_success: bool | None = None
    generator_params: dict[str, Any] = field(default_factory=dict)
    fsync: bool = False  # a durable output store: every commit fsynced


@dataclass(frozen=True)
class EpisodeJob:
    """One episode for a worker: ``config`` (C,) overrides the seeded reset (replay)."""

    seed: int
    generator_params: dict[str, Any]
    config: np.ndarray | None = None


def plan_jobs(
    cfg: CollectConfig, done: set[tuple[str, int | None]], spec: WorldSpec
) -> list[EpisodeJob]:
    """The episodes still to record in the world of ``spec``: seeds ``seed .. seed+N-1``
    not yet ``done``."""
    replay = _replay_sources(cfg, spec) if cfg.generator == "replay" else None
    jobs = []
    for i in range(cfg.episodes):
        seed = cfg.seed + i
        if (cfg.generator, seed) in done:
            continue
        params = dict(cfg.generator_params)
        config = None
        if replay is not None:
            actions, config = replay[i % len(replay)]
            params["actions"] = actions
            params["config"] = config
        jobs.append(EpisodeJob(seed=seed, generator_params=params, config=config))
    return jobs


def _replay_sources(cfg: CollectConfig, spec: WorldSpec) -> list[tuple[np.ndarray, np.ndarray]]:
    """(actions (T, A), initial config (C,)) of every episode of the ``--source`` store;
    refuses a source of another world than ``spec``'s (its env, or its config's width)."""
    if cfg.source is None:
        raise FactoryError("--generator replay needs --source STORE (the episodes to replay)")
    with EpisodeStore.open(cfg.source, mode="r") as src:
        for key in ("state", "task_state"):
            if key not in src.schema.keys:
                raise FactoryError(f"{cfg.source} has no data/{key}, so it cannot be replayed")
        recorded = recorded_world(src.attrs)
        width = src.schema.keys["state"].shape[0] + src.schema.keys["task_state"].shape[0]
        want = spec.state_dim + len(spec.task_state_names)
        if (recorded is not None and recorded != spec.name) or width != want:
            raise FactoryError(
                f"{cfg.source} holds {recorded or 'unknown'} episodes ({width} state numbers), "
                f"the {spec.name} world starts from {want}; replay a {spec.name} store"
            )
        out = []
        for ep in src:
            config = np.concatenate([ep["state"][0], ep["task_state"][0]]).astype(np.float64)
            actions = np.asarray(ep["action"], np.float32)
            try:  # the replay generator's own checks (finite actions and config), up front
                make_generator("replay", actions=actions, config=config)
            except FactoryError as err:
                raise FactoryError(f"{cfg.source} episode {ep.index}: {err}") from None
            out.append((actions, config))
    if not out:
        raise FactoryError(f"{cfg.source} holds no episodes to replay")
    return out


def _worker_run(cfg: CollectConfig, job: EpisodeJob) -> EpisodeResult:
    world = _worker_world(cfg.env, cfg.resolution)
    generator = make_generator(cfg.generator, **job.generator_params)
    stop = cfg.stop_on_success if cfg.stop_on_success is not None else cfg.generator in EXPERTS
    steps = len(job.generator_params["actions"]) if cfg.generator == "replay" else cfg.steps
    return run_episode(
        world, generator, job.seed, steps, source="real", stop_on_success=stop, config=job.config
    )


_WORLDS: dict[tuple[str, int], Any] = {}


def _worker_world(env: str, resolution: int) -> Any:
    """One env per process, reused across episodes."""
    key = (env, resolution)
    if key not in _WORLDS:
        _WORLDS[key] = make_world(env, batch_size=1, resolution=resolution)
    return _WORLDS[key]


def _results(cfg: CollectConfig, jobs: list[EpisodeJob]) -> Iterator[EpisodeResult]:
    if cfg.workers <= 1:
        for job in jobs:
            yield _worker_run(cfg, job)
        return
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=cfg.workers, mp_context=ctx) as pool:
        yield from pool.map(_worker_run, [cfg] * len(jobs), jobs)


@dataclass
class CollectPlan:
    """An opened output store and the episodes still to record in it."""

    cfg: CollectConfig
    store: EpisodeStore
    jobs: list[EpisodeJob]
    created: bool = False  # the store is new: a run that fails before a commit removes it

    @property
    def skipped(self) -> int:
        return self.cfg.episodes - len(self.jobs)


def prepare_collect(cfg: CollectConfig) -> CollectPlan:
    """Validate everything and open the output, before any episode runs.

    All bad input (unknown env or generator, a generator for another world, N <= 0, an
    existing output without ``append``, another schema, a locked store, a missing replay
    source or one with non-finite actions) raises here.
    """
    if cfg.workers < 1:
        raise FactoryError(f"--workers must be >= 1, got {cfg.workers}")
    if cfg.episodes <= 0:
        raise FactoryError(f"--episodes must be positive, got {cfg.episodes}")
    if cfg.steps <= 0:
        raise FactoryError(f"--steps must be positive, got {cfg.steps}")
    make_generator(cfg.generator, **_probe_params(cfg))  # fail fast on an unknown generator
    spec = _worker_world(cfg.env, cfg.resolution).spec
    check_generator_world(cfg.generator, spec.name)
    labelled = labels_actions(cfg.generator_params)
    check_output(cfg.out, spec, cfg.resolution, cfg.append, labelled)
    jobs = plan_jobs(cfg, done_episodes(cfg.out), spec)
    created = not cfg.out.exists()
    store = open_output(cfg.out, spec, cfg.resolution, cfg.append, cfg.fsync, labelled)
    return CollectPlan(cfg=cfg, store=store, jobs=jobs, created=created)


def execute_collect(
    plan: CollectPlan, on_episode: Callable[[int, int, EpisodeResult], None] | None = None
) -> dict[str, Any]:
    """Record the planned episodes; every finished episode is committed at once.

    ``on_episode(done, total, result)`` is called after each commit. Closes the store and
    returns a summary.
    """
    store, failed = plan.store, True
    try:
        frames = successes = 0
        for n, result in enumerate(_results(plan.cfg, plan.jobs), start=1):
            store.append_episode(result.data, result.meta)
            frames += len(result.data["action"])
            successes += bool(result.meta.success)
            if on_episode is not None:
                on_episode(n, len(plan.jobs), result)
        summary = store.summary()
        failed = False
    finally:
        close_output(store, plan.created, failed)
    return {
        "recorded": len(plan.jobs),
        "skipped": plan.skipped,
        "recorded_frames": frames,
        "recorded_successes": successes,
        "store": summary,
    }


def run_collect(
    cfg: CollectConfig, on_episode: Callable[[int, int, EpisodeResult], None] | None = None
) -> dict[str, Any]:
    """:func:`prepare_collect` then :func:`execute_collect`."""
    return execute_collect(prepare_collect(cfg), on_episode)


def _probe_params(cfg: CollectConfig) -> dict[str, Any]:
    """Parameters that make a throwaway generator for validating the name."""
    if cfg.generator == "replay":  # its --param may only be the noise (checked as it is)
        return {"actions": np.zeros((1, 2), np.float32), "config": np.zeros(5)} | dict(
            cfg.generator_params
        )
    return dict(cfg.generator_params)
