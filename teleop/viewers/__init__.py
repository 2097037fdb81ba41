"""Viewers by name: ``none`` (headless), ``window`` (a local pygame window) and ``web``
(a page served over HTTP, frames pushed over a websocket)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from factory.errors import FactoryError
from teleop.sources.events import EventBus
from teleop.viewers.base import Hud, NullViewer, Viewer


@dataclass(frozen=True)
class ViewerOptions:
    """host/port: where the web page is served; token: the one it asks for (None: none,
    loopback only); size: the window's frame size in pixels."""

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    size: int = 512


def _none(options: ViewerOptions, bus: EventBus) -> Viewer:
    return NullViewer()


def _window(options: ViewerOptions, bus: EventBus) -> Viewer:
    from teleop.viewers.window import WindowViewer

    return WindowViewer(bus, size=options.size)


def _web(options: ViewerOptions, bus: EventBus) -> Viewer:
    from teleop.viewers.web import WebViewer

    return WebViewer(bus, host=options.host, port=options.port, token=options.token)


VIEWERS: dict[str, Callable[[ViewerOptions, EventBus], Viewer]] = {
    "none": _none,
    "window": _window,
    "web": _web,
}
"""Registry: viewer name -> factory(options, bus)."""


def make_viewer(name: str, options: ViewerOptions, bus: EventBus) -> Viewer:
    factory = VIEWERS.get(name)
    if factory is None:
        raise FactoryError(f"unknown viewer {name!r}; valid viewers: {', '.join(VIEWERS)}")
    return factory(options, bus)


__all__ = ["VIEWERS", "Hud", "NullViewer", "Viewer", "ViewerOptions", "make_viewer"]
