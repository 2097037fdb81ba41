"""An aiohttp application served on its own thread and event loop: the base of the teleop
page (:mod:`teleop.viewers.web`) and of the data view (:mod:`dataview.server`).

A subclass builds its ``aiohttp.web.Application`` (:meth:`ThreadedAiohttpServer._app`)
and may close what it holds open before the runner stops (:meth:`_closing`). This class
binds ``host:port`` (port 0: any free one, read back once bound), returns from
:meth:`~ThreadedAiohttpServer.open` once the port is bound, turns a startup failure into
one :class:`FactoryError` (a taken port: :class:`PortInUseError`) and stops the loop and
its thread. aiohttp is imported only once the server starts.
"""

from __future__ import annotations

import abc
import asyncio
import errno
import logging
import threading
from typing import Any

from factory.errors import FactoryError
from teleop.viewers.access import Access, url_host

log = logging.getLogger(__name__)

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0


class PortInUseError(FactoryError):
    """A server's port is taken."""


class ThreadedAiohttpServer(abc.ABC):
    """Serves the subclass's application on ``host:port`` (port 0: any free one) to whoever
    holds ``token`` (None: no token asked; the caller allows that on loopback only).

    ``noun`` names what is served in the errors and the log ("cannot serve the data view
    on ...", "the data view server did not start ..."); ``thread_name`` names the thread.
    """

    noun = "the server"
    thread_name = "aiohttp-server"

    def __init__(self, host: str, port: int, token: str | None) -> None:
        self.host = host
        self.port = int(port)
        self.access = Access(token=token, host=host)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None

    @property
    def address(self) -> str:
        """The page's URL without its token."""
        return f"http://{url_host(self.host)}:{self.port}/"

    @property
    def location(self) -> str:
        """The page's URL with its token: what the user opens."""
        return self.address + self.access.query()

    @abc.abstractmethod
    def _app(self) -> Any:
        """The ``aiohttp.web.Application`` to serve (built on the server's loop)."""

    async def _closing(self) -> None:
        """Close what the subclass holds open (its websockets) before the runner stops;
        by default nothing."""
        return None

    # -- lifecycle ------------------------------------------------------------------------
    def open(self) -> None:
        """Start serving; returns once the port is bound. FactoryError if it cannot be
        (:class:`PortInUseError`: it is taken)."""
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=self._serve,
            args=(loop, ready, failure),
            name=self.thread_name,
            daemon=True,
        )
        self._thread = thread
        thread.start()
        if not ready.wait(START_TIMEOUT_S):
            raise FactoryError(f"{self.noun} server did not start on {self.address}")
        if failure:
            thread.join()
            self._thread = None
            raise self._explain(failure[0]) from failure[0]
        self._loop = loop
        log.info("%s at %s", self.noun, self.address)

    def close(self) -> None:
        """Stop serving and wait for the server thread (idempotent)."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=STOP_TIMEOUT_S)
            self._thread = None

    def _serve(
        self, loop: asyncio.AbstractEventLoop, ready: threading.Event, failure: list[BaseException]
    ) -> None:
        """The server thread: start (or record why not), then run until :meth:`close`."""
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._start())
        except BaseException as err:
            failure.append(err)
            ready.set()
            loop.close()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(self._stop())
        loop.close()

    def _explain(self, err: BaseException) -> FactoryError:
        if isinstance(err, OSError) and err.errno == errno.EADDRINUSE:
            return PortInUseError(
                f"port {self.port} on {self.host} is already in use: pass --port with a free "
                "port (0: any), or stop the program that holds it"
            )
        if isinstance(err, OSError):
            return FactoryError(f"cannot serve {self.noun} on {self.host}:{self.port} ({err})")
        return FactoryError(f"{self.noun} server failed to start ({err!r})")

    async def _start(self) -> None:
        from aiohttp import web

        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        if self.port == 0:
            self.port = int(runner.addresses[0][1])

    async def _stop(self) -> None:
        await self._closing()
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
