"""Action sources: the fake SpaceMouse's HID reports, synthetic key and pointer events,
the browser's messages, the pygame window's events, and the scripted device."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from teleop_fakes import FULL_SCALE, FakeHidDevice, install_fake_spacemouse

from factory.envs.pusht import pusht_spec
from factory.world import Observation
from teleop.sources import Command, DeviceDisconnected, DeviceError, EventBus, InitialCondition
from teleop.sources.events import AxesEvent, ConnectionEvent, KeyEvent, PointerEvent
from teleop.sources.mapping import PlanarMapping, apply_deadzone
from teleop.sources.operator import keyboard_source, mouse_source, web_source
from teleop.sources.scripted import ScriptedSource
from teleop.sources.spacemouse import SpaceMouseSource
from teleop.sources.web import parse_message

SPEC = pusht_spec(32)
MAPPING = PlanarMapping(speed=200.0, deadzone=0.1)
START = InitialCondition(seed=0)


def _obs(x: float = 256.0, y: float = 256.0) -> Observation:
    return Observation(
        frame=np.zeros((32, 32, 3), np.uint8),
        state=np.array([x, y], np.float32),
        task_state=np.zeros(3, np.float32),
        score=0.0,
        success=False,
    )


# -- mapping ------------------------------------------------------------------------------
def test_deadzone_zeroes_small_and_rescales_the_rest() -> None:
    out = apply_deadzone(np.array([0.05, -1.0]), 0.1)
    np.testing.assert_allclose(out, [0.0, -1.0])
    np.testing.assert_allclose(apply_deadzone(np.array([0.55, 0.0]), 0.1), [0.5, 0.0])


def test_a_world_with_another_action_space_is_refused() -> None:
    spec = dataclasses.replace(SPEC, action_dim=3, action_low=(0, 0, 0), action_high=(1, 1, 1))
    with pytest.raises(DeviceError, match="2-D planar target"):
        keyboard_source(EventBus(), MAPPING).open(spec)


# -- SpaceMouse (fake HID device) ---------------------------------------------------------
@pytest.fixture
def spacemouse(monkeypatch: pytest.MonkeyPatch):
    device = FakeHidDevice()
    install_fake_spacemouse(monkeypatch, device)
    source = SpaceMouseSource(MAPPING)
    source.open(SPEC)
    source.begin(_obs(), START)
    yield device, source
    source.close()


def test_spacemouse_translation_moves_the_target_in_image_axes(spacemouse) -> None:
    device, source = spacemouse
    assert device.opened.is_set()
    device.translate(FULL_SCALE, FULL_SCALE)  # right, toward the operator (down the screen)
    device.settle()
    sent = time.perf_counter()
    action = source.act(_obs(), 0.1)
    np.testing.assert_allclose(action.value, [256 + 20.0, 256 + 20.0], atol=1e-3)
    assert action.stamp <= sent  # the report's receipt time, not the poll's
    device.translate(-FULL_SCALE, -FULL_SCALE // 2)
    device.settle()
    value = source.act(_obs(), 0.1).value
    assert value[0] == pytest.approx(256.0, abs=1e-3)
    assert value[1] < 276.0


def test_spacemouse_deadzone_and_board_clip(spacemouse) -> None:
    device, source = spacemouse
    device.translate(20, -20)  # 6% of full scale: inside the 10% deadzone
    device.settle()
    np.testing.assert_allclose(source.act(_obs(), 0.1).value, [256.0, 256.0])
    device.translate(FULL_SCALE, 0)
    device.settle()
    for _ in range(30):
        value = source.act(_obs(), 0.1).value
    assert value[0] == 512.0  # clipped to the board


def test_spacemouse_buttons_are_episode_controls(spacemouse) -> None:
    device, source = spacemouse
    device.press(0)
    device.press(1)
    device.press(0)
    device.settle()
    assert source.poll() == [Command.TOGGLE, Command.DISCARD, Command.TOGGLE]
    assert source.poll() == []


def test_spacemouse_unplugged_mid_episode_raises_disconnected(spacemouse) -> None:
    device, source = spacemouse
    device.unplug()
    deadline = time.monotonic() + 5
    with pytest.raises(DeviceDisconnected, match="disconnected"):
        while time.monotonic() < deadline:
            source.poll()
            time.sleep(0.005)


def test_no_spacemouse_plugged_in(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_spacemouse(monkeypatch, None)
    with pytest.raises(DeviceError, match=r"no SpaceMouse found.*--device keyboard"):
        SpaceMouseSource(MAPPING).open(SPEC)


def test_missing_hidapi_names_the_apt_package(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_spacemouse(monkeypatch, FakeHidDevice(), hidapi=False)
    with pytest.raises(DeviceError, match="libhidapi-hidraw0"):
        SpaceMouseSource(MAPPING).open(SPEC)


# -- keyboard, mouse, browser (synthetic events) ------------------------------------------
def test_keyboard_held_keys_move_and_keys_command() -> None:
    bus = EventBus()
    source = keyboard_source(bus, MAPPING)
    source.open(SPEC)
    source.begin(_obs(100, 100), START)
    bus.put(KeyEvent("Right", True, time.perf_counter()))
    bus.put(KeyEvent("s", True, time.perf_counter()))
    assert source.poll() == []
    np.testing.assert_allclose(source.act(_obs(), 0.1).value, [120, 120])
    np.testing.assert_allclose(source.act(_obs(), 0.1).value, [140, 140])  # still held
    bus.put(KeyEvent("right", False, time.perf_counter()))
    bus.put(KeyEvent("s", False, time.perf_counter()))
    bus.put(KeyEvent("ArrowUp", True, time.perf_counter()))  # a tap inside one tick
    bus.put(KeyEvent("ArrowUp", False, time.perf_counter()))
    source.poll()
    np.testing.assert_allclose(source.act(_obs(), 0.1).value, [140, 120])
    np.testing.assert_allclose(source.act(_obs(), 0.1).value, [140, 120])
    names = ["space", "Return", "y", "n", "f", "x", "BackSpace", "r", "Escape", "q", "k"]
    for name in names:
        bus.put(KeyEvent(name, True, time.perf_counter()))
        bus.put(KeyEvent(name, False, time.perf_counter()))
    assert source.poll() == [
        Command.START,
        Command.STOP_SUCCESS,
        Command.STOP_SUCCESS,
        Command.STOP_FAILURE,
        Command.STOP_FAILURE,
        Command.DISCARD,
        Command.DISCARD,
        Command.RESET,
        Command.QUIT,
        Command.QUIT,
    ]
    bus.put(ConnectionEvent(False, 0, time.perf_counter()))  # the window was closed
    assert source.poll() == [Command.QUIT]


def test_mouse_pointer_is_the_target() -> None:
    bus = EventBus()
    source = mouse_source(bus, MAPPING)
    source.open(SPEC)
    source.begin(_obs(10, 20), START)
    np.testing.assert_allclose(source.act(_obs(), 0.1).value, [10, 20])  # no pointer yet
    bus.put(PointerEvent(0.25, 0.75, 0, time.perf_counter()))
    bus.put(KeyEvent("right", True, time.perf_counter()))  # keys do not move a mouse
    source.poll()
    np.testing.assert_allclose(source.act(_obs(), 0.1).value, [128, 384])
    bus.put(PointerEvent(1.5, 0.5, 0, time.perf_counter()))  # outside the frame
    source.poll()
    np.testing.assert_allclose(source.act(_obs(), 0.1).value, [128, 384])


def test_web_source_drag_gamepad_and_lost_page() -> None:
    bus = EventBus()
    source = web_source(bus, MAPPING)
    source.open(SPEC)
    source.begin(_obs(), START)
    bus.put(PointerEvent(0.0, 0.0, 0, time.perf_counter()))  # hover without a button
    source.poll()
    np.testing.assert_allclose(source.act(_obs(), 0.1).value, [256, 256])
    bus.put(PointerEvent(0.5, 0.25, 1, time.perf_counter()))  # drag
    source.poll()
    np.testing.assert_allclose(source.act(_obs(), 0.1).value, [256, 128])
    bus.put(AxesEvent(-1.0, 0.0, time.perf_counter()))  # stick full left
    source.poll()
    np.testing.assert_allclose(source.act(_obs(), 0.1).value, [236, 128])
    bus.put(ConnectionEvent(False, 1, time.perf_counter()))  # another tab is still open
    assert source.poll() == []
    bus.put(ConnectionEvent(False, 0, time.perf_counter()))
    assert source.poll() == [Command.LOST]


def test_parse_page_messages() -> None:
    key = parse_message('{"type": "key", "key": "ArrowLeft", "down": true}', 1.0)
    assert key == KeyEvent("ArrowLeft", True, 1.0)
    assert parse_message('{"type": "pointer", "u": 0.5, "v": 0.1, "buttons": 1}', 2.0) == (
        PointerEvent(0.5, 0.1, 1, 2.0)
    )
    assert parse_message('{"type": "axes", "x": 3, "y": -0.5}', 3.0) == AxesEvent(1.0, -0.5, 3.0)
    for bad in ["", "[]", "{", '{"type": "pointer", "u": "a", "v": 0}', '{"type": "x"}']:
        assert parse_message(bad, 0.0) is None
    assert parse_message('{"type": "axes", "x": NaN, "y": 0}', 0.0) is None


def test_window_turns_pygame_events_into_bus_events() -> None:
    from teleop.viewers import Hud
    from teleop.viewers.window import HUD_HEIGHT, WindowViewer

    bus = EventBus()
    viewer = WindowViewer(bus, size=128)
    viewer.open()  # imports pygame quietly
    import pygame

    try:
        pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=pygame.K_RIGHT, mod=0))
        pygame.event.post(pygame.event.Event(pygame.KEYUP, key=pygame.K_SPACE, mod=0))
        pos = (32, HUD_HEIGHT + 96)
        pygame.event.post(
            pygame.event.Event(pygame.MOUSEMOTION, pos=pos, rel=(0, 0), buttons=(0, 0, 0))
        )
        pygame.event.post(pygame.event.Event(pygame.QUIT))
        hud = Hud("keyboard", 1, 0, True, 1.5, 10, 15.0, 0.3, "recording")
        shown = viewer.show(np.full((32, 32, 3), 200, np.uint8), hud)
        assert shown <= time.perf_counter()
        events = bus.drain()
    finally:
        viewer.close()
    assert [type(e).__name__ for e in events] == [
        "KeyEvent",
        "KeyEvent",
        "PointerEvent",
        "ConnectionEvent",
    ]
    assert (events[0].key, events[0].down) == ("right", True)  # type: ignore[union-attr]
    assert (events[1].key, events[1].down) == ("space", False)  # type: ignore[union-attr]
    assert (events[2].u, events[2].v) == (0.25, 0.75)  # type: ignore[union-attr]


# -- scripted -----------------------------------------------------------------------------
def test_scripted_source_starts_itself_and_acts_like_its_generator() -> None:
    from factory.generators import make_generator

    source = ScriptedSource("play")
    assert source.poll() == [Command.START]
    obs = _obs()
    source.begin(obs, InitialCondition(seed=7))
    assert source.poll() == []
    reference = make_generator("play")
    reference.reset(7, obs)
    for _ in range(5):
        np.testing.assert_array_equal(source.act(obs, 0.1).value, reference.act(obs))
    source.end()
    assert source.poll() == [Command.START]


def test_scripted_replay_stops_when_its_actions_run_out() -> None:
    actions = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    source = ScriptedSource("replay")
    with pytest.raises(DeviceError, match="--reset-from"):
        source.begin(_obs(), InitialCondition(seed=0))
    source.begin(_obs(), InitialCondition(seed=0, config=np.zeros(5), actions=actions))
    got = [source.act(_obs(), 0.1).value for _ in range(3)]
    np.testing.assert_array_equal(np.stack(got), actions)
    assert source.poll() == [Command.TOGGLE]


@pytest.mark.hardware
def test_a_real_spacemouse_opens_and_reads() -> None:
    """Needs a SpaceMouse and libhidapi-hidraw0: ``pytest -m hardware``."""
    source = SpaceMouseSource(MAPPING)
    source.open(SPEC)
    try:
        source.begin(_obs(), START)
        time.sleep(0.5)
        source.poll()
        value = source.act(_obs(), 0.1).value
        assert value.shape == (2,) and np.all((value >= 0) & (value <= 512))
    finally:
        source.close()
