"""Who gets into the teleop page: the token, the Origin and Host checks, loopback rules,
and what ``factory teleop --device web`` tells its operator (no browser needed here;
tests/test_web_teleop.py drives the page in headless Chromium)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from factory.errors import FactoryError
from pipelines.cli import app
from teleop.sources.events import EventBus
from teleop.viewers.access import check_token, is_loopback, new_token, url_host
from teleop.viewers.web import WebViewer

TOKEN = "operator-token-123"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.7", False),
        ("gpu-box", False),
        ("localhost.evil.example", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_token_rules() -> None:
    assert len({new_token() for _ in range(3)}) == 3 and len(new_token()) == 32
    assert (url_host("::1"), url_host("[::1]"), url_host("127.0.0.1")) == (
        "[::1]",
        "[::1]",
        "127.0.0.1",
    )
    check_token(None, "127.0.0.1")  # --no-token on loopback: allowed
    check_token(TOKEN, "0.0.0.0")
    with pytest.raises(FactoryError, match="only on loopback"):
        check_token(None, "0.0.0.0")
    for bad in ("short", "has a space", "tab\there!"):
        with pytest.raises(FactoryError, match="at least 8 printable"):
            check_token(bad, "127.0.0.1")


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[tuple[WebViewer, EventBus]]:
    host, token = getattr(request, "param", ("127.0.0.1", TOKEN))
    bus = EventBus()
    viewer = WebViewer(bus, host=host, port=0, token=token)
    viewer.open()
    try:
        yield viewer, bus
    finally:
        viewer.close()


async def _status(url: str, headers: dict[str, str], ws: bool) -> int:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        if not ws:
            async with session.get(url, headers=headers) as resp:
                return resp.status
        try:
            async with session.ws_connect(url, headers=headers):
                return 101
        except aiohttp.WSServerHandshakeError as err:
            return err.status


def _statuses(port: int, cases: dict[str, tuple[str, dict[str, str]]]) -> dict[str, int]:
    """``cases``: name -> (path and query, headers); a path under /ws is a websocket."""
    base = f"http://127.0.0.1:{port}"

    async def run() -> dict[str, int]:
        return {
            name: await _status(base + path, headers, path.startswith("/ws"))
            for name, (path, headers) in cases.items()
        }

    return asyncio.run(run())


def test_only_the_token_and_the_pages_origin_get_in(
    served: tuple[WebViewer, EventBus], caplog: pytest.LogCaptureFixture
) -> None:
    viewer, bus = served
    own = {"Origin": f"http://127.0.0.1:{viewer.port}"}
    good = f"?token={TOKEN}"
    cases = {
        "page": (f"/{good}", {}),
        "script": ("/teleop.js", {}),  # it holds no secret
        "page, no token": ("/", {}),
        "page, wrong token": ("/?token=operator-token-124", {}),
        "ws": (f"/ws{good}", own),
        "ws, no token": ("/ws", own),
        "ws, wrong token": ("/ws?token=guess", own),
        "ws, other origin": (f"/ws{good}", {"Origin": "http://evil.example"}),
        "ws, other port": (f"/ws{good}", {"Origin": "http://127.0.0.1:1"}),
        "ws, no origin": (f"/ws{good}", {}),
        "ws, rebound name": (
            f"/ws{good}",
            {"Host": "evil.example", "Origin": "http://evil.example"},
        ),
        "page, rebound name": (f"/{good}", {"Host": f"evil.example:{viewer.port}"}),
    }
    statuses = _statuses(viewer.port, cases)
    allowed = {"page": 200, "script": 200, "ws": 101}
    assert statuses == {name: allowed.get(name, 403) for name in cases}
    assert viewer.location == f"http://127.0.0.1:{viewer.port}/?token={TOKEN}"
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == len(cases) - len(allowed), refused
    assert any("'http://evil.example' is not the page's own" in m for m in refused), refused
    events = bus.drain()  # the one accepted websocket came and went; no refused one did
    assert [e.connected for e in events] == [True, False], events


@pytest.mark.parametrize("served", [("0.0.0.0", TOKEN)], indirect=True)
def test_any_host_name_with_the_token_off_loopback(served: tuple[WebViewer, EventBus]) -> None:
    viewer, _ = served
    host = f"gpu-box:{viewer.port}"
    cases = {
        "page": (f"/?token={TOKEN}", {"Host": host}),
        "page, no token": ("/", {"Host": host}),
        "ws": (f"/ws?token={TOKEN}", {"Host": host, "Origin": f"http://{host}"}),
        "ws, no token": ("/ws", {"Host": host, "Origin": f"http://{host}"}),
        "ws, other origin": (f"/ws?token={TOKEN}", {"Host": host, "Origin": "http://x.example"}),
    }
    allowed = {"page": 200, "ws": 101}
    assert _statuses(viewer.port, cases) == {name: allowed.get(name, 403) for name in cases}


@pytest.mark.parametrize("served", [("127.0.0.1", None)], indirect=True)
def test_no_token_on_loopback_still_checks_the_origin(served: tuple[WebViewer, EventBus]) -> None:
    viewer, _ = served
    own = {"Origin": f"http://127.0.0.1:{viewer.port}"}
    cases = {
        "page": ("/", {}),
        "ws": ("/ws", own),
        "ws, other origin": ("/ws", {"Origin": "http://evil.example"}),
        "ws, rebound name": ("/ws", {"Host": "evil.example", "Origin": "http://evil.example"}),
    }
    assert _statuses(viewer.port, cases) == {
        "page": 200,
        "ws": 101,
        "ws, other origin": 403,
        "ws, rebound name": 403,
    }
    assert viewer.location == f"http://127.0.0.1:{viewer.port}/"


class _FakeSession:
    def __init__(self, url: str) -> None:
        self.viewer = type("V", (), {"location": url})()
        self.world = type("W", (), {"spec": type("S", (), {"name": "pusht"})()})()


@pytest.mark.parametrize(
    ("args", "url", "warnings"),
    [
        ([], "http://127.0.0.1:8765/?token=abc", []),
        (["--no-token"], "http://127.0.0.1:8765/", ["--no-token: any program or user"]),
        (["--host", "0.0.0.0"], "http://0.0.0.0:9999/?token=abc", ["not encrypted", "ssh -L 9999"]),
    ],
)
def test_cli_prints_the_url_and_warnings(
    monkeypatch: pytest.MonkeyPatch, args: list[str], url: str, warnings: list[str]
) -> None:
    import pipelines.teleop as teleop

    def fake_run(cfg: Any, on_ready: Any) -> dict[str, Any]:
        on_ready(_FakeSession(url))
        summary = {"episodes": 0, "frames": 0, "achieved_fps": 0.0, "late_frac": 0.0}
        return {**summary, "latency_ms_p99": 0.0, "end_reason": "quit"}

    monkeypatch.setattr(teleop, "run_teleop", fake_run)
    result = CliRunner().invoke(app, ["teleop", "--device", "web", "--out", "x.zarr", *args])
    assert result.exit_code == 0, result.output
    assert f"open {url}" in result.output
    assert result.output.count("warning:") == (1 if warnings else 0), result.output
    for needle in warnings:
        assert needle in result.output.replace("\n", " ")
