"""The continuous-batching rollout engine: B episode slots of one model, in lockstep.

Every model step advances all live slots with one forward pass. Each slot runs its own
generator closed-loop on what the model returns: the frame, and the robot state and block
pose as the model has them (``ModelWorld`` fills them: an object-state model's own state,
a latent model's heads or probe). Each slot starts from its context's exact state where
it is known (a seeded reset, a store with the state). When a slot's episode ends (its
step budget, or the model's success when the job asks to stop on success), the episode
is yielded and the slot restarts at once with the next job
(:meth:`RolloutModel.start_slots`); when the jobs run out, finished slots are dropped
(:meth:`RolloutModel.keep_slots`) so the tail runs on a smaller batch.

The stepping, recording and end-of-episode rule are the episode runner's refilling mode
(:meth:`factory.record.runner.EpisodeRunner.stream`); this module adds only what is the
model's: a job's context and starting the model's rows from it (:class:`ContextSlots`).

The model's sampling noise is one seeded stream per engine run, shared by the batch rows,
so a generated episode's frames depend on its batch neighbours; its actions depend only on
its seed, its initial frame and what the model showed it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from factory.envs import make_world
from factory.envs.model_world import ModelWorld, world_state
from factory.errors import FactoryError
from factory.gen.jobs import GeneratedEpisode, GenJob, SlotGenerator
from factory.gen.robustness import RobustConfig, RobustnessCheck
from factory.model.protocol import RolloutModel
from factory.model.registry import world_of
from factory.record.runner import EpisodeRunner, EpisodeSpec, Start
from factory.world import World

log = logging.getLogger(__name__)

MakeGenerator = Callable[..., SlotGenerator]
"""``make_generator(name, **params)`` -> a fresh generator for one episode."""


@dataclass(frozen=True)
class _Init:
    """A job's context: frames (K', H, W, 3) uint8, actions (K'-1, A) or None, world
    states (K', S) where known, provenance."""

    frames: np.ndarray
    actions: np.ndarray | None
    kind: str  # "seed" | "config" | "store"
    extra: dict[str, Any] = field(default_factory=dict)
    states: np.ndarray | None = None


class ContextSlots:
    """The engine's rows of ``world``: each :class:`GenJob` starts from its context.

    The first batch is ``size`` rows of the first job's context (the rollout's seed is
    ``seed``), then each job restarts its own row; a job's generator comes from
    ``make_generator``. Rows can be dropped (:meth:`ModelWorld.keep_slots`).
    """

    def __init__(
        self,
        world: ModelWorld,
        renderer: World,
        make_generator: MakeGenerator,
        size: int,
        seed: int,
    ) -> None:
        self.world, self.renderer, self.make_generator = world, renderer, make_generator
        self.size, self.seed = size, seed

    def open(self, jobs: list[GenJob]) -> list[Start]:
        """Start the rollout: ``size`` rows of the first context, then each job in its row."""
        inits = [self._initial(j) for j in jobs]
        b = self.size
        first = inits[0]
        self.world.batch_size = b  # a previous run may have shrunk it

        def rep(x: np.ndarray | None) -> np.ndarray | None:
            return None if x is None else np.repeat(x[None], b, axis=0)

        frames = np.repeat(first.frames[None], b, axis=0)
        self.world.reset_from_context(
            frames, rep(first.actions), seed=self.seed, states=rep(first.states)
        )
        if len(jobs) < b:
            self.world.keep_slots(list(range(len(jobs))))
        return self._start_rows(list(range(len(jobs))), jobs, inits)

    def start(self, rows: list[int], jobs: list[GenJob]) -> list[Start]:
        return self._start_rows(rows, jobs, [self._initial(j) for j in jobs])

    def keep(self, rows: list[int]) -> bool:
        self.world.keep_slots(rows)
        return True

    def _start_rows(self, rows: list[int], jobs: list[GenJob], inits: list[_Init]) -> list[Start]:
        """Restart ``rows`` with ``jobs`` (grouped by context shape); their new episodes."""
        starts: dict[int, Start] = {}
        groups: dict[tuple[int, bool, bool], list[int]] = {}
        for i, init in enumerate(inits):
            key = (len(init.frames), init.actions is None, init.states is None)
            groups.setdefault(key, []).append(i)
        for members in groups.values():
            frames = np.stack([inits[i].frames for i in members])
            acts = [inits[i].actions for i in members]
            actions = None if acts[0] is None else np.stack(acts)  # type: ignore[arg-type]
            sts = [inits[i].states for i in members]
            states = None if sts[0] is None else np.stack(sts)  # type: ignore[arg-type]
            obs = self.world.start_slots([rows[i] for i in members], frames, actions, states)
            for k, i in enumerate(members):
                job = jobs[i]
                gen = self.make_generator(job.generator, **job.generator_params)
                starts[i] = Start(gen, self._spec(job, inits[i]), obs.item(k))
        return [starts[i] for i in range(len(jobs))]

    def _spec(self, job: GenJob, init: _Init) -> EpisodeSpec:
        extra = {"task_state": self.world.task_reader, "initial": init.kind, **init.extra}
        return EpisodeSpec(
            job.seed,
            job.steps,
            job.stop_on_success,
            extra=extra | job.extra,
            params=job.params_extra,
        )

    def _initial(self, job: GenJob) -> _Init:
        """The job's context: real frames from a store, or a ground-truth reset's frame."""
        if job.context_frames is not None:
            frames = np.asarray(job.context_frames, np.uint8)
            if frames.ndim != 4 or len(frames) < 1:
                raise FactoryError(f"context frames must be (K', H, W, 3), got {frames.shape}")
            acts = job.context_actions
            acts = None if acts is None or len(frames) == 1 else acts
            return _Init(frames, acts, "store", states=job.context_states)
        if job.config is not None:
            obs = self.renderer.reset(configs=np.asarray(job.config, np.float64)[None])
            kind = "config"
        else:
            obs = self.renderer.reset(seeds=np.array([job.seed]))
            kind = "seed"
        config = [float(v) for v in (*obs.state[0], *obs.task_state[0])]
        return _Init(obs.frames[:1], None, kind, {"initial_config": config}, world_state(obs)[0])


class RolloutEngine:
    """Runs :class:`GenJob` s through ``batch_size`` slots of one world model.

    ``renderer`` (batch size 1) renders seeded or configured initial frames (default: the
    ``world`` ground truth at the model's resolution; ``world`` defaults to the one the
    model's config names, else PushT). ``seed`` seeds the model's noise;
    ``success_score`` is :class:`ModelWorld`'s stricter success reading. ``robust``
    reads every successful episode's robustness (:mod:`factory.gen.robustness`) into its
    ``meta.extra["robustness"]``, for the writer's keep rule.
    """

    def __init__(
        self,
        model: RolloutModel,
        make_generator: MakeGenerator,
        *,
        batch_size: int = 16,
        world: str | None = None,
        renderer: World | None = None,
        seed: int = 0,
        model_id: str = "",
        success_score: float | None = None,
        robust: RobustConfig | None = None,
    ) -> None:
        if batch_size < 1:
            raise FactoryError(f"--batch-size must be >= 1, got {batch_size}")
        world = world or world_of(model.config)
        self.world_name = world
        res = model.config.image_shape[0]
        self.renderer = renderer or make_world(world, batch_size=1, resolution=res)
        self.world = ModelWorld(
            model,
            world=world,
            batch_size=batch_size,
            renderer=self.renderer,
            seed=seed,
            success_score=success_score,
        )
        self.batch_size = batch_size
        self.make_generator = make_generator
        self.model_id = model_id
        self.seed = seed
        self.slots = ContextSlots(self.world, self.renderer, make_generator, batch_size, seed)
        self.robust = None if robust is None else RobustnessCheck(model, world, robust)

    def run(self, jobs: Iterable[GenJob]) -> Iterator[GeneratedEpisode]:
        """Generate every job's episode; yields each as soon as it ends (any order).

        ``jobs`` is read lazily: a job is taken only when a slot is free for it.
        """
        runner = EpisodeRunner(self.world, source="world_model", model_id=self.model_id)
        episodes = runner.stream(jobs, self.slots)
        return episodes if self.robust is None else self._read_robustness(episodes)

    def _read_robustness(self, episodes: Iterator[GeneratedEpisode]) -> Iterator[GeneratedEpisode]:
        """The episodes, each success with its robustness (and how it was read) in its
        meta. A generator, not a ``map``: Ray's streaming calls ``send`` on it."""
        assert self.robust is not None
        for ep in episodes:
            if ep.meta.success:
                value = self.robust(ep.data, int(ep.meta.seed or 0))
                ep.meta.extra["robustness"] = value
                ep.meta.extra["robustness_config"] = self.robust.cfg.to_dict()
            yield ep

    def close(self) -> None:
        self.world.close()
