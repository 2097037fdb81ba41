"""The data view's web server: aiohttp on its own thread and event loop
(:class:`teleop.viewers.serving.ThreadedAiohttpServer`).

``GET /`` is the page (``static/``); ``/api/...`` serves :class:`factory.view.StoreView`:
the table (metadata only), an episode's details, its thumbnail, filmstrip and frames
(PNG sprite sheets, made on demand and cached) and, for an episode generated from a
seeded reset, its ground-truth replay. Slow work runs on a small thread pool, so the page
stays responsive while a thumbnail is encoded or a replay runs. Requests are checked by
:func:`dataview.guard.refusal` (token, Origin, loopback) and refused with 403.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataview.guard import refusal
from factory.errors import FactoryError
from factory.view import StoreView
from teleop.viewers.serving import PortInUseError, ThreadedAiohttpServer

__all__ = ["DataViewServer", "PortInUseError"]
log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
PAGES = {"/": ("index.html", "text/html"), "/view.js": ("view.js", "text/javascript")}
PAGES["/view.css"] = ("view.css", "text/css")
WORKERS = 2


class DataViewServer(ThreadedAiohttpServer):
    """Serves the page and the API that show ``view`` (``host``, ``port``, ``token``: as
    :class:`ThreadedAiohttpServer`)."""

    noun = "the data view"
    thread_name = "dataview-web"

    def __init__(
        self, view: StoreView, host: str = "127.0.0.1", port: int = 8766, token: str | None = None
    ) -> None:
        super().__init__(host, port, token)
        self.view = view
        self._pool = concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="dataview")

    def close(self) -> None:
        """Stop serving and wait for the server thread (idempotent)."""
        super().close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _app(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def guard(request: Any, handler: Callable[[Any], Any]) -> Any:
            return await self._guard(request, handler)

        app = web.Application(middlewares=[guard])
        for route in PAGES:
            app.router.add_get(route, self._page)
        app.router.add_get("/favicon.ico", self._no_icon)
        app.router.add_get("/api/store", self._store)
        app.router.add_get("/api/episodes", self._episodes)
        app.router.add_get(r"/api/episodes/{index:\d+}", self._detail)
        app.router.add_get(r"/api/episodes/{index:\d+}/{name}.png", self._image)
        app.router.add_get(r"/api/episodes/{index:\d+}/replay.json", self._replay)
        return app

    # -- handlers -------------------------------------------------------------------------
    async def _guard(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Refuse (403) what the user did not ask for; turn a FactoryError into a 404."""
        from aiohttp import web

        why = refusal(self.access, request.path, request.query.get("token"), request.headers)
        if why:
            log.warning("data view: refused %s from %s: %s", request.path, request.remote, why)
            raise web.HTTPForbidden(text=f"forbidden: {why}\n")
        try:
            return await handler(request)
        except FactoryError as err:
            return web.json_response({"error": str(err)}, status=404, headers=_NO_STORE)

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    async def _page(self, request: Any) -> Any:
        from aiohttp import web

        name, kind = PAGES[request.path]
        text = (STATIC / name).read_text(encoding="utf-8")
        return web.Response(text=text, content_type=kind, headers=_page_headers())

    async def _no_icon(self, request: Any) -> Any:
        from aiohttp import web

        return web.Response(status=204)

    async def _json(self, fn: Callable[..., Any], *args: Any) -> Any:
        from aiohttp import web

        body = await self._run(lambda: json.dumps(_finite(fn(*args)), allow_nan=False))
        return web.Response(text=body, content_type="application/json", headers=_NO_STORE)

    async def _store(self, request: Any) -> Any:
        return await self._json(self.view.summary)

    async def _episodes(self, request: Any) -> Any:
        return await self._json(lambda: {"rows": [r.to_json() for r in self.view.rows()]})

    async def _detail(self, request: Any) -> Any:
        return await self._json(self.view.detail, int(request.match_info["index"]))

    async def _replay(self, request: Any) -> Any:
        index = int(request.match_info["index"])
        return await self._json(lambda: self.view.replay(index).to_json())

    async def _image(self, request: Any) -> Any:
        from aiohttp import web

        makers = {
            "thumb": self.view.thumb_png,
            "film": self.view.filmstrip_png,
            "frames": self.view.frames_png,
            "replay": self.view.replay_frames_png,
        }
        make = makers.get(request.match_info["name"])
        if make is None:
            raise web.HTTPNotFound(text="no such image\n")
        png = await self._run(make, int(request.match_info["index"]))
        # no-store: a cached copy would reach another site's page without asking us
        return web.Response(body=png, content_type="image/png", headers=_NO_STORE)


_NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None (JSON has no nan)."""
    if isinstance(obj, float):
        return obj if obj == obj and abs(obj) != float("inf") else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def _page_headers() -> dict[str, str]:
    """No caching, no referrer (the URL holds the token), no framing, same-origin only."""
    policy = "default-src 'self'; img-src 'self'; frame-ancestors 'none'"
    return {
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": policy,
    }
