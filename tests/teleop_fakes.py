"""Test doubles for teleoperation: a fake SpaceMouse at pyspacemouse's HID edge, and a
source that plays a script of episode commands.

The fake stands in for easyhid's ``HIDDevice`` (what ``pyspacemouse.api.Enumeration``
lists): a SpaceNavigator whose ``read()`` returns the HID reports a test queued, and
raises easyhid's ``HIDException`` once unplugged, as a real read does.
"""

from __future__ import annotations

import queue
import struct
import threading
import time
from typing import Any

import numpy as np
import pytest

from factory.world import Observation, WorldSpec
from teleop.sources.base import Action, Command, InitialCondition

SPACENAVIGATOR = (0x46D, 0xC626)
FULL_SCALE = 350  # pyspacemouse's axis_scale for the SpaceNavigator


class FakeHidDevice:
    """A SpaceNavigator on a fake hidraw node; tests push reports, the reader reads them."""

    def __init__(self) -> None:
        self.vendor_id, self.product_id = SPACENAVIGATOR
        self.path = "/dev/hidraw-fake"
        self.product_string = "SpaceNavigator"
        self.manufacturer_string = "3Dconnexion"
        self.release_number = 1
        self.serial_number = "FAKE"
        self.opened = threading.Event()
        self.closed = False
        self.reads = 0
        self._reports: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._unplugged = False

    # -- easyhid's HIDDevice surface ------------------------------------------------------
    def open(self) -> None:
        self.opened.set()

    def close(self) -> None:
        self.closed = True

    def set_nonblocking(self, flag: bool) -> None:
        pass

    def write(self, data: Any, report_id: int = 0) -> int:
        return len(data) + 1

    def read(self, size: int = 64, timeout: int | None = None) -> bytearray:
        from easyhid import HIDException

        self.reads += 1
        if self._unplugged:
            raise HIDException("Failed to read from HID device: -1")
        try:
            return bytearray(self._reports.get_nowait())
        except queue.Empty:
            return bytearray()

    # -- what a test does with the device -------------------------------------------------
    def translate(self, x: int, y: int, z: int = 0) -> None:
        """Queue a translation report (raw units; FULL_SCALE is full deflection)."""
        self._reports.put(bytes([1]) + struct.pack("<hhh", x, y, z))

    def buttons(self, mask: int) -> None:
        self._reports.put(bytes([3, mask]))

    def press(self, button: int) -> None:
        """Press and release button 0 (left) or 1 (right)."""
        self.buttons(1 << button)
        self.buttons(0)

    def unplug(self) -> None:
        self._unplugged = True

    def settle(self, timeout: float = 5.0) -> None:
        """Wait until the reader thread has consumed and processed every queued report."""
        deadline = time.monotonic() + timeout
        while not self._reports.empty():
            if time.monotonic() > deadline:
                raise TimeoutError("the SpaceMouse reader did not drain the fake reports")
            time.sleep(0.002)
        reads = self.reads
        while self.reads < reads + 2:  # a later read means the last report was processed
            if time.monotonic() > deadline:
                raise TimeoutError("the SpaceMouse reader stopped reading")
            time.sleep(0.002)


def install_fake_spacemouse(
    monkeypatch: pytest.MonkeyPatch, device: FakeHidDevice | None, hidapi: bool = True
) -> None:
    """Make pyspacemouse enumerate ``device`` (None: nothing plugged in); with ``hidapi``
    False, enumeration fails as it does when libhidapi-hidraw0 is missing."""
    import pyspacemouse.api

    class FakeEnumeration:
        def __init__(self, vid: int = 0, pid: int = 0) -> None:
            if not hidapi:
                raise AttributeError("cdata 'void *' has no attribute 'hid_enumerate'")
            self.device_list = [device] if device is not None else []

        def find(self, **filters: Any) -> list[FakeHidDevice]:
            return list(self.device_list)

    monkeypatch.setattr(pyspacemouse.api, "Enumeration", FakeEnumeration)


class CommandScriptSource:
    """A virtual operator: ``script[i]`` are the commands of tick ``i``; actions sweep x
    by ``dx`` per frame from the agent's start."""

    device = "script"
    name = "script"
    needs_operator = False

    def __init__(self, script: list[list[Command]], dx: float = 4.0) -> None:
        self.script = script
        self.dx = dx
        self.tick = 0
        self.begun: list[InitialCondition] = []
        self.ended = 0
        self._xy = np.zeros(2, np.float32)

    def params(self) -> dict[str, Any]:
        return {"dx": self.dx}

    def open(self, spec: WorldSpec) -> None:
        pass

    def poll(self) -> list[Command]:
        commands = self.script[self.tick] if self.tick < len(self.script) else [Command.QUIT]
        self.tick += 1
        return list(commands)

    def begin(self, obs: Observation, initial: InitialCondition) -> None:
        self.begun.append(initial)
        self._xy = np.asarray(obs.state[:2], np.float32).copy()

    def act(self, obs: Observation, dt: float) -> Action:
        self._xy = np.clip(self._xy + np.array([self.dx, 0.0], np.float32), 0, 512)
        return Action(value=self._xy.copy(), stamp=time.perf_counter())

    def end(self) -> None:
        self.ended += 1

    def close(self) -> None:
        pass
