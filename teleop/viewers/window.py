"""The local window (pygame): the frame scaled up, a HUD bar above it, and the operator's
keys and pointer put on the event bus.

pygame is imported when the window opens. With no display, SDL falls back to a driver
that shows nothing; that is refused unless ``SDL_VIDEODRIVER`` asks for it explicitly
(tests run with ``SDL_VIDEODRIVER=dummy``).
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from typing import Any

import numpy as np

from factory.errors import FactoryError
from teleop.sources.events import ConnectionEvent, EventBus, KeyEvent, PointerEvent
from teleop.viewers.base import Hud

log = logging.getLogger(__name__)

HUD_HEIGHT = 56
HIDDEN_DRIVERS = ("offscreen", "dummy")  # SDL drivers that show nothing
FONT_SIZE = 20
REC_COLOUR = (220, 30, 30)
IDLE_COLOUR = (90, 90, 90)


class WindowViewer:
    """A pygame window of ``size`` x ``size`` frame pixels plus the HUD bar."""

    location = "window"

    def __init__(self, bus: EventBus, size: int = 512, title: str = "factory teleop") -> None:
        self.bus = bus
        self.size = int(size)
        self.title = title
        self._pg: Any = None
        self._screen: Any = None
        self._font: Any = None

    def open(self) -> None:
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")  # keep stdout for --json
        with warnings.catch_warnings():  # pygame's pkgdata imports pkg_resources
            warnings.simplefilter("ignore", UserWarning)
            import pygame

        try:
            pygame.display.init()
            driver = pygame.display.get_driver()
            if driver in HIDDEN_DRIVERS and not os.environ.get("SDL_VIDEODRIVER"):
                pygame.display.quit()
                raise pygame.error(f"no display; SDL fell back to its {driver} driver")
            pygame.font.init()
            self._screen = pygame.display.set_mode((self.size, self.size + HUD_HEIGHT))
        except pygame.error as err:
            raise FactoryError(
                f"cannot open a window ({err}): run where a display is available, use "
                "--device web (a browser page), or --headless with --device scripted"
            ) from err
        pygame.display.set_caption(self.title)
        with warnings.catch_warnings():  # pygame's default font goes through pkg_resources
            warnings.simplefilter("ignore", UserWarning)
            self._font = pygame.font.Font(None, FONT_SIZE)
        self._pg = pygame

    def show(self, frame: np.ndarray, hud: Hud) -> float:
        pg = self._pg
        if pg is None:
            raise FactoryError("the window is not open")
        self._pump()
        surface = pg.surfarray.make_surface(np.ascontiguousarray(frame.swapaxes(0, 1)))
        self._screen.fill((255, 255, 255))
        self._screen.blit(pg.transform.scale(surface, (self.size, self.size)), (0, HUD_HEIGHT))
        self._draw_hud(hud)
        pg.display.flip()
        return time.perf_counter()

    def _draw_hud(self, hud: Hud) -> None:
        pg = self._pg
        colour = REC_COLOUR if hud.recording else IDLE_COLOUR
        pg.draw.rect(self._screen, (245, 245, 245), (0, 0, self.size, HUD_HEIGHT))
        pg.draw.circle(self._screen, colour, (12, 12), 6)
        for i, line in enumerate(hud.lines()):
            text = self._font.render(line, True, colour if i == 0 else (30, 30, 30))
            self._screen.blit(text, (24, 4 + i * 17))

    def _pump(self) -> None:
        """Move pygame's pending events onto the bus."""
        pg = self._pg
        now = time.perf_counter()
        for event in pg.event.get():
            if event.type in (pg.KEYDOWN, pg.KEYUP):
                name = pg.key.name(event.key)
                self.bus.put(KeyEvent(key=name, down=event.type == pg.KEYDOWN, t=now))
            elif event.type in (pg.MOUSEMOTION, pg.MOUSEBUTTONDOWN, pg.MOUSEBUTTONUP):
                self.bus.put(self._pointer(event, now))
            elif event.type == pg.QUIT:
                self.bus.put(ConnectionEvent(connected=False, clients=0, t=now))

    def _pointer(self, event: Any, now: float) -> PointerEvent:
        x, y = event.pos
        pressed = self._pg.mouse.get_pressed()
        buttons = int(pressed[0]) | (int(pressed[2]) << 1)
        if event.type == self._pg.MOUSEBUTTONDOWN and event.button == 1:
            buttons |= 1
        elif event.type == self._pg.MOUSEBUTTONUP and event.button == 1:
            buttons &= ~1
        return PointerEvent(u=x / self.size, v=(y - HUD_HEIGHT) / self.size, buttons=buttons, t=now)

    def close(self) -> None:
        if self._pg is not None:
            self._pg.display.quit()
            self._pg = None
