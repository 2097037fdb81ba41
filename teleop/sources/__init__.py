"""Action sources by device name: ``spacemouse``, ``keyboard``, ``mouse``, ``web``,
``scripted``. All implement :class:`~teleop.sources.base.ActionSource`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from factory.errors import FactoryError
from teleop.sources.base import (
    Action,
    ActionSource,
    Command,
    DeviceDisconnected,
    DeviceError,
    InitialCondition,
)
from teleop.sources.events import EventBus
from teleop.sources.mapping import PlanarMapping
from teleop.sources.spacemouse import SpaceMouseConfig


@dataclass(frozen=True)
class SourceOptions:
    """Everything a device needs to be built (each uses the fields that concern it)."""

    mapping: PlanarMapping = field(default_factory=PlanarMapping)
    generator: str = "play"
    generator_params: dict[str, Any] = field(default_factory=dict)
    spacemouse: SpaceMouseConfig = field(default_factory=SpaceMouseConfig)


def _spacemouse(options: SourceOptions, bus: EventBus) -> ActionSource:
    from teleop.sources.spacemouse import SpaceMouseSource

    return SpaceMouseSource(options.mapping, options.spacemouse)


def _keyboard(options: SourceOptions, bus: EventBus) -> ActionSource:
    from teleop.sources.operator import keyboard_source

    return keyboard_source(bus, options.mapping)


def _mouse(options: SourceOptions, bus: EventBus) -> ActionSource:
    from teleop.sources.operator import mouse_source

    return mouse_source(bus, options.mapping)


def _web(options: SourceOptions, bus: EventBus) -> ActionSource:
    from teleop.sources.web import web_source

    return web_source(bus, options.mapping)


def _scripted(options: SourceOptions, bus: EventBus) -> ActionSource:
    from teleop.sources.scripted import ScriptedSource

    return ScriptedSource(options.generator, options.generator_params)


SOURCES: dict[str, Callable[[SourceOptions, EventBus], ActionSource]] = {
    "spacemouse": _spacemouse,
    "keyboard": _keyboard,
    "mouse": _mouse,
    "web": _web,
    "scripted": _scripted,
}
"""Registry: device name -> factory(options, bus)."""


def make_source(device: str, options: SourceOptions, bus: EventBus) -> ActionSource:
    """A source by device name; an unknown one raises :class:`FactoryError`."""
    factory = SOURCES.get(device)
    if factory is None:
        raise FactoryError(f"unknown --device {device!r}; valid devices: {', '.join(SOURCES)}")
    return factory(options, bus)


__all__ = [
    "SOURCES",
    "Action",
    "ActionSource",
    "Command",
    "DeviceDisconnected",
    "DeviceError",
    "EventBus",
    "InitialCondition",
    "PlanarMapping",
    "SourceOptions",
    "make_source",
]
