"""Ray's token authentication on the clusters ``factory generate`` and ``factory demo`` start.

Ray 2.59+ turns token authentication on for a cluster that ``ray.init()`` starts (unless
``RAY_AUTH_MODE`` says otherwise) and keeps the token in ``~/.ray/auth_token``. Such a
cluster listens on every interface (its GCS, raylet, object manager and worker ports:
checked on Ray 2.60, see the README's security section), so the token is what keeps
other machines out. Before a local start this module

- writes that token file readable by its owner only (Ray would write it 0644), or warns
  when an existing one is readable by others;
- warns when the environment turned authentication off;
- drops Ray's notice that it turned authentication on (it advises turning it off).

It never sets ``RAY_AUTH_MODE`` (only the test suite disables authentication).
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path

log = logging.getLogger(__name__)

RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"


def token_path() -> Path:
    """Where Ray keeps the token of the clusters this user starts."""
    return Path.home() / ".ray" / "auth_token"


class _DropAuthNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(AUTH_NOTICE)


def quiet_auth_notice() -> None:
    """Drop Ray's one-line notice that token authentication is on (idempotent)."""
    logger = logging.getLogger(RAY_AUTH_LOGGER)
    if not any(isinstance(f, _DropAuthNotice) for f in logger.filters):
        logger.addFilter(_DropAuthNotice())


def private_token_file(path: Path) -> None:
    """Create ``path`` with a new token, mode 0600, unless it exists (then warn if others
    can read it)."""
    if path.exists():
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            log.warning("%s (the Ray cluster token) is readable by other users: chmod 600 it", path)
        return
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process just wrote it
        return
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))  # what Ray itself generates: 256 random bits


def prepare_local_start() -> None:
    """Before ``ray.init()`` starts a cluster on this machine (see the module docstring)."""
    quiet_auth_notice()
    if os.environ.get("RAY_ADDRESS"):
        return  # ray.init() joins that cluster instead
    mode = os.environ.get("RAY_AUTH_MODE", "token").lower()
    if mode != "token":
        log.warning(
            "RAY_AUTH_MODE=%s: the local Ray cluster runs without token authentication, "
            "and its ports listen on every interface",
            mode,
        )
        return
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        private_token_file(token_path())
