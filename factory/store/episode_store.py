"""Crash-safe Zarr v3 episode store (diffusion_policy ReplayBuffer layout, typed).

See :mod:`factory.store.layout` for the on-disk layout and the crash model. One process
writes a store at a time (:mod:`factory.store.lock`); any number may read it, and readers
see the episodes committed when they opened it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import numpy as np

from factory.errors import SchemaMismatchError, StoreError
from factory.store import durable as dur
from factory.store import renames
from factory.store.appender import Appender
from factory.store.episode import Episode
from factory.store.layout import (
    RESERVED_ATTRS,
    Layout,
    build_layout,
    make_root_attrs,
    open_layout,
    recover,
)
from factory.store.lock import StoreLock
from factory.store.schema import EpisodeMeta, StoreSchema, json_equal, to_json_text
from factory.store.windows import episode_windows, read_rows

logger = logging.getLogger(__name__)


class EpisodeStore:
    """A directory of episodes: ``data/<key>`` arrays of shape ``(N, ...)`` plus per-episode
    ``meta/episode_ends`` (E,) and JSON metadata. Build one with :meth:`create` or
    :meth:`open`, never directly.
    """

    def __init__(
        self, path: Path, layout: Layout, ends: np.ndarray, lock: StoreLock | None
    ) -> None:
        self._path = path
        self._layout: Layout | None = layout
        self._ends = np.asarray(ends, dtype=np.int64)
        self._lock = lock
        self._appender: Appender | None = None  # created by the first append

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(
        cls,
        path: str | Path,
        schema: StoreSchema,
        *,
        fps: float,
        action_meaning: str,
        attrs: Mapping[str, Any] | None = None,
        chunk_frames: int = 16,
        compression: str = "zstd",
        shard_frames: int | None = None,
        durable: bool = False,
    ) -> EpisodeStore:
        """Create an empty store at ``path`` and open it for writing (holding the lock).

        Image keys are chunked ``(chunk_frames, *shape)``; keys with small frames (actions,
        states) get ``chunk_frames * 2**k`` frames per chunk, at least 64 KiB.
        ``compression`` is one of ``"zstd"``, ``"blosc-zstd"``, ``"lz4"``, ``"none"``.
        ``shard_frames`` (a multiple of ``chunk_frames``) groups chunks into shard files.
        ``durable`` (root attr ``durable``): every append, by any writer, fsyncs its commit
        so that it survives a power cut (:mod:`factory.store.durable`).
        """
        path = Path(path)
        if path.exists():
            raise StoreError(
                f"{path} already exists; use --append to add episodes to it, or choose a new path"
            )
        root_attrs = make_root_attrs(
            schema, fps, action_meaning, attrs, chunk_frames, compression, shard_frames
        )
        if durable:
            root_attrs[dur.ATTR] = True
        created = dur.missing_ancestors(path) if durable else None
        path.parent.mkdir(parents=True, exist_ok=True)
        layout_args = dict(
            root_attrs=root_attrs,
            chunk_frames=chunk_frames,
            compression=compression,
            shard_frames=shard_frames,
        )
        lock = _publish_new(path, schema, layout_args, created)
        logger.info("created episode store %s (keys %s)", path, list(schema.keys))
        layout = open_layout(path, writable=True)
        return cls(path, layout, np.zeros(0, dtype=np.int64), lock)

    @classmethod
    def open(cls, path: str | Path, mode: Literal["r", "a"] = "r") -> EpisodeStore:
        """Open an existing store.

        ``"r"``: read-only snapshot of the episodes committed at open time; never modifies
        the store (uncommitted tails left by a crash are simply not shown). ``"a"``: take
        the writer lock (:class:`StoreLockedError` if held), repair any interrupted append
        (truncate data and meta to ``episode_ends``, delete temp files), then allow appends.
        A store with old key names (``gt_state``) is renamed in place first
        (:mod:`factory.store.renames`); read-only, it reads as if it had been.
        """
        path = Path(path)
        if mode not in ("r", "a"):
            raise StoreError(f"store mode must be 'r' or 'a', got {mode!r}")
        layout = open_layout(path, writable=False)  # validates before creating .lock
        if mode == "r":
            ends = layout.committed(path)
            if len(ends) < len(layout.raw_ends):
                logger.info("%s: ignoring an uncommitted episode_ends entry", path)
            return cls(path, layout, ends, None)
        lock = StoreLock.acquire(path)
        try:
            renames.migrate(path, durable=bool(layout.attrs.get(dur.ATTR)))  # old key names
            layout = open_layout(path, writable=True)  # re-read under the lock
            ends, _report = recover(layout, path)
        except BaseException:
            lock.release()
            raise
        return cls(path, layout, ends, lock)

    # ------------------------------------------------------------------ properties
    @property
    def _lay(self) -> Layout:
        if self._layout is None:
            raise StoreError(f"{self._path} is closed; open it again with EpisodeStore.open")
        return self._layout

    @property
    def path(self) -> Path:
        return self._path

    @property
    def writable(self) -> bool:
        return self._lock is not None and self._lock.held

    @property
    def schema(self) -> StoreSchema:
        return self._lay.schema

    @property
    def fps(self) -> float:
        return float(self._lay.attrs["fps"])

    @property
    def action_meaning(self) -> str:
        return str(self._lay.attrs.get("action_meaning", ""))

    @property
    def compression(self) -> str:
        return str(self._lay.attrs.get("compression", "zstd"))

    @property
    def chunk_frames(self) -> int:
        return int(self._lay.attrs.get("chunk_frames", 16))

    @property
    def durable(self) -> bool:
        """Whether appends fsync their commit (root attr ``durable``; absent: False)."""
        return self._lay.attrs.get(dur.ATTR) is True

    @property
    def attrs(self) -> dict[str, Any]:
        """The free (non-reserved) store attributes, e.g. env name and resolution."""
        return {k: v for k, v in self._lay.attrs.items() if k not in RESERVED_ATTRS}

    @property
    def n_episodes(self) -> int:
        return len(self._ends)

    @property
    def n_frames(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    @property
    def episode_ends(self) -> np.ndarray:
        """(E,) int64 cumulative exclusive episode ends (a copy)."""
        return self._ends.copy()

    @property
    def episode_lengths(self) -> np.ndarray:
        """(E,) int64 frames per episode."""
        return np.diff(self._ends, prepend=0)

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return self.n_episodes

    def __iter__(self) -> Iterator[Episode]:
        for i in range(self.n_episodes):
            yield self.episode(i)

    def _index(self, i: int) -> int:
        n = self.n_episodes
        if not isinstance(i, (int, np.integer)) or not -n <= i < n:
            raise IndexError(f"episode {i} out of range for a store with {n} episodes")
        return int(i) % n

    def episode(self, i: int) -> Episode:
        """Lazy view of episode ``i`` (negative counts from the end)."""
        i = self._index(i)
        start = int(self._ends[i - 1]) if i else 0
        return Episode(self, i, start, int(self._ends[i]))

    def _fresh(self) -> Layout:
        """The layout, with the handles of directly appended arrays re-opened."""
        lay = self._lay
        if self._appender is not None:
            self._appender.refresh(lay)
        return lay

    def _array(self, key: str) -> Any:
        try:
            return self._fresh().data[key]
        except KeyError:
            raise StoreError(
                f"{self._path} has no data key {key!r}; its keys are {list(self.schema.keys)}"
            ) from None

    def _read_slice(self, key: str, start: int, stop: int) -> np.ndarray:
        return np.asarray(self._array(key)[start:stop])

    def episode_meta(self, i: int) -> EpisodeMeta:
        i = self._index(i)
        return EpisodeMeta.from_json(json.loads(str(self._fresh().meta[i])))

    def all_meta(self) -> list[EpisodeMeta]:
        """Metadata of every episode, in order (one read of the meta array)."""
        if not self.n_episodes:
            return []
        raw = np.asarray(self._fresh().meta[: self.n_episodes])
        return [EpisodeMeta.from_json(json.loads(str(s))) for s in raw]

    def load(self, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Whole data arrays in RAM: ``{key: (N, *shape)}`` for all (or the given) keys."""
        keys = list(self.schema.keys) if keys is None else list(keys)
        return {k: self._read_slice(k, 0, self.n_frames) for k in keys}

    def sample_windows(
        self,
        batch_size: int,
        length: int,
        rng: np.random.Generator,
        keys: Sequence[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Random windows ``{key: (batch_size, length, *shape)}`` within single episodes.

        Every window of ``length`` consecutive frames that lies inside one episode is equally
        likely (so longer episodes give more windows); episodes shorter than ``length`` are
        skipped. Raises :class:`StoreError` when no episode is long enough.
        """
        if batch_size < 1 or length < 1:
            raise StoreError(f"batch_size and length must be >= 1, got {batch_size}, {length}")
        starts = episode_windows(self._ends, length, batch_size, rng)
        if starts is None:
            longest = int(self.episode_lengths.max()) if self.n_episodes else 0
            raise StoreError(
                f"{self._path}: no episode has {length} frames (longest {longest}); "
                "use a shorter window or collect longer episodes"
            )
        keys = list(self.schema.keys) if keys is None else list(keys)
        return {k: read_rows(self._array(k), starts, length) for k in keys}

    # ------------------------------------------------------------------ writing
    def append_episode(self, data: Mapping[str, np.ndarray], meta: EpisodeMeta) -> int:
        """Append one whole episode ``{key: (T, *shape)}``; returns its index.

        Validated against the schema first (nothing is written if it does not fit). Writes
        the data arrays, then the meta entry, then ``episode_ends`` (the commit point).
        """
        lay = self._lay
        if not self.writable:
            raise StoreError(
                f"{self._path} is open read-only; open it with mode='a' to append episodes"
            )
        length = self.schema.check_episode(data)
        if not isinstance(meta, EpisodeMeta):
            raise SchemaMismatchError(f"meta must be an EpisodeMeta, got {type(meta).__name__}")
        meta_text = to_json_text(meta.to_json())
        n_eps, n0 = self.n_episodes, self.n_frames
        n1 = n0 + length
        if self._appender is None:
            self._appender = Appender(lay, self._path, durable=self.durable)
        self._appender.append(lay, data, (n0, n1), n_eps, meta_text)
        self._ends = np.append(self._ends, np.int64(n1))
        logger.debug("%s: appended episode %d (%d frames)", self._path, n_eps, length)
        return n_eps

    def make_durable(self) -> None:
        """Mark an opened-for-append store durable, as ``create(durable=True)`` does: from
        the next append on, this writer and every later one fsyncs each commit."""
        lay = self._lay
        if not self.writable:
            raise StoreError(f"{self._path} is open read-only; open it with mode='a' first")
        if self.durable:
            return
        dur.mark_durable(lay.group, self._path)
        lay.attrs[dur.ATTR] = True
        if self._appender is not None:  # the next append makes a durable one
            self._appender.refresh(lay)
            self._appender.close()
            self._appender = None

    def check_compatible(self, schema: StoreSchema, attrs_subset: Mapping[str, Any]) -> None:
        """Raise :class:`SchemaMismatchError` unless ``schema`` and every item of
        ``attrs_subset`` (free attrs such as ``resolution``, or ``fps``/``action_meaning``)
        match this store. Used before appending new episodes to an existing store.
        """
        diff = self.schema.describe_difference(schema)
        if diff:
            raise SchemaMismatchError(
                f"{self._path} has a different schema ({diff}); write to a new store instead"
            )
        have: dict[str, Any] = {**self.attrs, "fps": self.fps}
        have["action_meaning"] = self.action_meaning
        for key, want in attrs_subset.items():
            if key not in have:
                raise SchemaMismatchError(
                    f"{self._path} has no attr {key!r} (wanted {want!r}); "
                    "write to a new store instead"
                )
            if not json_equal(have[key], want):
                raise SchemaMismatchError(
                    f"{self._path} has {key}={have[key]!r} but {want!r} was asked for; "
                    "write to a new store instead"
                )

    # ------------------------------------------------------------------ summary, close
    def summary(self) -> dict[str, Any]:
        """Counts and shapes, JSON-serialisable (see README for the fields)."""
        metas = self.all_meta()
        lengths = self.episode_lengths
        sources: dict[str, int] = {}
        generators: dict[str, int] = {}
        for m in metas:
            sources[m.source] = sources.get(m.source, 0) + 1
            generators[m.generator] = generators.get(m.generator, 0) + 1
        return {
            "path": str(self._path),
            "episodes": self.n_episodes,
            "frames": self.n_frames,
            "fps": self.fps,
            "keys": {
                k: {"shape": [self.n_frames, *s.shape], "dtype": s.dtype}
                for k, s in self.schema.keys.items()
            },
            "sources": sources,
            "generators": generators,
            "length": {
                "min": int(lengths.min()) if len(lengths) else 0,
                "max": int(lengths.max()) if len(lengths) else 0,
                "mean": float(lengths.mean()) if len(lengths) else 0.0,
            },
            "successes": sum(1 for m in metas if m.success is True),
            "action_meaning": self.action_meaning,
            "attrs": self.attrs,
        }

    def close(self) -> None:
        """Release the writer lock (if held) and the zarr handles. Idempotent."""
        if self._appender is not None:
            self._appender.close()
            self._appender = None
        if self._lock is not None:
            self._lock.release()
        self._layout = None

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "a" if self.writable else "r"
        return (
            f"EpisodeStore({str(self._path)!r}, mode={mode!r}, episodes={self.n_episodes}, "
            f"frames={self.n_frames})"
        )


def _publish_new(
    path: Path, schema: StoreSchema, layout_args: dict[str, Any], created: list[Path] | None
) -> StoreLock:
    """Build an empty store beside ``path`` and rename it into place, locked; its lock.

    ``created`` (durable stores): the directories made for it, fsynced after the rename."""
    tmp = path.parent / f".{path.name}.creating-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    lock: StoreLock | None = None
    try:
        build_layout(tmp, schema, **layout_args)
        lock = StoreLock.acquire(tmp, display=path)
        dur.publish(tmp, path, created)  # a complete, empty store in one rename
    except OSError as err:
        if lock is not None:
            lock.release()
        raise StoreError(
            f"{path} already exists or cannot be created ({err.strerror}); "
            "choose a new path or use --append"
        ) from err
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    lock.store_dir = path
    return lock
