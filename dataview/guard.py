"""Who may use the data view: the teleop page's rules (:mod:`teleop.viewers.access`).

Every request but the page's script, style sheet and icon (which hold nothing) needs the
session's token (``?token=``), and on a loopback bind a ``Host`` that names loopback.
The page reads the store with plain same-origin GETs, which carry no ``Origin`` header;
a request that does carry one must come from the page's own origin (``http://`` + Host),
and one that a browser marks as made by another site (``Sec-Fetch-Site``) is refused too,
so a page elsewhere cannot use the operator's browser to read the store.
"""

from __future__ import annotations

from collections.abc import Mapping

from teleop.viewers.access import Access

PUBLIC = ("/view.js", "/view.css", "/favicon.ico")  # no secret: served without the token
OWN_SITE = ("same-origin", "none")  # Sec-Fetch-Site of the page itself, or a typed URL


def refusal(access: Access, path: str, token: str | None, headers: Mapping[str, str]) -> str:
    """Why a request is refused (``""``: allowed). ``headers``: the request's headers."""
    host = headers.get("Host")
    if not access.host_ok(host):
        return f"Host {host!r} is not loopback"
    origin = headers.get("Origin")
    if origin is not None and not access.origin_ok(origin, host):
        return f"Origin {origin!r} is not the page's own"
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site not in OWN_SITE:
        return f"a {site} request (from another site's page)"
    if path in PUBLIC:
        return ""
    if not access.token_ok(token):
        return "no token" if token is None else "a wrong token"
    return ""
