"""The one episode runner: closed-loop episodes of one ``World``, in lockstep or refilling.

Like diffusion_policy's env runner: every step asks each live row's policy for its action
on that row's observation, steps the whole batch once, and hands each row the world's
answer (:class:`LiveEpisode`: it records what the row saw, through
:class:`~factory.record.recorder.EpisodeRecorder`, and applies the one end rule).

Two modes of one loop:

- :meth:`EpisodeRunner.run`, a lockstep batch: B episodes reset together in the world's B
  rows. A row whose episode has ended holds its last action until the batch is done and
  records nothing more. Collection in the ground truth and the long stability rollout run
  here.
- :meth:`EpisodeRunner.stream`, continuous batching: jobs go into rows through a
  :class:`Slots`, which knows how to start rows of its world. A row whose episode ends
  restarts at once with the next job; when the jobs run out, the finished rows are dropped
  (the batch shrinks) where the world can, and hold otherwise. The world model's generation
  engine (:mod:`factory.gen.engine`) is this mode with the model's contexts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import count, islice
from typing import Any, Protocol

import numpy as np

from factory.errors import FactoryError
from factory.record.recorder import EpisodeRecorder, EpisodeResult, Labelled, Policy
from factory.world import Observation, World, WorldObs

StepHook = Callable[[int, WorldObs], None]
"""``on_step(t, obs)``: called with the batch's observation after step ``t`` (0-based)."""


@dataclass(frozen=True)
class EpisodeSpec:
    """One row's episode: reset from ``seed`` (or ``config`` (C,)), at most ``steps`` steps.

    With ``stop_on_success`` it ends on its first successful observation, which is recorded
    with a hold action so that the last frame shows the success. ``extra`` joins the
    episode's ``meta.extra`` and ``params`` its recorded generator parameters.
    """

    seed: int
    steps: int
    stop_on_success: bool = False
    config: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Start:
    """A row's new episode: its policy, its spec and its first observation."""

    policy: Policy
    spec: EpisodeSpec
    obs: Observation


class Slots[J](Protocol):
    """How a refilling run puts jobs ``J`` into the rows of its world.

    ``size``: the rows of the first batch. ``open(jobs)`` starts the world with one row per
    job (at most ``size``); ``start(rows, jobs)`` restarts only ``rows`` (the others go on);
    ``keep(rows)`` drops every other row, so the world's batch shrinks to ``len(rows)``,
    and says whether it could (if not, finished rows hold their last action). Both ``open``
    and ``start`` return the new episodes in job order.
    """

    size: int

    def open(self, jobs: list[J]) -> list[Start]: ...

    def start(self, rows: list[int], jobs: list[J]) -> list[Start]: ...

    def keep(self, rows: list[int]) -> bool: ...


class LiveEpisode:
    """One row's episode in progress: its policy, recorder and spec, and the end rule.

    ``index`` is the job's place in the run's input order; ``record`` False keeps no frames.
    """

    def __init__(self, start: Start, index: int, record: bool = True) -> None:
        self.policy, self.spec, self.obs = start.policy, start.spec, start.obs
        self.index, self.record = index, record
        self.rec = EpisodeRecorder()
        self.steps = 0
        self.label: np.ndarray | None = None  # the policy's label of its last action
        self.policy.reset(self.spec.seed, self.obs)

    def act(self) -> np.ndarray:
        """The policy's next action (A,) float32, recorded with the observation it answers."""
        action = np.asarray(self.policy.act(self.obs), np.float32)
        if self.record:
            self.label = self.policy.last_label if isinstance(self.policy, Labelled) else None
            self.rec.record(self.obs, action, self.label)
        return action

    def observe(self, obs: Observation, action: np.ndarray) -> bool:
        """Take the world's answer to ``action`` (A,); True when the episode is over.

        It is over on its first success when it stops on success (that observation is
        recorded with ``action`` held, and a labelling policy's last label with it, so the
        last frame shows the success), else when it has taken its ``steps`` steps.
        """
        self.obs = obs
        self.steps += 1
        self.rec.observe(obs)
        if self.spec.stop_on_success and self.rec.succeeded:
            if self.record:
                self.rec.record(obs, action, self.label)
            return True
        return self.steps >= self.spec.steps


Rows = list[LiveEpisode | None]
"""The world's rows: each one's episode in progress, or None once it has ended (it holds)."""


@dataclass(frozen=True)
class EpisodeRunner:
    """Runs episodes in ``world``, in lockstep (:meth:`run`) or refilling (:meth:`stream`).

    ``source`` and ``model_id`` go into every episode's meta; ``record`` False keeps no
    frames (for long rollouts read through ``on_step``) and returns empty episodes.
    """

    world: World
    source: str
    model_id: str | None = None
    record: bool = True

    def run(
        self,
        policies: Sequence[Policy],
        episodes: Sequence[EpisodeSpec],
        on_step: StepHook | None = None,
    ) -> list[EpisodeResult]:
        """Run every row's episode with its policy, one per row; the episodes in row order."""
        b = self.world.batch_size
        if len(policies) != b or len(episodes) != b:
            raise FactoryError(
                f"the world runs {b} episodes at once; got {len(policies)} policies "
                f"and {len(episodes)} episodes"
            )
        jobs = list(zip(policies, episodes, strict=True))
        done = sorted(self._episodes(jobs, _Lockstep(self.world), on_step), key=_index)
        return [self._result(ep) for ep in done]

    def stream[J](
        self, jobs: Iterable[J], slots: Slots[J], on_step: StepHook | None = None
    ) -> Iterator[EpisodeResult]:
        """Run every job's episode; yields each as soon as it ends (any order).

        ``jobs`` is read lazily: a job is taken only when a row is free for it.
        """
        for ep in self._episodes(jobs, slots, on_step):
            yield self._result(ep)

    def _episodes[J](
        self, jobs: Iterable[J], slots: Slots[J], on_step: StepHook | None
    ) -> Iterator[LiveEpisode]:
        """The one loop: every episode, as it ends."""
        pending = iter(jobs)
        first = list(islice(pending, slots.size))
        if not first:
            return
        order = count()
        rows: Rows = [LiveEpisode(s, next(order), self.record) for s in slots.open(first)]
        actions = np.zeros((len(rows), self.world.spec.action_dim), np.float32)
        t = 0
        while rows:
            actions = actions.copy()  # the world may keep what it was given; ended rows hold
            for r, ep in enumerate(rows):
                if ep is not None:
                    actions[r] = ep.act()
            obs = self.world.step(actions)
            if on_step is not None:
                on_step(t, obs)
            t += 1
            ended = [
                (r, ep)
                for r, ep in enumerate(rows)
                if ep is not None and ep.observe(obs.item(r), actions[r])
            ]
            if ended:
                yield from (ep for _, ep in ended)
                done = [r for r, _ in ended]
                rows, actions = self._refill(rows, actions, done, pending, slots, order)

    def _refill[J](
        self,
        rows: Rows,
        actions: np.ndarray,
        done: list[int],
        pending: Iterator[J],
        slots: Slots[J],
        order: Iterator[int],
    ) -> tuple[Rows, np.ndarray]:
        """Restart ``done`` rows with the next jobs; drop (or hold) the rest."""
        new = list(islice(pending, len(done)))
        if new:
            restarted = done[: len(new)]
            for r, s in zip(restarted, slots.start(restarted, new), strict=True):
                rows[r] = LiveEpisode(s, next(order), self.record)
        for r in done[len(new) :]:
            rows[r] = None
        keep = [r for r, ep in enumerate(rows) if ep is not None]
        if not keep:
            return [], actions[:0]
        if len(keep) < len(rows) and slots.keep(keep):
            return [rows[r] for r in keep], actions[keep]
        return rows, actions

    def _result(self, ep: LiveEpisode) -> EpisodeResult:
        meta = ep.rec.meta(
            source=self.source,
            generator=ep.policy.name,
            generator_params={**ep.policy.params(), **ep.spec.params},
            seed=ep.spec.seed,
            model_id=self.model_id,
            task=self.world.spec.task,
            world=self.world.spec.name,
            extra=ep.spec.extra,
        )
        return EpisodeResult(ep.rec.data() if self.record and len(ep.rec) else {}, meta)


def _index(ep: LiveEpisode) -> int:
    return ep.index


class _Lockstep:
    """The lockstep batch's rows: all reset at once (from seeds or configs), none restarted,
    none dropped. Jobs are (policy, spec) pairs."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.size = world.batch_size

    def open(self, jobs: list[tuple[Policy, EpisodeSpec]]) -> list[Start]:
        obs = reset_world(self.world, [spec for _, spec in jobs])
        return [Start(policy, spec, obs.item(r)) for r, (policy, spec) in enumerate(jobs)]

    def start(self, rows: list[int], jobs: list[tuple[Policy, EpisodeSpec]]) -> list[Start]:
        raise FactoryError("a lockstep batch takes exactly one episode per row")

    def keep(self, rows: list[int]) -> bool:
        return False


def reset_world(world: World, episodes: Sequence[EpisodeSpec]) -> WorldObs:
    """Reset every row of ``world`` to its episode's config, or else its seed."""
    configs = [e.config for e in episodes]
    if all(c is not None for c in configs):
        return world.reset(configs=np.stack([np.asarray(c, np.float64) for c in configs]))
    if any(c is not None for c in configs):
        raise FactoryError("a batch resets either every episode from a config or none")
    return world.reset(seeds=np.array([e.seed for e in episodes]))


def run_episode(
    world: World,
    generator: Policy,
    seed: int,
    steps: int,
    *,
    source: str,
    stop_on_success: bool = False,
    config: np.ndarray | None = None,
    model_id: str | None = None,
) -> EpisodeResult:
    """One episode in ``world`` (batch size 1) from ``seed`` or ``config`` (C,)."""
    runner = EpisodeRunner(world, source=source, model_id=model_id)
    return runner.run([generator], [EpisodeSpec(seed, steps, stop_on_success, config)])[0]
