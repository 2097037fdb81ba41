"""DART-style noise injection (Laskey et al. 2017): execute a perturbed action, label the
step with the clean one.

:class:`NoisyExecution` wraps any closed-loop generator. Each step it asks the inner
generator for its action (the *label*: what the supervisor wants from the state it sees),
adds noise, and returns the perturbed action, which the world executes and the store keeps
as ``action``. The label is kept beside it as ``action_label`` (the recorder reads
``last_label``, see :class:`~factory.record.recorder.Labelled`). Because the inner generator
is closed-loop, the states that follow the noise are ones it recovers from, and its labels
there are recoveries: the demonstrations cover the states a learner's own errors reach,
which clean demonstrations never visit.

The noise is Gaussian, ``sigma`` per action dimension (board pixels for PushT's target
positions), optionally AR(1)-correlated over steps (``corr``: 0 is white); its stream comes
from the episode seed alone, independent of the inner generator's random choices. An inner
generator that models its own last command (the PushT expert's velocity estimate) is told
what was executed through ``executed(action)``; one with steps that noise would only spoil
says so through ``needs_precision()``, and those steps are executed as labelled (the
noise stream goes on, so the other steps' noise does not depend on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from factory.errors import FactoryError
from factory.generators.base import ActionGenerator
from factory.world import Observation

NOISE_STREAM = 0xDA27  # mixed into the episode seed: the noise never shares the inner rng


@dataclass(frozen=True)
class ActionNoise:
    """``sigma``: the noise's standard deviation per action dimension (> 0); ``corr``: its
    AR(1) coefficient over steps, in [0, 1) (0: independent every step). The stationary
    standard deviation is ``sigma`` whatever ``corr``."""

    sigma: float
    corr: float = 0.0

    def __post_init__(self) -> None:
        if not (np.isfinite(self.sigma) and self.sigma > 0):
            raise FactoryError(f"action_noise must be a finite number > 0, got {self.sigma}")
        if not (np.isfinite(self.corr) and 0.0 <= self.corr < 1.0):
            raise FactoryError(f"action_noise_corr must be in [0, 1), got {self.corr}")


@runtime_checkable
class NeedsPrecision(Protocol):
    """A generator with steps that noise would only spoil (the PushT expert's final approach
    to a stroke's start, where it waits for the agent to settle): those go unperturbed."""

    def needs_precision(self) -> bool: ...


@runtime_checkable
class TellsExecuted(Protocol):
    """A generator that wants to know which action was executed after it answered."""

    def executed(self, action: np.ndarray) -> None: ...


class NoisyExecution:
    """``inner``'s actions with :class:`ActionNoise` added; ``last_label`` (A,) float32 is
    ``inner``'s own action of the last :meth:`act`. Name and parameters are the inner
    generator's, plus ``action_noise`` and ``action_noise_corr``."""

    def __init__(self, inner: ActionGenerator, noise: ActionNoise) -> None:
        self.inner, self.noise = inner, noise
        self.name = inner.name
        self.last_label: np.ndarray | None = None
        self._rng = np.random.default_rng(NOISE_STREAM)
        self._eps: np.ndarray | None = None

    def params(self) -> dict[str, Any]:
        noise = {"action_noise": self.noise.sigma, "action_noise_corr": self.noise.corr}
        return {**self.inner.params(), **noise}

    def reset(self, seed: int, obs: Observation) -> None:
        self.inner.reset(seed, obs)
        self._rng = np.random.default_rng([int(seed), NOISE_STREAM])
        self._eps, self.last_label = None, None

    def act(self, obs: Observation) -> np.ndarray:
        """The perturbed action (A,) float32; the clean one goes to ``last_label``."""
        label = np.asarray(self.inner.act(obs), np.float32)
        self.last_label = label.copy()
        fresh = self._rng.normal(0.0, self.noise.sigma, label.shape)
        rho = self.noise.corr
        if self._eps is None:
            self._eps = fresh
        else:  # AR(1) with the stationary std sigma
            self._eps = rho * self._eps + np.sqrt(1.0 - rho * rho) * fresh
        quiet = isinstance(self.inner, NeedsPrecision) and self.inner.needs_precision()
        action = label if quiet else (label + self._eps).astype(np.float32)
        if isinstance(self.inner, TellsExecuted):
            self.inner.executed(action)
        return action


def split_noise(params: dict[str, Any]) -> tuple[dict[str, Any], ActionNoise | None]:
    """``params`` without ``action_noise`` / ``action_noise_corr``, and the noise they give
    (None when ``action_noise`` is absent or 0). Ill-typed values raise FactoryError."""
    rest = dict(params)
    sigma, corr = rest.pop("action_noise", 0.0), rest.pop("action_noise_corr", 0.0)
    try:
        sigma_f, corr_f = float(sigma), float(corr)
    except (TypeError, ValueError):
        raise FactoryError(
            f"action_noise and action_noise_corr must be numbers, got {sigma!r} and {corr!r}"
        ) from None
    if sigma_f == 0.0:
        if corr_f != 0.0:
            raise FactoryError("action_noise_corr needs action_noise > 0")
        return rest, None
    return rest, ActionNoise(sigma_f, corr_f)


def noise_params(sigma: float, corr: float = 0.0) -> dict[str, float]:
    """The generator parameters of ``--action-noise SIGMA --action-noise-corr CORR``
    (none at ``sigma`` 0); checked as :func:`split_noise` checks them."""
    params = {"action_noise": float(sigma), "action_noise_corr": float(corr)}
    return params if split_noise(params)[1] is not None else {}


def labels_actions(params: dict[str, Any]) -> bool:
    """Whether a generator made with ``params`` labels its steps (``action_noise`` > 0):
    its recordings hold ``action_label`` beside ``action``."""
    return split_noise(params)[1] is not None
