"""SpaceMouse control through pyspacemouse.

A reader thread drains the device's HID reports (``read()`` consumes one report per call)
and keeps the newest translation and the button edges. Axis convention: pyspacemouse's
``AxisConvention.HID``, passed explicitly: +x right, +y toward the operator. Seen from the
operator, the frame's +x is right and +y is down the screen (toward the operator), so
translation (x, y) is the target's deflection in image axes. Translations are divided by
the device's full scale (pyspacemouse reports about [-1, 1]); then the
:class:`~teleop.sources.mapping.PlanarMapping` deadzone and speed apply.

Buttons: left starts an episode, or stops and saves it (success as the world scores it);
right discards it. The system library ``libhidapi-hidraw0`` must be installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from factory.world import Observation, WorldSpec
from teleop.sources.base import (
    Action,
    Command,
    DeviceDisconnected,
    DeviceError,
    InitialCondition,
)
from teleop.sources.mapping import PlanarMapping, PlanarTarget, check_planar

log = logging.getLogger(__name__)

OTHER_DEVICES = "or use --device keyboard, mouse or web"
NO_HIDAPI = (
    "the SpaceMouse needs the hidapi system library: install it with "
    f"`sudo apt-get install libhidapi-hidraw0`, {OTHER_DEVICES}"
)
NO_DEVICE = (
    "no SpaceMouse found: plug one in (and allow access to /dev/hidraw*, e.g. a udev rule), "
    + OTHER_DEVICES
)
BUTTON_COMMANDS = {0: Command.TOGGLE, 1: Command.DISCARD}  # left, right
IDLE_SLEEP_S = 0.002  # reader sleep when no report is pending
MAX_DRAIN = 256  # reports read per wake-up before yielding


@dataclass(frozen=True)
class SpaceMouseConfig:
    """Which device and convention; ``name`` None opens the first one found."""

    name: str | None = None
    axis_convention: str = "hid"


class SpaceMouseSource:
    """An :class:`~teleop.sources.base.ActionSource` over a pyspacemouse device."""

    device = "spacemouse"
    needs_operator = True

    def __init__(self, mapping: PlanarMapping, config: SpaceMouseConfig | None = None) -> None:
        self.mapping = mapping
        self.config = config or SpaceMouseConfig()
        self._dev: Any = None
        self._target: PlanarTarget | None = None
        self._commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._latest: tuple[float, float, float] = (0.0, 0.0, 0.0)  # x, y, receipt time
        self._used_t = 0.0
        self._last_report_t: float | None = None  # pyspacemouse's stamp of the newest report
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.name = self.device
        self.model_name = ""  # the device's product name, once open

    def params(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self.mapping),
            **dataclasses.asdict(self.config),
            "model": self.model_name,
        }

    def open(self, spec: WorldSpec) -> None:
        low, high = check_planar(spec, self.device)
        self._target = PlanarTarget(low, high, self.mapping)
        self._dev = open_spacemouse(self.config)
        self.model_name = str(getattr(self._dev, "name", ""))
        self._thread = threading.Thread(target=self._read_loop, name="spacemouse", daemon=True)
        self._thread.start()
        log.info("SpaceMouse %s open", self.model_name)

    def _read_loop(self) -> None:
        previous: list[int] = []
        try:
            while not self._stop.is_set():
                if not self._drain(previous):
                    time.sleep(IDLE_SLEEP_S)
        except Exception as err:  # a HID read error: the device went away
            self._error = err

    def _drain(self, previous: list[int]) -> bool:
        """Read pending reports; True if any came."""
        got = False
        for _ in range(MAX_DRAIN):
            state = self._dev.read()
            stamp = float(getattr(state, "t", 0.0))
            if stamp == self._last_report_t:
                break
            self._last_report_t = stamp
            got = True
            self._latest = (float(state.x), float(state.y), time.perf_counter())
            buttons = [int(b) for b in state.buttons]
            for i, pressed in enumerate(buttons):
                was = previous[i] if i < len(previous) else 0
                if pressed and not was and i in BUTTON_COMMANDS:
                    self._commands.put(BUTTON_COMMANDS[i])
            previous[:] = buttons
        return got

    def poll(self) -> list[Command]:
        if self._error is not None:
            raise DeviceDisconnected(
                f"the SpaceMouse disconnected ({self._error}); the episode in progress was "
                "discarded, committed episodes are kept: reconnect it and run again"
            )
        out: list[Command] = []
        while True:
            try:
                out.append(self._commands.get_nowait())
            except queue.Empty:
                return out

    def begin(self, obs: Observation, initial: InitialCondition) -> None:
        self._require().reset(np.asarray(obs.state)[:2])

    def act(self, obs: Observation, dt: float) -> Action:
        x, y, t = self._latest
        self._require().move(np.array([x, y]), dt)
        fresh = t > self._used_t
        self._used_t = t
        stamp = t if fresh else time.perf_counter()
        return Action(value=self._require().value, stamp=stamp)

    def end(self) -> None:
        pass

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        if self._dev is not None:
            with contextlib.suppress(Exception):
                self._dev.close()
            self._dev = None

    def _require(self) -> PlanarTarget:
        if self._target is None:
            raise DeviceError("spacemouse: open() the source before using it")
        return self._target


def open_spacemouse(config: SpaceMouseConfig) -> Any:
    """pyspacemouse's device, opened with an explicit axis convention; a missing system
    library, a missing device or a refused one raise :class:`DeviceError`."""
    try:
        import pyspacemouse
    except ImportError as err:  # pragma: no cover - it is a dependency
        raise DeviceError(f"pyspacemouse is not importable ({err}); {OTHER_DEVICES}") from err
    try:
        convention = pyspacemouse.AxisConvention(config.axis_convention)
    except ValueError as err:
        names = ", ".join(c.value for c in pyspacemouse.AxisConvention)
        raise DeviceError(f"unknown SpaceMouse axis convention; use one of {names}") from err
    printed = io.StringIO()  # pyspacemouse prints "<name> found" on stdout
    try:
        with contextlib.redirect_stdout(printed):
            dev = pyspacemouse.open(device=config.name, axis_convention=convention)
    except RuntimeError as err:
        raise DeviceError(_explain(err)) from err
    except ValueError as err:  # an unknown device name
        raise DeviceError(f"{err}; {OTHER_DEVICES}") from err
    if printed.getvalue().strip():
        log.info("pyspacemouse: %s", printed.getvalue().strip())
    return dev


def _explain(err: RuntimeError) -> str:
    text = str(err)
    if "HID API" in text or isinstance(err.__cause__, AttributeError | OSError):
        return NO_HIDAPI
    if "No connected" in text or "not found" in text:
        return NO_DEVICE
    return (
        f"cannot open the SpaceMouse ({text}): allow access to /dev/hidraw* (a udev rule), "
        + OTHER_DEVICES
    )
