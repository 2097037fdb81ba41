"""Who may use the teleop page: a per-session token, the page's own origin, local hosts.

The page (``GET /``) and its websocket (``/ws``) both need ``?token=`` (the page hands
its own to the websocket); a missing or wrong token gets HTTP 403. A websocket must come
from the page itself: its ``Origin`` must be ``http://`` + the ``Host`` it was sent to,
so a page on any other site (or another local port) cannot open one from the operator's
browser. When the server binds a loopback address, the ``Host`` must name loopback too
(``127.0.0.1``, ``localhost``, ``[::1]``), so a DNS-rebound name cannot reach it either.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from factory.errors import FactoryError

MIN_TOKEN = 8  # characters, for a token the operator chooses
LOOPBACK_NAMES = ("localhost", "localhost.")


def new_token() -> str:
    """A fresh random token (32 URL-safe characters, 192 bits)."""
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    """True for ``localhost``, ``127.0.0.0/8`` and ``::1`` (brackets allowed)."""
    name = host.strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """``host`` as it goes in a URL: IPv6 addresses in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def check_token(token: str | None, host: str) -> None:
    """Refuse a token the operator chose that is too short, and no token off loopback."""
    if token is None:
        if not is_loopback(host):
            raise FactoryError(
                f"--no-token is allowed only on loopback, not --host {host}: anyone who "
                "can reach the port could drive the robot and write episodes"
            )
        return
    if len(token) < MIN_TOKEN or not token.isprintable() or " " in token:
        raise FactoryError(
            f"--token must be at least {MIN_TOKEN} printable characters without spaces"
        )


@dataclass(frozen=True)
class Access:
    """The rules of one server: its ``token`` (None: none asked) and the ``host`` it binds."""

    token: str | None
    host: str

    def query(self) -> str:
        """What the page's URL carries: ``?token=...`` or nothing."""
        return "" if self.token is None else f"?token={quote(self.token, safe='')}"

    def token_ok(self, given: str | None) -> bool:
        if self.token is None:
            return True
        if given is None:
            return False
        return hmac.compare_digest(given.encode(), self.token.encode())

    def host_ok(self, host_header: str | None) -> bool:
        """On a loopback bind the request must name loopback (no DNS-rebound names)."""
        if not is_loopback(self.host):
            return True
        if not host_header:
            return False
        return is_loopback(urlsplit(f"//{host_header}").hostname or "")

    def origin_ok(self, origin: str | None, host_header: str | None) -> bool:
        """The websocket comes from the page itself: Origin is ``http://`` + Host."""
        if not origin or not host_header:
            return False
        return origin.lower() == f"http://{host_header}".lower()

    def refusal(self, path: str, query_token: str | None, headers: dict[str, str]) -> str:
        """Why a request is refused (``""``: allowed). ``headers``: Host and Origin."""
        host = headers.get("Host")
        if not self.host_ok(host):
            return f"Host {host!r} is not loopback"
        if path == "/ws" and not self.origin_ok(headers.get("Origin"), host):
            return f"Origin {headers.get('Origin')!r} is not the page's own"
        if not self.token_ok(query_token):
            return "no token" if query_token is None else "a wrong token"
        return ""
