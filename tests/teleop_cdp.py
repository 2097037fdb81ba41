"""A minimal Chrome DevTools Protocol client (over aiohttp) to drive headless Chromium.

Only what the page tests (the teleop page, the data view) need: open a page, dispatch key
events, evaluate an expression, take a screenshot, open (and close) a second tab, and
serve a page from another origin (:func:`foreign_site`). Chromium is Debian's
(``apt-get install -y chromium``): :data:`NEEDS_CHROMIUM` skips a test without it.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
NEEDS_CHROMIUM = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's headless Chromium at /usr/bin/chromium "
    "(apt-get install -y chromium; .ci/run installs it)",
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--window-size=700,900",
]
KEYS: dict[str, tuple[str, int, str]] = {  # key -> (code, Windows virtual key code, text)
    " ": ("Space", 32, " "),
    "ArrowRight": ("ArrowRight", 39, ""),
    "ArrowLeft": ("ArrowLeft", 37, ""),
    "ArrowUp": ("ArrowUp", 38, ""),
    "ArrowDown": ("ArrowDown", 40, ""),
    "y": ("KeyY", 89, "y"),
    "n": ("KeyN", 78, "n"),
}


async def foreign_site(html: str, reports: asyncio.Queue[str]) -> tuple[Any, str]:
    """Another origin: a server on another loopback port whose page ``/`` is ``html``; each
    ``GET /report?result=WHAT`` it gets puts WHAT on ``reports``. Its aiohttp runner (to
    ``cleanup()``) and its URL."""
    from aiohttp import web

    async def page(request: Any) -> Any:
        return web.Response(text=html, content_type="text/html")

    async def report(request: Any) -> Any:
        await reports.put(request.query["result"])
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/report", report)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/"


class Browser:
    """Headless Chromium showing ``url``, with a fresh profile under ``profile``."""

    def __init__(self, url: str, profile: Path) -> None:
        self.url = url
        self.profile = profile
        self._ids = itertools.count(1)
        self._proc: subprocess.Popen[bytes] | None = None
        self._session: Any = None
        self._ws: Any = None
        self._port = 0

    async def __aenter__(self) -> Browser:
        import aiohttp

        self.profile.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [str(CHROMIUM), *FLAGS, f"--user-data-dir={self.profile}", self.url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._port = port = await self._devtools_port()
        self._session = aiohttp.ClientSession()
        target = await self._page_target(port)
        self._ws = await self._session.ws_connect(target, max_msg_size=0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)

    async def _devtools_port(self, timeout: float = 60.0) -> int:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"chromium exited with code {self._proc.returncode}")
            if marker.exists():
                lines = marker.read_text().splitlines()
                if lines and lines[0].isdigit():
                    return int(lines[0])
            await asyncio.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    async def _page_target(self, port: int, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            async with self._session.get(f"http://127.0.0.1:{port}/json/list") as resp:
                targets = await resp.json()
            for target in targets:
                if target.get("type") == "page" and target.get("url", "").startswith(self.url):
                    return str(target["webSocketDebuggerUrl"])
            await asyncio.sleep(0.1)
        raise TimeoutError(f"chromium shows no page at {self.url}")

    async def open_tab(self, url: str) -> str:
        """Open ``url`` in a new tab (this page stays open behind it); its target id."""
        async with self._session.put(f"http://127.0.0.1:{self._port}/json/new?{url}") as resp:
            resp.raise_for_status()
            return str((await resp.json())["id"])

    async def close_tab(self, target_id: str) -> None:
        """Close a tab from :meth:`open_tab` and bring this page back to the front."""
        async with self._session.get(f"http://127.0.0.1:{self._port}/json/close/{target_id}"):
            pass
        await self.call("Page.bringToFront")

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events in between are skipped)."""
        msg_id = next(self._ids)
        await self._ws.send_json({"id": msg_id, "method": method, "params": params})
        while True:
            reply = await self._ws.receive_json(timeout=30)
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    async def key(self, key: str, down: bool) -> None:
        code, vk, text = KEYS[key]
        params: dict[str, Any] = {
            "type": ("keyDown" if text else "rawKeyDown") if down else "keyUp",
            "key": key,
            "code": code,
            "windowsVirtualKeyCode": vk,
        }
        if down and text:
            params["text"] = text
        await self.call("Input.dispatchKeyEvent", **params)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    async def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Poll ``expression`` until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.05)
        raise TimeoutError(f"the page never satisfied {expression!r}")

    async def screenshot(self, path: Path) -> bytes:
        result = await self.call("Page.captureScreenshot", format="png")
        data = base64.b64decode(result["data"])
        path.write_bytes(data)
        return data
