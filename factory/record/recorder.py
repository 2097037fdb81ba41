"""One recorder for every way episodes are made: steps in, an episode and its meta out.

The store convention (diffusion_policy's): step ``t`` holds the observation *before*
action ``t``, so an episode of ``T`` steps has ``T`` frames and ``T`` actions. Collection
in the ground truth, generation in the world model and teleoperation all record through
:class:`EpisodeRecorder`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from factory.errors import FactoryError
from factory.record.output import view_key
from factory.store import EpisodeMeta
from factory.world import Observation


class Policy(Protocol):
    """A closed-loop action source (``factory.generators.ActionGenerator`` fits)."""

    name: str

    def params(self) -> dict[str, Any]: ...

    def reset(self, seed: int, obs: Observation) -> None: ...

    def act(self, obs: Observation) -> np.ndarray: ...


@runtime_checkable
class Labelled(Protocol):
    """A policy whose executed action is not the action it labels the step with (DART
    noise injection, :class:`~factory.generators.dart.NoisyExecution`): ``last_label`` is
    the label (A,) of its last ``act``."""

    last_label: np.ndarray | None


@dataclass(frozen=True)
class EpisodeResult:
    """One recorded episode, ready for ``EpisodeStore.append_episode(data, meta)``.

    data: ``image`` (T, H, W, 3) uint8, ``action`` (T, A) float32, ``state`` (T, S) float32,
    ``task_state`` (T, K) float32 (the world's task state: privileged in the ground truth,
    the probe's estimate in the world model), ``image_<cam>`` (T, H, W, 3) uint8 for
    every camera after the main one (the observations' ``views``), and ``action_label``
    (T, A) float32 when the generator labels its steps (DART: ``action`` is what was
    executed, ``action_label`` what the supervisor wanted there).
    """

    data: dict[str, np.ndarray]
    meta: EpisodeMeta

    @property
    def frames(self) -> int:
        return len(self.data["action"])


class EpisodeRecorder:
    """The steps of one episode in progress, and what the world said about them."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self._frames: list[np.ndarray] = []
        self._actions: list[np.ndarray] = []
        self._states: list[np.ndarray] = []
        self._task_states: list[np.ndarray] = []
        self._labels: list[np.ndarray] = []
        self._views: dict[str, list[np.ndarray]] = {}
        self.scores: list[float] = []
        self.succeeded = False

    def record(self, obs: Observation, action: np.ndarray, label: np.ndarray | None = None) -> None:
        """Step ``t``: the observation (copied, every camera), the action (A,) taken from
        it and, for a labelling generator, its label (A,). Every step of an episode must
        show the same cameras, and have a label or not."""
        if len(self._actions) and set(obs.views) != set(self._views):
            raise FactoryError(
                f"step {len(self._actions)} shows cameras {sorted(obs.views)}, the episode "
                f"so far {sorted(self._views)}"
            )
        if len(self._actions) and (label is None) != (len(self._labels) == 0):
            raise FactoryError(
                f"step {len(self._actions)}: an episode's steps are all labelled or none"
            )
        if label is not None:
            self._labels.append(np.asarray(label, np.float32).copy())
        self._frames.append(np.array(obs.frame, copy=True))
        for cam, frame in obs.views.items():
            self._views.setdefault(cam, []).append(np.array(frame, copy=True))
        self._actions.append(np.asarray(action, np.float32).copy())
        self._states.append(np.asarray(obs.state, np.float32).copy())
        self._task_states.append(np.asarray(obs.task_state, np.float32).copy())

    def observe(self, obs: Observation) -> None:
        """The world's answer to the last action: its score and success count."""
        self.scores.append(float(obs.score))
        self.succeeded = self.succeeded or bool(obs.success)

    def __len__(self) -> int:
        return len(self._actions)

    @property
    def max_score(self) -> float:
        return max(self.scores, default=0.0)

    def data(self) -> dict[str, np.ndarray]:
        """The episode's arrays (see :class:`EpisodeResult`)."""
        return {
            "image": np.stack(self._frames),
            "action": np.stack(self._actions),
            "state": np.stack(self._states),
            "task_state": np.stack(self._task_states),
            **({"action_label": np.stack(self._labels)} if self._labels else {}),
            **{view_key(cam): np.stack(frames) for cam, frames in self._views.items()},
        }

    def meta(
        self,
        *,
        source: str,
        generator: str,
        generator_params: dict[str, Any],
        seed: int,
        world: str,
        task: str,
        model_id: str | None = None,
        success: bool | None = None,
        score: float | None = None,
        extra: dict[str, Any] | None = None,
    ) -> EpisodeMeta:
        """The episode's provenance. ``success`` defaults to the world's; ``score`` to the
        last observed one; ``extra`` joins ``max_score`` and ``world``."""
        final = score if score is not None else (self.scores[-1] if self.scores else 0.0)
        return EpisodeMeta(
            source=source,
            generator=generator,
            generator_params=generator_params,
            seed=int(seed),
            model_id=model_id,
            task=task,
            success=self.succeeded if success is None else bool(success),
            score=float(final),
            wall_time_s=time.perf_counter() - self.started,
            extra={"max_score": float(max(self.scores, default=final)), "world": world}
            | dict(extra or {}),
        )

    def result(self, **meta: Any) -> EpisodeResult:
        """The episode: :meth:`data` and :meth:`meta` (keyword arguments as there)."""
        return EpisodeResult(self.data(), self.meta(**meta))
