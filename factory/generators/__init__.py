"""Action generators, by name: scripted ``play`` and ``expert``, ``replay``, ``policy``, and
the ``hold_still`` floor; ``pile_play`` and ``pile_expert`` for the pile world."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from factory.errors import FactoryError
from factory.generators.base import ActionGenerator, build_params
from factory.generators.dart import NoisyExecution, labels_actions, split_noise


def _make_play(**params: Any) -> ActionGenerator:
    from factory.generators.play import PlayGenerator, PlayParams

    return PlayGenerator(build_params(PlayParams, "play", params))


def _make_expert(**params: Any) -> ActionGenerator:
    from factory.generators.expert import ExpertGenerator, ExpertParams

    return ExpertGenerator(build_params(ExpertParams, "expert", params))


def _make_pile_play(**params: Any) -> ActionGenerator:
    from factory.generators.pile_play import PilePlayGenerator, PilePlayParams

    return PilePlayGenerator(build_params(PilePlayParams, "pile_play", params))


def _make_pile_expert(**params: Any) -> ActionGenerator:
    from factory.generators.pile_expert import PileExpertGenerator, PileExpertParams

    return PileExpertGenerator(build_params(PileExpertParams, "pile_expert", params))


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
    "pile_play": _make_pile_play,
    "pile_expert": _make_pile_expert,
}
"""Registry: generator name -> factory(**params)."""

ANY_WORLD: tuple[str, ...] = ()
GENERATOR_WORLDS: dict[str, tuple[str, ...]] = {
    "play": ("pusht",),
    "expert": ("pusht",),
    "pile_play": ("pile",),
    "pile_expert": ("pile",),
    "replay": ANY_WORLD,
    "policy": ANY_WORLD,
    "hold_still": ANY_WORLD,
}
"""Generator name -> the ground-truth worlds it is for (:data:`ANY_WORLD`: every world)."""

EXPERTS = frozenset({"expert", "pile_expert"})
"""Generators that finish a task: a recording stops at their success unless told otherwise."""

MODEL_WORLD_SUFFIX = "-model"  # ModelWorld's spec name: f"{world}-model"


def make_generator(name: str, **params: Any) -> ActionGenerator:
    """A generator by name; unknown names or parameters raise :class:`FactoryError`.

    Every generator also takes ``action_noise`` (> 0: DART-style noise injection, see
    :mod:`factory.generators.dart`) and ``action_noise_corr``; its recordings then hold the
    clean action as ``action_label`` beside the executed ``action``.
    """
    factory = GENERATORS.get(name)
    if factory is None:
        raise FactoryError(
            f"unknown generator {name!r}; valid generators: {', '.join(sorted(GENERATORS))}"
        )
    own, noise = split_noise(params)
    generator = factory(**own)
    return generator if noise is None else NoisyExecution(generator, noise)


def generators_for(world: str) -> list[str]:
    """The generators valid in ``world`` (a world model's ``<env>-model`` counts as
    ``<env>``), sorted."""
    env = world.removesuffix(MODEL_WORLD_SUFFIX)
    return sorted(n for n, worlds in GENERATOR_WORLDS.items() if not worlds or env in worlds)


def check_generator_world(name: str, world: str) -> None:
    """Raise :class:`FactoryError` unless generator ``name`` is for ``world`` (a world
    model's ``<env>-model`` is checked as ``<env>``); the error names the valid ones."""
    if name not in GENERATORS:
        raise FactoryError(
            f"unknown generator {name!r}; valid generators: {', '.join(sorted(GENERATORS))}"
        )
    worlds = GENERATOR_WORLDS.get(name, ANY_WORLD)
    env = world.removesuffix(MODEL_WORLD_SUFFIX)
    if worlds and env not in worlds:
        raise FactoryError(
            f"generator {name!r} is for {', '.join(worlds)}, not {env}; generators for "
            f"{env}: {', '.join(generators_for(env))}"
        )


__all__ = [
    "ANY_WORLD",
    "EXPERTS",
    "GENERATORS",
    "GENERATOR_WORLDS",
    "ActionGenerator",
    "check_generator_world",
    "generators_for",
    "labels_actions",
    "make_generator",
]
