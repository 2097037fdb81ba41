"""On-disk layout of an episode store, and the zarr-level helpers that build, open and
repair it.

::

    STORE/                      zarr v3 group; attrs: format, format_version, fps, schema,
                                action_meaning, compression, chunk_frames, [durable],
                                free attrs
      data/<key>   (N, *shape)  one array per schema key, chunked along time
      meta/episode_ends (E,)    int64, cumulative exclusive ends: THE commit point
      meta/episode_meta (E,)    variable-length UTF-8 strings, one JSON document per episode
      .lock                     writer lock (see lock.py)

Crash model (zarr 3.4.2, LocalStore, and the direct chunk writer of
:mod:`factory.store.chunkfile`, which writes the same files): every key (chunk file or
``zarr.json``) is written to ``<key-stem>.<uuid hex>.partial`` and then renamed, so a single
key is either old or new, but nothing is atomic across keys. An append therefore writes the
data arrays first, then the episode's meta, then ``episode_ends`` last (see
:mod:`factory.store.appender`). After a crash the data arrays and the meta array can be
longer than ``episode_ends`` says, and ``episode_ends`` itself can end in one unwritten slot
(resized, value not yet written: it reads as the fill value 0). The committed state is the
longest valid prefix of ``episode_ends``.

That holds for a killed process. Zarr never fsyncs, so after a power cut or an OS crash it
holds only for a store with the ``durable`` attr (:mod:`factory.store.durable`), whose
appends fsync data and meta before ``episode_ends`` and ``episode_ends`` before returning.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import zarr
from zarr.codecs import BloscCodec, ZstdCodec

from factory.errors import StoreError
from factory.store import renames
from factory.store.schema import StoreSchema, to_json_text

logger = logging.getLogger(__name__)

FORMAT = "demofactory.episode_store"
FORMAT_VERSION = 1
# "durable": set by create(durable=True), see factory.store.durable
RESERVED_ATTRS = frozenset(
    {"format", "format_version", "fps", "schema", "action_meaning", "compression"}
    | {"chunk_frames", "durable"}
)
COMPRESSIONS = ("zstd", "blosc-zstd", "lz4", "none")
ENDS_CHUNK = 1024
MIN_CHUNK_BYTES = 64 * 1024
MAX_CHUNK_FRAMES = 1 << 16
META_CHUNK = 64
# LocalStore (and chunkfile.write_atomic) temp files: Path.with_suffix(f".{uuid4().hex}.partial")
PARTIAL_RE = re.compile(r"\.[0-9a-f]{32}\.partial$")
# flat chunk keys ("c.0.0.0.0"): one directory per array instead of one per chunk; measured
# ~1.5x faster appends on ext4 than nested "c/0/0/0/0" (a mkdir chain per chunk write)
CHUNK_KEY_ENCODING: dict[str, Any] = {"name": "default", "separator": "."}


def time_chunk(chunk_frames: int, frame_bytes: int) -> int:
    """Frames per chunk for a key whose frames are ``frame_bytes`` bytes.

    ``chunk_frames`` (default 16) for images; keys with small frames (actions, states) get
    ``chunk_frames * 2**k`` frames, the smallest such chunk of at least MIN_CHUNK_BYTES, so
    that a 2-float action does not cost one 128-byte file per 16 frames (zarr's per-chunk
    overhead, about 1 ms, would dominate every append).
    """
    t = chunk_frames
    while t * frame_bytes < MIN_CHUNK_BYTES and t < MAX_CHUNK_FRAMES:
        t *= 2
    return t


def compressors_for(compression: str, dtype: np.dtype[Any]) -> tuple[Any, ...]:
    """The zarr v3 compressor chain for one array.

    ``"zstd"``: plain Zstd level 3 for 1-byte dtypes (images), Blosc-zstd clevel 3 with byte
    shuffle for wider dtypes. ``"blosc-zstd"``: Blosc-zstd clevel 3 everywhere. ``"lz4"``:
    Blosc-lz4 (fastest, ~half the ratio). ``"none"``: stored raw.
    """
    shuffle: Literal["noshuffle", "shuffle"] = "noshuffle" if dtype.itemsize == 1 else "shuffle"
    if compression == "none":
        return ()
    if compression == "zstd":
        if dtype.itemsize == 1:
            return (ZstdCodec(level=3),)
        return (BloscCodec(cname="zstd", clevel=3, shuffle=shuffle),)
    if compression == "blosc-zstd":
        return (BloscCodec(cname="zstd", clevel=3, shuffle=shuffle),)
    if compression == "lz4":
        return (BloscCodec(cname="lz4", clevel=5, shuffle=shuffle),)
    raise StoreError(f"unknown compression {compression!r}; use one of {', '.join(COMPRESSIONS)}")


def check_free_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Validate user attrs: no reserved names, JSON-serialisable. Returns a plain dict."""
    clash = sorted(set(attrs) & RESERVED_ATTRS)
    if clash:
        raise StoreError(
            f"store attrs {clash} are reserved; pass fps/action_meaning/schema as arguments "
            "and rename the others"
        )
    try:
        out: dict[str, Any] = json.loads(to_json_text(dict(attrs)))
    except (TypeError, ValueError) as err:
        raise StoreError(f"store attrs must be JSON-serialisable: {err}") from err
    return out


def make_root_attrs(
    schema: StoreSchema,
    fps: float,
    action_meaning: str,
    attrs: Mapping[str, Any] | None,
    chunk_frames: int,
    compression: str,
    shard_frames: int | None,
) -> dict[str, Any]:
    """Validate the create() arguments; the root group attrs of a new store."""
    if not isinstance(schema, StoreSchema):
        raise StoreError(f"schema must be a StoreSchema, got {type(schema).__name__}")
    if not (float(fps) > 0):
        raise StoreError(f"fps must be > 0, got {fps}")
    if int(chunk_frames) < 1:
        raise StoreError(f"chunk_frames must be >= 1, got {chunk_frames}")
    if compression not in COMPRESSIONS:
        raise StoreError(
            f"unknown compression {compression!r}; use one of {', '.join(COMPRESSIONS)}"
        )
    if shard_frames is not None and (shard_frames < 1 or shard_frames % chunk_frames):
        raise StoreError(
            f"shard_frames {shard_frames} must be a positive multiple of "
            f"chunk_frames {chunk_frames}"
        )
    free = check_free_attrs(attrs or {})
    return {
        **free,
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "fps": float(fps),
        "schema": schema.to_json(),
        "action_meaning": str(action_meaning),
        "compression": compression,
        "chunk_frames": int(chunk_frames),
    }


def build_layout(
    path: Path,
    schema: StoreSchema,
    *,
    root_attrs: dict[str, Any],
    chunk_frames: int,
    compression: str,
    shard_frames: int | None,
) -> None:
    """Create an empty store at ``path`` (which must not exist yet)."""
    group = zarr.open_group(path, mode="w-", zarr_format=3)
    data = group.create_group("data")
    for key, spec in schema.keys.items():
        dtype = np.dtype(spec.dtype)
        chunk_t = time_chunk(chunk_frames, dtype.itemsize * int(np.prod(spec.shape)))
        shards = None
        if shard_frames is not None:
            shards = (-(-max(shard_frames, chunk_t) // chunk_t) * chunk_t, *spec.shape)
        data.create_array(
            key,
            shape=(0, *spec.shape),
            chunks=(chunk_t, *spec.shape),
            shards=shards,
            dtype=dtype,
            compressors=compressors_for(compression, dtype),
            fill_value=0,
            chunk_key_encoding=CHUNK_KEY_ENCODING,
        )
    meta = group.create_group("meta")
    meta.create_array(
        "episode_ends",
        shape=(0,),
        chunks=(ENDS_CHUNK,),
        dtype="int64",
        fill_value=0,
        compressors=(ZstdCodec(level=3),),
        chunk_key_encoding=CHUNK_KEY_ENCODING,
    )
    meta.create_array(
        "episode_meta",
        shape=(0,),
        chunks=(META_CHUNK,),
        dtype=str,
        compressors=(ZstdCodec(level=3),),
        chunk_key_encoding=CHUNK_KEY_ENCODING,
    )
    # the format attribute goes last: a group without it is never taken for a store
    group.attrs.update(root_attrs)


@dataclass
class Layout:
    """The opened zarr nodes of a store."""

    group: zarr.Group
    attrs: dict[str, Any]
    schema: StoreSchema
    data: dict[str, zarr.Array]
    ends: zarr.Array
    meta: zarr.Array
    raw_ends: np.ndarray  # (E_raw,) int64 as read at open, before validation

    @property
    def data_frames(self) -> int:
        """Length of the shortest data array."""
        return min(int(a.shape[0]) for a in self.data.values())

    def committed(self, where: Path) -> np.ndarray:
        """The committed ``episode_ends`` (E,) of this snapshot, without modifying it."""
        n = committed_prefix(self.raw_ends, self.data_frames, int(self.meta.shape[0]), where)
        return self.raw_ends[:n]


def _node(group: zarr.Group, name: str, where: Path) -> zarr.Array:
    try:
        node = group[name]
    except KeyError:
        node = None
    if not isinstance(node, zarr.Array):
        raise StoreError(
            f"{where} is a damaged episode store: array {name!r} is missing; "
            "restore it from a backup or recreate the store"
        )
    return node


def open_layout(path: Path, *, writable: bool) -> Layout:
    """Open and validate the zarr nodes of the store at ``path``."""
    if not path.exists():
        raise StoreError(f"{path} does not exist; check the path or create the store first")
    if not path.is_dir():
        raise StoreError(f"{path} is a file, not an episode store directory")
    try:
        group = zarr.open_group(path, mode="r+" if writable else "r", use_consolidated=False)
    except (zarr.errors.NodeNotFoundError, FileNotFoundError) as err:
        raise StoreError(
            f"{path} is not a zarr store (no zarr.json group); point at an episode store"
        ) from err
    except (ValueError, TypeError, KeyError) as err:  # unreadable or malformed metadata
        raise StoreError(
            f"{path} is a corrupt zarr store ({type(err).__name__}: {err}); "
            "restore it from a backup or recreate it"
        ) from err
    attrs = dict(group.attrs)
    fmt = attrs.get("format")
    if fmt != FORMAT:
        raise StoreError(
            f"{path} is a zarr group but not a demofactory episode store (format={fmt!r}); "
            "point at a store written by demofactory"
        )
    version = attrs.get("format_version")
    if version != FORMAT_VERSION:
        raise StoreError(
            f"{path} has episode store format_version {version!r}, this demofactory reads "
            f"version {FORMAT_VERSION}; use a matching demofactory version"
        )
    fps = attrs.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise StoreError(f"{path} is a damaged episode store: its fps attr is {fps!r}")
    schema_json = attrs.get("schema")
    if not isinstance(schema_json, Mapping):
        raise StoreError(f"{path} is a damaged episode store: its schema attr is {schema_json!r}")
    schema_json, attrs, on_disk = renames.current_view(schema_json, attrs, path)
    schema = StoreSchema.from_json(schema_json)
    # episode_ends first: it is written last, so every array opened after it is at least as
    # long as the ends read here say, even while a writer is appending
    ends = _node(group, "meta/episode_ends", path)
    raw_ends = np.asarray(ends[:], dtype=np.int64)
    meta = _node(group, "meta/episode_meta", path)
    data = {k: _node(group, f"data/{on_disk.get(k, k)}", path) for k in schema.keys}
    for k, arr in data.items():
        spec = schema.keys[k]
        if tuple(arr.shape[1:]) != spec.shape or arr.dtype != np.dtype(spec.dtype):
            raise StoreError(
                f"{path} is a damaged episode store: data/{k} is {arr.shape} {arr.dtype} but "
                f"the schema says (N, *{spec.shape}) {spec.dtype}"
            )
    return Layout(
        group=group, attrs=attrs, schema=schema, data=data, ends=ends, meta=meta, raw_ends=raw_ends
    )


def committed_prefix(ends: np.ndarray, data_frames: int, meta_entries: int, where: Path) -> int:
    """Number of committed episodes given the raw ``episode_ends`` (E_raw,) array.

    ``data_frames`` is the shortest data array length and ``meta_entries`` the meta array
    length. Only the LAST entry may be invalid (a crash between resizing ``episode_ends``
    and writing the value); anything wrong earlier means the store is damaged.
    """
    n = len(ends)
    if n == 0:
        return 0
    prev = np.concatenate([[0], ends[:-1]])
    ok = (ends > prev) & (ends <= data_frames) & (np.arange(n) < meta_entries)
    if ok.all():
        return n
    first_bad = int(np.argmin(ok))
    if first_bad < n - 1:
        raise StoreError(
            f"{where} is a damaged episode store: meta/episode_ends is invalid at entry "
            f"{first_bad} of {n} (value {int(ends[first_bad])}, {data_frames} data frames, "
            f"{meta_entries} meta entries); restore it from a backup"
        )
    return n - 1


def remove_partial_files(path: Path) -> list[Path]:
    """Delete leftover ``*.<uuid>.partial`` temp files (zarr's, the direct writer's)."""
    removed = []
    for root, _dirs, files in os.walk(path):
        for name in files:
            if PARTIAL_RE.search(name):
                p = Path(root) / name
                try:
                    p.unlink()
                except FileNotFoundError:
                    continue
                removed.append(p)
    return removed


def recover(layout: Layout, where: Path) -> tuple[np.ndarray, dict[str, int]]:
    """Repair a store after a crash; the caller holds the writer lock.

    Deletes temp files, drops an unwritten last ``episode_ends`` slot, truncates the meta
    array to E entries and every data array to ``episode_ends[-1]`` frames. Returns the
    committed ``episode_ends`` (E,) and a count of what was repaired.
    """
    removed = remove_partial_files(where)
    raw_ends = layout.raw_ends
    ends = layout.committed(where)
    n_eps = len(ends)
    n_frames = int(ends[-1]) if n_eps else 0
    report = {"partial_files": len(removed), "ends_dropped": len(raw_ends) - n_eps}
    if len(raw_ends) > n_eps:
        layout.ends.resize((n_eps,))
    report["meta_dropped"] = int(layout.meta.shape[0]) - n_eps
    if layout.meta.shape[0] > n_eps:
        layout.meta.resize((n_eps,))
    report["frames_dropped"] = 0
    for arr in layout.data.values():
        extra = int(arr.shape[0]) - n_frames
        if extra > 0:
            arr.resize((n_frames, *arr.shape[1:]))
            report["frames_dropped"] = max(report["frames_dropped"], extra)
    if any(report.values()):
        logger.warning(
            "recovered %s after an interrupted write: removed %d temp files, dropped %d "
            "uncommitted frames and %d meta entries; %d committed episodes kept",
            where,
            report["partial_files"],
            report["frames_dropped"],
            report["meta_dropped"],
            n_eps,
        )
    return ends, report
