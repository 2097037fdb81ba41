"""Action generators, by name: scripted ``play`` and ``expert``, ``replay``, ``policy``, and
the ``hold_still`` floor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from factory.errors import FactoryError
from factory.generators.base import ActionGenerator, build_params


def _make_play(**params: Any) -> ActionGenerator:
    from factory.generators.play import PlayGenerator, PlayParams

    return PlayGenerator(build_params(PlayParams, "play", params))


def _make_expert(**params: Any) -> ActionGenerator:
    from factory.generators.expert import ExpertGenerator, ExpertParams

    return ExpertGenerator(build_params(ExpertParams, "expert", params))


def _make_replay(**params: Any) -> ActionGenerator:
    from factory.generators.replay import ReplayGenerator

    missing = sorted({"actions", "config"} - set(params))
    extra = sorted(set(params) - {"actions", "config"})
    if missing or extra:
        raise FactoryError(
            "generator 'replay' takes exactly the parameters actions and config"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(extra)}" if extra else "")
        )
    return ReplayGenerator(params["actions"], params["config"])


def _make_policy(**params: Any) -> ActionGenerator:
    from factory.generators.policy import PolicyGenerator

    if "path" not in params:
        raise FactoryError("generator 'policy' needs path= (a LeRobot checkpoint directory)")
    extra = sorted(set(params) - {"path", "device", "label"})
    if extra:
        raise FactoryError(f"generator 'policy' has no parameter(s) {', '.join(extra)}")
    return PolicyGenerator(**params)


def _make_hold_still(**params: Any) -> ActionGenerator:
    from factory.generators.hold_still import HoldStill

    extra = sorted(set(params) - {"target"})
    if extra:
        raise FactoryError(f"generator 'hold_still' has no parameter(s) {', '.join(extra)}")
    return HoldStill(params.get("target"))


GENERATORS: dict[str, Callable[..., ActionGenerator]] = {
    "play": _make_play,
    "expert": _make_expert,
    "replay": _make_replay,
    "policy": _make_policy,
    "hold_still": _make_hold_still,
}
"""Registry: generator name -> factory(**params)."""


def make_generator(name: str, **params: Any) -> ActionGenerator:
    """A generator by name; unknown names or parameters raise :class:`FactoryError`."""
    factory = GENERATORS.get(name)
    if factory is None:
        raise FactoryError(
            f"unknown generator {name!r}; valid generators: {', '.join(sorted(GENERATORS))}"
        )
    return factory(**params)


__all__ = ["GENERATORS", "ActionGenerator", "make_generator"]
