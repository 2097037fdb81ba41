"""Ground-truth env backends of the ``World`` interface, by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from factory.errors import FactoryError
from factory.world import World


def _make_pusht(batch_size: int, resolution: int) -> World:
    from factory.envs.pusht import PushTWorld

    return PushTWorld(batch_size=batch_size, resolution=resolution)


def _make_pile(batch_size: int, resolution: int) -> World:
    from factory.envs.pile import PileWorld

    return PileWorld(batch_size=batch_size, resolution=resolution)


WORLDS: dict[str, Callable[[int, int], World]] = {
    "pusht": _make_pusht,
    "pile": _make_pile,
}
"""Registry: world name -> factory(batch_size, resolution)."""


def make_world(name: str, batch_size: int = 1, resolution: int = 96) -> World:
    """A ground-truth world by name; an unknown name raises :class:`FactoryError`."""
    factory = WORLDS.get(name)
    if factory is None:
        raise FactoryError(f"unknown env {name!r}; valid envs: {', '.join(sorted(WORLDS))}")
    return factory(batch_size, resolution)


def recorded_world(attrs: Mapping[str, Any]) -> str | None:
    """The known world a store's episodes were recorded in, from its attrs' ``env`` (one
    recorded inside a model of it, ``pusht-model``, counts as ``pusht``); None for a store
    of another env (an imported dataset's robot) or of none."""
    env = str(attrs.get("env", "")).removesuffix("-model")
    return env if env in WORLDS else None


__all__ = ["WORLDS", "make_world", "recorded_world"]
