"""The browser device: the page server over a plain websocket client, and the real page
in headless Chromium (key presses move the agent in the recorded actions; a screenshot),
while a page from another origin and clients without the token are turned away."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from teleop_cdp import NEEDS_CHROMIUM, Browser, foreign_site

from factory.store import EpisodeStore
from teleop.sources.events import ConnectionEvent, EventBus, KeyEvent
from teleop.viewers import Hud
from teleop.viewers.web import WebViewer

HUD = Hud("web", 1, 0, False, 0.0, 0, 15.0, 0.25, "ready")


def _wait(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_page_server_pushes_frames_and_forwards_input() -> None:
    import aiohttp

    bus = EventBus()
    viewer = WebViewer(bus, port=0, token="s3cret-token")
    viewer.open()
    frame = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    events: list[Any] = []

    def seen(kind: type, **fields: Any) -> bool:
        events.extend(bus.drain())
        return any(
            isinstance(e, kind) and all(getattr(e, k) == v for k, v in fields.items())
            for e in events
        )

    async def client() -> tuple[str, bytes, dict[str, Any]]:
        async with aiohttp.ClientSession() as session:
            async with session.get(viewer.location) as resp:
                page = await resp.text()
            url = viewer.address + "ws?token=s3cret-token"
            async with session.ws_connect(url, origin=viewer.address.rstrip("/")) as ws:
                await asyncio.to_thread(_wait, lambda: viewer.clients == 1)
                viewer.show(frame, HUD)
                png = (await ws.receive(timeout=20)).data
                hud = json.loads((await ws.receive(timeout=20)).data)
                await ws.send_str(json.dumps({"type": "key", "key": "ArrowUp", "down": True}))
                await ws.send_str("not json")
                await asyncio.to_thread(_wait, lambda: seen(KeyEvent))
        return page, png, hud

    try:
        page, png, hud = asyncio.run(client())
        _wait(lambda: seen(ConnectionEvent, connected=False))
    finally:
        viewer.close()
    assert "teleop.js" in page
    decoded = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)[..., ::-1]
    np.testing.assert_array_equal(decoded, frame)  # PNG: lossless
    assert hud["message"] == "ready" and hud["device"] == "web"
    assert len(events) == 3, events  # the invalid message is dropped
    assert isinstance(events[0], ConnectionEvent) and events[0].connected
    assert isinstance(events[1], KeyEvent) and events[1].key == "ArrowUp" and events[1].down
    assert isinstance(events[-1], ConnectionEvent) and events[-1].clients == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Another site's page (teleop_cdp.foreign_site) that opens the teleop websocket, token and
# all, and tries to discard the episode; it reports back what happened.
FOREIGN_PAGE = """<!doctype html><script>
const ws = new WebSocket("%s");
ws.onopen = () => { ws.send(JSON.stringify({type: "key", key: "x", down: true}));
                    fetch("/report?result=open"); };
ws.onclose = () => fetch("/report?result=closed");
</script>"""


async def _refused_status(url: str, origin: str) -> int:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url, origin=origin):
                return 101
        except aiohttp.WSServerHandshakeError as err:
            return err.status


@NEEDS_CHROMIUM
def test_page_in_headless_chromium_drives_the_agent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from pipelines.teleop import TeleopConfig, TeleopSession, run_teleop

    out = tmp_path / "web.zarr"
    cfg = TeleopConfig(
        out=out,
        device="web",
        world="pusht",
        resolution=32,
        fps=20,
        episodes=1,
        steps=400,
        port=_free_port(),
        task="web test",
    )
    ready = threading.Event()
    result: dict[str, Any] = {}

    def on_ready(session: TeleopSession) -> None:
        result["url"] = session.viewer.location
        ready.set()

    def serve() -> None:
        try:
            result["summary"] = run_teleop(cfg, on_ready)
        except BaseException as err:  # reported below
            result["error"] = err
            ready.set()

    node = threading.Thread(target=serve, daemon=True)
    node.start()
    assert ready.wait(60) and "error" not in result, result
    url = result["url"]
    token = url.split("?token=", 1)[1]
    assert len(token) >= 32 and url.startswith(f"http://127.0.0.1:{cfg.port}/?token=")
    shot = tmp_path / "teleop_page.png"
    outcomes: dict[str, Any] = {}

    async def intruders(browser: Browser) -> None:
        """While the operator records: another site's page, then clients without the
        token; none may get in, and the recording goes on."""
        socket_url = f"ws://127.0.0.1:{cfg.port}/ws"
        reports: asyncio.Queue[str] = asyncio.Queue()
        runner, foreign = await foreign_site(FOREIGN_PAGE % f"{socket_url}?token={token}", reports)
        try:
            tab = await browser.open_tab(foreign)
            outcomes["foreign"] = await asyncio.wait_for(reports.get(), 60)
            await browser.close_tab(tab)
        finally:
            await runner.cleanup()
        own = f"http://127.0.0.1:{cfg.port}"
        outcomes["no token"] = await _refused_status(socket_url, own)
        outcomes["wrong token"] = await _refused_status(socket_url + "?token=guess", own)
        outcomes["recording"] = await browser.evaluate("window.teleop.hud.recording")

    async def operate() -> None:
        async with Browser(url, tmp_path / "profile") as page:
            await page.wait_for("window.teleop && window.teleop.frames > 0")
            await page.key(" ", True)
            await page.key(" ", False)
            await page.wait_for("window.teleop.hud && window.teleop.hud.recording")
            await intruders(page)
            await page.key("ArrowRight", True)
            await asyncio.sleep(1.0)
            await page.key("ArrowRight", False)
            await page.wait_for("window.teleop.hud.frames > 20")
            await page.screenshot(shot)
            await page.key("y", True)
            await page.key("y", False)
            await asyncio.to_thread(node.join, 60)

    asyncio.run(operate())
    assert not node.is_alive(), "the node did not finish after the save key"
    assert "error" not in result, result.get("error")
    assert outcomes == {
        "foreign": "closed",
        "no token": 403,
        "wrong token": 403,
        "recording": True,
    }
    refusals = [r.getMessage() for r in caplog.records if "refused /ws" in r.getMessage()]
    assert len(refusals) == 3 and "is not the page's own" in refusals[0], refusals
    summary = result["summary"]
    assert summary["episodes"] == 1 and summary["end_reason"] == "done"
    assert token not in json.dumps(summary)  # the summary outlives the session
    with EpisodeStore.open(out) as store:
        episode = store.episode(0)
        actions, states, meta = episode["action"], episode["state"], episode.meta
    assert meta.extra["device"] == "web" and meta.success is True and meta.task == "web test"
    assert actions[-1, 0] - actions[0, 0] > 100, actions[:, 0]  # ~256 px/s for ~1 s
    assert abs(actions[-1, 1] - actions[0, 1]) < 1e-3  # right, not up or down
    assert states[-1, 0] - states[0, 0] > 50  # the agent followed
    image = cv2.imread(str(shot))
    assert image is not None and image.shape[0] > 512 and image.shape[1] > 512
    assert image.std() > 10  # the frame and the HUD, not a blank page
