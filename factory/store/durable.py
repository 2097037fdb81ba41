"""Durable stores: fsync what a commit wrote, in an order that keeps the commit point last.

Zarr never fsyncs, so the crash model of :mod:`factory.store.layout` holds for a killed
process (the page cache survives it) but not for a power cut or an OS crash: the kernel
may have put ``episode_ends`` on disk before the data it points at, or neither. A store
created with ``durable=True`` (root attr ``durable: true``) has every append make
data and meta durable before ``episode_ends`` is written, and ``episode_ends`` durable
before the append returns (see :mod:`factory.store.appender`):

1. every data chunk file and ``zarr.json`` written, then the meta ones (the direct writer
   fsyncs each file before its rename; files zarr wrote are fsynced by path), then their
   directories (the renames and deletes);
2. ``episode_ends``: its new entry's chunk file and directory, then the ``zarr.json`` whose
   length publishes the entry (the commit), then that directory again.

A new durable store is fsynced whole (every file and directory) before the rename that
publishes it, and its parent directory after.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import zarr

logger = logging.getLogger(__name__)

ATTR = "durable"
_DIR_FLAGS = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_DIRECTORY", 0)


def _fsync_path(path: Path, flags: int) -> bool:
    """fsync ``path`` (opened with ``flags``); False when it does not exist (a deleted chunk)."""
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def fsync_file(path: Path) -> bool:
    """Flush a file's data and inode to disk; False when there is no such file."""
    return _fsync_path(path, os.O_RDONLY | os.O_CLOEXEC)


def fsync_dir(path: Path) -> bool:
    """Flush a directory's entries (creates, renames, deletes in it) to disk."""
    return _fsync_path(path, _DIR_FLAGS)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root``, each directory after its contents."""
    for top, dirs, files in os.walk(root, topdown=False):
        base = Path(top)
        for name in files:
            fsync_file(base / name)
        for name in dirs:
            fsync_dir(base / name)
    fsync_dir(root)


def missing_ancestors(path: Path) -> list[Path]:
    """The ancestors of ``path`` that do not exist yet, nearest first."""
    out = []
    parent = path.absolute().parent
    while not parent.exists():
        out.append(parent)
        parent = parent.parent
    return out


def publish(tmp: Path, path: Path, created: Iterable[Path] | None) -> None:
    """Rename the store built in ``tmp`` to ``path``. Durably unless ``created`` is None:
    ``tmp`` is fsynced first, the rename (and the directories ``created`` for it, nearest
    first) after."""
    if created is None:
        os.rename(tmp, path)
        return
    fsync_tree(tmp)
    os.rename(tmp, path)
    fsync_dir(path.absolute().parent)
    for directory in created:
        fsync_dir(directory.parent)


def mark_durable(group: zarr.Group, where: Path) -> None:
    """Set the ``durable`` root attr of an existing store (its writer holds the lock)."""
    group.attrs.update({ATTR: True})
    fsync_file(where / "zarr.json")
    fsync_dir(where)
    logger.info("%s: marked durable; every later append fsyncs its commit", where)


def zarr_files(arr: zarr.Array, root: Path, n0: int, n1: int) -> list[Path]:
    """The files zarr writes for rows ``[n0, n1)`` of ``arr`` and its new length: the
    array's ``zarr.json`` and the storage keys (chunks, or shards) holding those rows."""
    base = root / arr.path
    out = [base / "zarr.json"]
    grid = getattr(arr.metadata.chunk_grid, "chunk_shape", None)
    encode = getattr(arr.metadata, "encode_chunk_key", None)
    if grid is None or encode is None:  # not a regular grid: every file in it
        return out + [Path(t) / f for t, _d, fs in os.walk(base) for f in fs]
    first = [range(n0 // grid[0], -(-n1 // grid[0]))]
    rest = [range(-(-int(s) // int(c))) for s, c in zip(arr.shape[1:], grid[1:], strict=True)]
    for coords in itertools.product(*first, *rest):
        out.append(base / encode(coords))
    return out


class Syncer:
    """What one phase of an append changed and still has to reach the disk."""

    def __init__(self) -> None:
        self._files: set[Path] = set()
        self._dirs: set[Path] = set()

    def synced_in(self, directory: Path) -> None:
        """Files already fsynced before their rename (or deleted) in ``directory``."""
        self._dirs.add(directory)

    def written(self, files: Iterable[Path], top: Path) -> None:
        """Files written (not fsynced) under the array directory ``top``: each file, and
        every directory from its own up to ``top``, are fsynced by :meth:`flush`."""
        for path in files:
            self._files.add(path)
            parent = path.parent
            while parent != top and top in parent.parents:
                self._dirs.add(parent)
                parent = parent.parent
            self._dirs.add(top)

    def flush(self) -> None:
        """fsync the files, then the directories; afterwards the phase is durable."""
        for path in sorted(self._files):
            fsync_file(path)
        for directory in sorted(self._dirs):
            fsync_dir(directory)
        self._files.clear()
        self._dirs.clear()
