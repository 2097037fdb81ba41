"""The batched episode runner: B closed-loop episodes of one ``World``, in lockstep.

Like diffusion_policy's env runner, ``run(policies) -> results``: every step asks each
row's policy for its action on that row's observation, steps the whole batch once, and
records what each row saw (:class:`~factory.record.recorder.EpisodeRecorder`). A row
whose episode has ended (its step budget, or its first success when it stops on success)
holds its last action until the batch is done and records nothing more.

Collection in the ground-truth env and the long stability rollout run here. The world
model's generation engine (:mod:`factory.gen.engine`) refills finished rows with new
episodes instead, but records through the same recorder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from factory.errors import FactoryError
from factory.record.recorder import EpisodeRecorder, EpisodeResult, Policy
from factory.world import World, WorldObs

StepHook = Callable[[int, WorldObs], None]
"""``on_step(t, obs)``: called with the batch's observation after step ``t`` (0-based)."""


@dataclass(frozen=True)
class EpisodeSpec:
    """One row's episode: reset from ``seed`` (or ``config`` (C,)), at most ``steps`` steps.

    With ``stop_on_success`` it ends on its first successful observation, which is recorded
    with a hold action so that the last frame shows the success. ``extra`` joins the
    episode's ``meta.extra``.
    """

    seed: int
    steps: int
    stop_on_success: bool = False
    config: np.ndarray | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EpisodeRunner:
    """Runs a batch of episodes in ``world`` (whose batch size is the number of episodes).

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
        """Run every row's episode with its policy; the episodes in row order."""
        b = self.world.batch_size
        if len(policies) != b or len(episodes) != b:
            raise FactoryError(
                f"the world runs {b} episodes at once; got {len(policies)} policies "
                f"and {len(episodes)} episodes"
            )
        obs = self._reset(episodes)
        recorders = [EpisodeRecorder() for _ in range(b)]
        for r, policy in enumerate(policies):
            policy.reset(episodes[r].seed, obs.item(r))
        live = [True] * b
        actions = np.zeros((b, self.world.spec.action_dim), np.float32)
        for t in range(max(e.steps for e in episodes)):
            for r in range(b):
                if live[r]:
                    actions[r] = np.asarray(policies[r].act(obs.item(r)), np.float32)
                    if self.record:
                        recorders[r].record(obs.item(r), actions[r])
            obs = self.world.step(actions)
            if on_step is not None:
                on_step(t, obs)
            for r in range(b):
                if live[r]:
                    live[r] = self._advance(recorders[r], episodes[r], obs, r, actions[r], t)
            if not any(live):
                break
        rows = zip(recorders, policies, episodes, strict=True)
        return [self._result(rec, pol, ep) for rec, pol, ep in rows]

    def _reset(self, episodes: Sequence[EpisodeSpec]) -> WorldObs:
        configs = [e.config for e in episodes]
        if all(c is not None for c in configs):
            return self.world.reset(configs=np.stack([np.asarray(c, np.float64) for c in configs]))
        if any(c is not None for c in configs):
            raise FactoryError("a batch resets either every episode from a config or none")
        return self.world.reset(seeds=np.array([e.seed for e in episodes]))

    def _advance(
        self,
        rec: EpisodeRecorder,
        episode: EpisodeSpec,
        obs: WorldObs,
        row: int,
        action: np.ndarray,
        t: int,
    ) -> bool:
        """Take row ``row``'s answer; False when its episode is over."""
        item = obs.item(row)
        rec.observe(item)
        if episode.stop_on_success and rec.succeeded:
            if self.record:
                rec.record(item, action)  # the last frame shows the success (hold action)
            return False
        return t + 1 < episode.steps

    def _result(self, rec: EpisodeRecorder, policy: Policy, episode: EpisodeSpec) -> EpisodeResult:
        meta = rec.meta(
            source=self.source,
            generator=policy.name,
            generator_params=policy.params(),
            seed=episode.seed,
            model_id=self.model_id,
            task=self.world.spec.task,
            world=self.world.spec.name,
            extra=episode.extra,
        )
        return EpisodeResult(rec.data() if self.record and len(rec) else {}, meta)


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
