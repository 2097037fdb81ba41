"""The teleop web page: an aiohttp server on its own thread and event loop
(:class:`teleop.viewers.serving.ThreadedAiohttpServer`).

``GET /`` serves the page (``static/index.html`` and ``static/teleop.js``); ``/ws`` is a
websocket over which the server pushes each frame (a binary PNG message, then the HUD as
a JSON text message) and the page sends the operator's keys, pointer and gamepad input
(:mod:`teleop.sources.web`). Slow clients skip frames: only the newest is sent.

Only the operator gets in (:mod:`teleop.viewers.access`): the page and the websocket
need the session's token (``?token=``), the websocket must come from the page's own
origin, and on a loopback bind the request must name loopback; anything else gets 403
before it reaches the recorder, and is logged.

It binds 127.0.0.1 by default. To drive a model on a remote GPU box, forward the port
(``ssh -L 8765:127.0.0.1:8765 gpu-box``) rather than binding a public address: the page
is plain HTTP, so the token and the frames cross the network unencrypted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from factory.errors import FactoryError
from teleop.sources.events import ConnectionEvent, EventBus
from teleop.sources.web import parse_message
from teleop.viewers.base import Hud
from teleop.viewers.serving import PortInUseError, ThreadedAiohttpServer

__all__ = ["PortInUseError", "WebViewer"]
log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
PAGES = {"/": "index.html", "/teleop.js": "teleop.js"}


class WebViewer(ThreadedAiohttpServer):
    """Serves the teleop page and its websocket: frames from :meth:`show` out, the
    operator's input into ``bus`` (``host``, ``port``, ``token``: as
    :class:`ThreadedAiohttpServer`)."""

    noun = "the teleop page"
    thread_name = "teleop-web"

    def __init__(
        self, bus: EventBus, host: str = "127.0.0.1", port: int = 8765, token: str | None = None
    ) -> None:
        super().__init__(host, port, token)
        self.bus = bus
        self._clients: dict[Any, asyncio.Event] = {}
        self._latest: tuple[bytes, str] | None = None
        self._encode: Any = None

    @property
    def clients(self) -> int:
        return len(self._clients)

    def open(self) -> None:
        import cv2

        self._encode = cv2.imencode
        super().open()

    def _app(self) -> Any:
        from aiohttp import web

        app = web.Application()
        for route in PAGES:
            app.router.add_get(route, self._page)
        app.router.add_get("/ws", self._socket)
        return app

    async def _closing(self) -> None:
        for ws in list(self._clients):
            with contextlib.suppress(Exception):
                await ws.close()

    # -- frames ---------------------------------------------------------------------------
    def show(self, frame: np.ndarray, hud: Hud) -> float:
        loop = self._loop
        if loop is None:
            raise FactoryError(f"{self.noun} server is not running")
        if self._clients:
            ok, png = self._encode(".png", np.ascontiguousarray(frame[..., ::-1]))
            if ok:
                payload = (png.tobytes(), json.dumps(hud.to_json()))
                loop.call_soon_threadsafe(self._publish, payload)
        return time.perf_counter()

    def _publish(self, payload: tuple[bytes, str]) -> None:
        self._latest = payload
        for wake in self._clients.values():
            wake.set()

    # -- handlers -------------------------------------------------------------------------
    def _refuse(self, request: Any) -> None:
        """Raise 403 for a request the operator did not make (the script holds no secret)."""
        from aiohttp import web

        if request.path == "/teleop.js":
            return
        token = request.query.get("token")
        headers = {k: request.headers[k] for k in ("Host", "Origin") if k in request.headers}
        why = self.access.refusal(request.path, token, headers)
        if why:
            log.warning("teleop page: refused %s from %s: %s", request.path, request.remote, why)
            raise web.HTTPForbidden(text=f"forbidden: {why}\n")

    async def _page(self, request: Any) -> Any:
        from aiohttp import web

        self._refuse(request)
        name = PAGES[request.path]
        kind = "text/html" if name.endswith(".html") else "text/javascript"
        text = (STATIC / name).read_text(encoding="utf-8")
        return web.Response(text=text, content_type=kind, headers=_page_headers(request.host))

    async def _socket(self, request: Any) -> Any:
        from aiohttp import WSMsgType, web

        self._refuse(request)  # before the upgrade: a refused client never reaches the bus
        ws = web.WebSocketResponse(heartbeat=10.0, max_msg_size=4096)
        await ws.prepare(request)
        wake = asyncio.Event()
        self._clients[ws] = wake
        self.bus.put(ConnectionEvent(True, len(self._clients), time.perf_counter()))
        if self._latest is not None:
            wake.set()
        sender = asyncio.create_task(self._send(ws, wake))
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    event = parse_message(msg.data, time.perf_counter())
                    if event is not None:
                        self.bus.put(event)
        finally:
            sender.cancel()
            self._clients.pop(ws, None)
            self.bus.put(ConnectionEvent(False, len(self._clients), time.perf_counter()))
        return ws

    async def _send(self, ws: Any, wake: asyncio.Event) -> None:
        with contextlib.suppress(ConnectionError, RuntimeError):
            while not ws.closed:
                await wake.wait()
                wake.clear()
                if self._latest is not None:
                    png, hud = self._latest
                    await ws.send_bytes(png)
                    await ws.send_str(hud)


def _page_headers(host: str) -> dict[str, str]:
    """No caching, no referrer (the URL holds the token), no framing, same-origin only."""
    policy = (
        "default-src 'self'; style-src 'self' 'unsafe-inline'; "
        f"connect-src 'self' ws://{host}; frame-ancestors 'none'"
    )
    return {
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": policy,
    }
