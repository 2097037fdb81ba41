"""The action-generator interface and helpers shared by the scripted generators.

A generator is closed-loop: it sees each observation and returns the next action. One
instance drives one episode stream; ``reset`` starts an episode, and every random choice
comes from ``np.random.default_rng(seed)``, so the same seed and the same observations give
the same actions.

``obs.task_state`` is the block pose: ground truth in the real env, a learned probe's
estimate inside the world model. Generators must therefore tolerate noisy estimates.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

import numpy as np

from factory.errors import FactoryError
from factory.world import Observation


@runtime_checkable
class ActionGenerator(Protocol):
    """A closed-loop source of actions for one episode at a time."""

    name: str

    def params(self) -> dict[str, Any]:
        """JSON-able provenance: every knob that shapes the actions."""
        ...

    def reset(self, seed: int, obs: Observation) -> None:
        """Start an episode from its first observation; all randomness from ``seed``."""
        ...

    def act(self, obs: Observation) -> np.ndarray:
        """The next action (A,) float32."""
        ...


def build_params[P](cls: type[P], name: str, overrides: dict[str, Any]) -> P:
    """A params dataclass from keyword overrides; unknown or ill-typed ones raise FactoryError.

    Values are coerced to the type of the field's default (so "3" or 3 both work for a float
    knob), which also accepts values read back from JSON provenance.
    """
    fields = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise FactoryError(
            f"generator {name!r} has no parameter(s) {', '.join(unknown)}; "
            f"valid: {', '.join(fields)}"
        )
    values = {key: _coerce(name, key, getattr(cls, key), v) for key, v in overrides.items()}
    return cls(**values)


def _coerce(name: str, key: str, default: Any, value: Any) -> Any:
    if isinstance(default, bool):
        if isinstance(value, bool | np.bool_):
            return bool(value)
        raise FactoryError(f"generator {name!r}: parameter {key} must be true or false")
    if isinstance(default, int | float):
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = float("nan")
        if not np.isfinite(number) or (isinstance(default, int) and number != int(number)):
            kind = "an integer" if isinstance(default, int) else "a finite number"
            raise FactoryError(f"generator {name!r}: parameter {key} must be {kind}, got {value!r}")
        return type(default)(number)
    return value


def params_dict(params: Any) -> dict[str, Any]:
    """A params dataclass as a plain JSON-able dict."""
    return {k: _jsonable(v) for k, v in dataclasses.asdict(params).items()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value


def agent_and_block(obs: Observation) -> tuple[np.ndarray, np.ndarray]:
    """The agent xy (2,) and block pose (3,) of an observation, as float64."""
    agent = np.asarray(obs.state, dtype=np.float64)[:2]
    block = np.asarray(obs.task_state, dtype=np.float64)[:3]
    return agent, block


def board_clip(xy: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """Clip a board position into [margin, 512 - margin]^2."""
    return np.clip(np.asarray(xy, dtype=np.float64), margin, 512.0 - margin)
