"""The append path of an episode store: direct chunk writes, zarr where they do not apply.

An append of ``T`` frames at frame ``n0`` writes, in this order (the crash model of
:mod:`factory.store.layout` is unchanged):

1. every ``data/<key>``: its shape (``zarr.json``) to ``n0 + T``, then its chunks;
2. ``meta/episode_meta``: shape ``E + 1``, then entry ``E``;
3. ``meta/episode_ends``: entry ``E`` = ``n0 + T`` (past the stored shape, so unseen), then
   shape ``E + 1``. That one ``zarr.json`` rename is the commit point: a direct append never
   leaves the unwritten ``episode_ends`` slot a zarr append can (resize, then write).

In a durable store (``durable=True``) steps 1 and 2 are fsynced (files, then directories)
before step 3 starts, and step 3's entry before its length, then its length
(:mod:`factory.store.durable`); :meth:`Appender._commit` is step 3.

Arrays whose layout :class:`~factory.store.chunkfile.DirectArray` reproduces (the ones
:func:`~factory.store.layout.build_layout` creates, sharding aside) are written directly;
the others go through zarr exactly as before. Directly written arrays leave the layout's
zarr handles stale; :meth:`Appender.refresh` re-opens them before a read.

Chunk encoding runs in a small thread pool: numcodecs Zstd and Blosc release the GIL.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np
import zarr

from factory.store import chunkfile
from factory.store.chunkfile import DirectArray, Plan, Unsupported
from factory.store.durable import Syncer, zarr_files
from factory.store.layout import Layout

logger = logging.getLogger(__name__)

META, ENDS = "meta/episode_meta", "meta/episode_ends"


def _env_threads() -> int:
    """Encoder threads: ``DEMOFACTORY_STORE_THREADS`` (1 = the calling thread only), else
    min(4, cores). Measured on 2 busy cores, 96 px PushT: 2 threads ~10-30% faster than 1."""
    text = os.environ.get("DEMOFACTORY_STORE_THREADS", "")
    try:
        return max(1, int(text)) if text else min(4, os.cpu_count() or 1)
    except ValueError:
        logger.warning("ignoring DEMOFACTORY_STORE_THREADS=%r: not an integer", text)
        return min(4, os.cpu_count() or 1)


THREADS = _env_threads()
# direct chunk writes on/off (tests compare both paths; off = plain zarr for every array)
DIRECT = os.environ.get("DEMOFACTORY_STORE_DIRECT", "1") != "0"


_told_unverified: list[bool] = []


def _open_direct(where: Path, name: str) -> DirectArray | None:
    if not DIRECT:
        return None
    if not chunkfile.zarr_verified():
        if not _told_unverified:
            _told_unverified.append(True)
            logger.info(
                "zarr %s: direct chunk writes are verified for zarr %s only; appending "
                "through zarr's own (slower) write path",
                zarr.__version__,
                ", ".join(f"{a}.{b}" for a, b in chunkfile.VERIFIED_ZARR),
            )
        return None
    try:
        return DirectArray.open(where / name)
    except Unsupported as err:
        logger.info("%s: %s appends through zarr (%s)", where, name, err)
        return None


class Appender:
    """Writes whole episodes into an opened, recovered, locked layout; ``durable``: every
    append is on disk when it returns (fsync), its commit point last."""

    def __init__(
        self, layout: Layout, where: Path, threads: int | None = None, durable: bool = False
    ) -> None:
        names = [f"data/{k}" for k in layout.data] + [META, ENDS]
        self._direct = {n: d for n in names if (d := _open_direct(where, n)) is not None}
        for direct in self._direct.values():
            direct.fsync = durable
        self._where = where
        self._sync = Syncer() if durable else None
        self._threads = THREADS if threads is None else threads
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._stale: set[str] = set()

    def _handle(self, layout: Layout, name: str) -> zarr.Array:
        if name == META:
            return layout.meta
        if name == ENDS:
            return layout.ends
        return layout.data[name.removeprefix("data/")]

    def append(
        self,
        layout: Layout,
        data: Mapping[str, np.ndarray],
        frames: tuple[int, int],
        n_eps: int,
        meta: str,
    ) -> None:
        """Write episode ``n_eps``: ``data`` (validated) as frames ``[n0, n1)``, ``meta``."""
        n0, n1 = frames
        try:
            plans: list[tuple[DirectArray, Plan]] = []
            for key, arr in layout.data.items():
                direct = self._direct.get(f"data/{key}")
                if direct is None:  # absolute shapes: overwrite a failed earlier append
                    arr.resize((n1, *arr.shape[1:]))
                    arr[n0:n1] = data[key]
                    self._wrote_zarr(arr, n0, n1)
                    continue
                direct.resize(n1)
                plans.append((direct, direct.plan(n0, data[key])))
                self._stale.add(f"data/{key}")
                self._wrote_direct(direct)
            self._run(plans)
            self._put_one(layout, META, n_eps, np.array([meta], dtype=object))
            self._flush()  # data and meta on disk before episode_ends is touched
            self._commit(layout, n_eps, n1)
        except BaseException:
            for direct in self._direct.values():
                direct.forget()
            raise

    def _commit(self, layout: Layout, n_eps: int, n1: int) -> None:
        """Episode ``n_eps`` ends at frame ``n1``: write it to ``episode_ends`` (the commit
        point), durably in a durable store. Data and meta are written (and durable) already."""
        self._put_one(layout, ENDS, n_eps, np.array([n1], dtype=np.int64), commit=True)
        self._flush()

    def _put_one(
        self, layout: Layout, name: str, index: int, value: np.ndarray, commit: bool = False
    ) -> None:
        """Set entry ``index`` of a 1-d array and its length to ``index + 1``: resize first,
        or with ``commit`` (direct only) the value first (durable before) and the resize as
        the last write."""
        direct = self._direct.get(name)
        if direct is None:
            arr = self._handle(layout, name)
            arr.resize((index + 1,))
            arr[index] = value[0]
            self._wrote_zarr(arr, index, index + 1)
            return
        self._stale.add(name)
        self._wrote_direct(direct)
        if not commit:
            direct.resize(index + 1)
        self._run([(direct, direct.plan(index, value))])
        if commit:
            self._flush()  # the entry on disk before the length that shows it
            self._wrote_direct(direct)
            direct.resize(index + 1)

    def _wrote_direct(self, direct: DirectArray) -> None:
        if self._sync is not None:
            self._sync.synced_in(direct.directory)

    def _wrote_zarr(self, arr: zarr.Array, n0: int, n1: int) -> None:
        if self._sync is not None:
            self._sync.written(zarr_files(arr, self._where, n0, n1), self._where / arr.path)

    def _flush(self) -> None:
        if self._sync is not None:
            self._sync.flush()

    def _run(self, plans: list[tuple[DirectArray, Plan]]) -> None:
        """Store every chunk of ``plans`` (in the pool when there are several)."""
        jobs = [(d, idx, chunk) for d, p in plans for idx, chunk in p.chunks]
        if len(jobs) > 1 and self._threads > 1:
            futures = [self._executor().submit(d.store, idx, chunk) for d, idx, chunk in jobs]
            try:
                for fut in futures:
                    fut.result()
            finally:  # no chunk write may outlive this append, even a failed one
                wait(futures)
        else:
            for d, idx, chunk in jobs:
                d.store(idx, chunk)
        for d, p in plans:
            d.stored(p)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None or self._pool_pid != os.getpid():  # a forked child has no threads
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="store-encode")
            self._pool_pid = os.getpid()
        return self._pool

    def refresh(self, layout: Layout) -> None:
        """Re-open the zarr handles of arrays written directly since the last refresh."""
        for name in sorted(self._stale):
            node = layout.group[name]
            assert isinstance(node, zarr.Array)
            if name == META:
                layout.meta = node
            elif name == ENDS:
                layout.ends = node
            else:
                layout.data[name.removeprefix("data/")] = node
        self._stale.clear()

    def close(self) -> None:
        """Stop the encoder threads (idempotent)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
