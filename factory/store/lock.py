"""Single-writer lock for an episode store.

Zarr gives no protection against two processes appending to the same store, and measured
concurrent appenders lose episodes. A writer therefore holds an exclusive, non-blocking
``fcntl.flock`` on ``STORE/.lock``. The kernel drops the lock when the holder's file
descriptor closes, including when the process is SIGKILLed, so a crash never leaves a stale
lock behind. The holder writes its pid into the file, only to name it in the error message.

Two ``open(mode="a")`` calls in the same process also conflict (flock locks belong to the
open file description, not the process). A child created by ``fork`` inherits the
descriptor and keeps the lock alive while it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path

from factory.errors import StoreError, StoreLockedError

logger = logging.getLogger(__name__)

LOCK_NAME = ".lock"


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


class StoreLock:
    """An acquired writer lock on ``store_dir/.lock``; :meth:`release` (or close) drops it."""

    def __init__(self, store_dir: Path, fd: int) -> None:
        self.store_dir = store_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, store_dir: str | Path, *, display: str | Path | None = None) -> StoreLock:
        """Take the lock or raise :class:`StoreLockedError` naming the holder's pid.

        ``display`` is the path used in messages (defaults to ``store_dir``).
        """
        store_dir = Path(store_dir)
        shown = display if display is not None else store_dir
        path = store_dir / LOCK_NAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise StoreError(
                f"cannot open the writer lock {path}: {err.strerror}; "
                "check that the store is on a writable file system"
            ) from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            who = "pid unknown" if pid is None else f"pid {pid}"
            if pid == os.getpid():
                who += ", this process"
            raise StoreLockedError(
                f"{shown} is being written by another process ({who}); wait for it to finish, "
                "or write to a separate store and merge them afterwards"
            ) from None
        except OSError as err:
            os.close(fd)
            raise StoreError(f"cannot lock {path}: {err.strerror}") from err
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        logger.debug("acquired writer lock %s", path)
        return cls(store_dir, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (idempotent). The lock file itself stays: deleting it would race."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        logger.debug("released writer lock %s", self.store_dir / LOCK_NAME)

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            with contextlib.suppress(Exception):
                self.release()
