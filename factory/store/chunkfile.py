"""Direct chunk-file writes for one zarr v3 array: the files zarr itself would write.

Zarr 3.4.2 spends most of an append in its own write pipeline (an event loop round trip,
per-chunk tasks and buffer copies), not in the codec: ~2-3k PushT frames/s even with
compression "none". :class:`DirectArray` writes an append's chunks itself. It reads the
array's ``zarr.json`` and reproduces its codec chain with the numcodecs objects zarr uses
(``bytes`` or ``vlen-utf8``, then any ``zstd``/``blosc``), so each chunk file holds the same
bytes zarr would store and the store stays a plain zarr v3 store. Any other layout
(sharding, transposes, checksums, custom grids) raises :class:`Unsupported`; the caller then
appends through zarr. So does a zarr release that tests/test_store_direct.py has not
compared byte for byte (:data:`VERIFIED_ZARR`): zarr's own write path is always correct.

Each chunk is encoded whole (C order, padded with the fill value past the data), written to
``<key stem>.<32 hex>.partial`` (zarr's own temp pattern, which recovery deletes) and
renamed over the key, so a chunk file is always either the old or the new one. Like zarr
(``write_empty_chunks=False``) a chunk that is all fill value is deleted instead of written.
With :attr:`DirectArray.fsync` (a durable store) each file is fsynced before its rename;
the directory is the caller's to fsync (:mod:`factory.store.durable`).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from numcodecs.abc import Codec
from numcodecs.blosc import Blosc
from numcodecs.vlen import VLenUTF8
from numcodecs.zstd import Zstd

logger = logging.getLogger(__name__)

ZARR_JSON = "zarr.json"
_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
_VLEN_UTF8 = VLenUTF8()
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC


VERIFIED_ZARR = ((3, 4),)
"""(major, minor) zarr releases whose chunk files the byte-identity test has compared."""


class Unsupported(Exception):
    """The array uses a layout :class:`DirectArray` does not reproduce; append via zarr."""


def zarr_verified(version: str | None = None) -> bool:
    """Whether zarr ``version`` (default: the installed one) is in :data:`VERIFIED_ZARR`."""
    parts = (version or zarr.__version__).split(".")
    try:
        release = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return False
    return release in VERIFIED_ZARR


def _load_renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # glibc < 2.28, musl
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _load_renameat2()
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def replace(tmp: Path, path: Path) -> None:
    """``os.replace(tmp, path)``, done as a RENAME_EXCHANGE and an unlink where possible.

    Readers see the same thing either way (``path`` is always the old or the new file), but
    ext4 (``auto_da_alloc``) starts writeback of the new file on every rename over an
    existing one: measured 0.5-3 ms per replace here, ~0.05 ms for exchange + unlink. Every
    append replaces ~10 files (each array's ``zarr.json`` and partial last chunk). A kill
    between the two leaves the old file under the ``.partial`` name, which recovery deletes.
    """
    if _RENAMEAT2 is not None:
        src, dst = os.fsencode(tmp), os.fsencode(path)
        if _RENAMEAT2(_AT_FDCWD, src, _AT_FDCWD, dst, _RENAME_EXCHANGE) == 0:
            os.unlink(tmp)  # the old file now
            return
    os.replace(tmp, path)  # a new key (ENOENT), or no exchange on this file system


def write_atomic(path: Path, payload: Any, fsync: bool = False) -> None:
    """Write ``payload`` (any contiguous buffer) to ``path`` via a zarr-style temp file;
    with ``fsync`` the temp file is on disk before the rename (the directory is not)."""
    tmp = path.with_suffix(f".{uuid.uuid4().hex}.partial")
    view = memoryview(payload).cast("B")
    try:
        fd = os.open(tmp, _OPEN_FLAGS, 0o666)
        try:
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _compressor(spec: Mapping[str, Any]) -> Codec:
    """The numcodecs object zarr builds for one bytes-to-bytes codec of ``zarr.json``."""
    name, conf = spec.get("name"), spec.get("configuration") or {}
    try:
        if name == "zstd":
            return Zstd.from_config(
                {"level": int(conf["level"]), "checksum": bool(conf.get("checksum", False))}
            )
        if name == "blosc":
            return Blosc.from_config(
                {
                    "cname": str(conf["cname"]),
                    "clevel": int(conf["clevel"]),
                    "shuffle": _SHUFFLE[conf["shuffle"]],
                    "blocksize": int(conf["blocksize"]),
                    "typesize": int(conf["typesize"]),
                }
            )
    except (KeyError, TypeError, ValueError) as err:
        raise Unsupported(f"codec {spec!r} ({err})") from err
    raise Unsupported(f"codec {name!r}")


@dataclass(frozen=True)
class ChunkCodec:
    """Encode/decode a whole chunk: array -> bytes (or vlen-utf8) -> compressors."""

    dtype: np.dtype[Any] | None  # on-disk dtype (with byte order); None: vlen-utf8 strings
    compressors: tuple[Codec, ...]

    @classmethod
    def from_json(cls, data_type: Any, codecs: Sequence[Mapping[str, Any]]) -> ChunkCodec:
        if not codecs:
            raise Unsupported("no codecs")
        first, rest = codecs[0], codecs[1:]
        conf = first.get("configuration") or {}
        if first.get("name") == "vlen-utf8" and data_type == "string":
            dtype = None
        elif first.get("name") == "bytes" and isinstance(data_type, str):
            try:
                base = np.dtype(data_type)
            except TypeError as err:
                raise Unsupported(f"data type {data_type!r}") from err
            if base.kind not in "biuf":
                raise Unsupported(f"data type {data_type!r}")
            endian = conf.get("endian", "little")
            if endian not in ("little", "big"):
                raise Unsupported(f"endian {endian!r}")
            dtype = base.newbyteorder("<" if endian == "little" else ">")
        else:
            raise Unsupported(f"codec {first.get('name')!r} for data type {data_type!r}")
        return cls(dtype, tuple(_compressor(c) for c in rest))

    def encode(self, chunk: np.ndarray) -> Any:
        """The stored bytes of ``chunk`` (a full chunk)."""
        buf: Any
        if self.dtype is None:
            buf = _VLEN_UTF8.encode(np.ascontiguousarray(chunk, dtype=object))
        else:
            # the flat uint8 buffer zarr's bytes codec hands on: the compressors (Blosc's
            # typesize!) see exactly what they see under zarr
            buf = np.ascontiguousarray(chunk, dtype=self.dtype).reshape(-1).view(np.uint8)
        for codec in self.compressors:
            buf = codec.encode(buf)
        return buf

    def decode(self, raw: bytes, shape: tuple[int, ...]) -> np.ndarray:
        """A writable chunk array of ``shape`` from its stored bytes."""
        buf: Any = raw
        for codec in reversed(self.compressors):
            buf = codec.decode(buf)
        if self.dtype is None:
            return np.asarray(_VLEN_UTF8.decode(buf), dtype=object).reshape(shape)
        return np.frombuffer(buf, dtype=self.dtype).reshape(shape).copy()


@dataclass
class Plan:
    """The full chunks (chunk index, array) an append writes, in order."""

    chunks: list[tuple[int, np.ndarray]] = field(default_factory=list)
    tail: tuple[int, np.ndarray] | None = None  # last chunk if partial: the next append's base


def _parse_fill(doc: Mapping[str, Any], dtype: np.dtype[Any] | None) -> Any:
    fill = doc.get("fill_value")
    if dtype is None:
        if fill != "":
            raise Unsupported(f"string fill value {fill!r}")
        return ""
    if isinstance(fill, bool) or (isinstance(fill, (int, float)) and dtype.kind != "b"):
        return np.array(fill, dtype=dtype)
    raise Unsupported(f"fill value {fill!r}")


class DirectArray:
    """Chunk-file writer for one zarr v3 array chunked along axis 0 only.

    Not thread-safe, except :meth:`store` (one call per chunk index at a time). Keeps the
    last, partial chunk it wrote in memory, so the next append does not read it back.
    """

    def __init__(self, directory: Path, doc: dict[str, Any]) -> None:
        shape, grid = doc.get("shape"), doc.get("chunk_grid") or {}
        chunks = (grid.get("configuration") or {}).get("chunk_shape")
        key_enc = doc.get("chunk_key_encoding") or {}
        sep = (key_enc.get("configuration") or {}).get("separator", "/")
        if doc.get("zarr_format") != 3 or doc.get("node_type") != "array":
            raise Unsupported("not a zarr v3 array")
        if grid.get("name") != "regular" or not isinstance(shape, list) or not shape:
            raise Unsupported(f"chunk grid {grid!r} for shape {shape!r}")
        if not isinstance(chunks, list) or list(chunks[1:]) != shape[1:] or chunks[0] < 1:
            raise Unsupported(f"chunk shape {chunks!r} for shape {shape!r} (not time-only)")
        if key_enc.get("name") != "default" or sep != ".":
            raise Unsupported(f"chunk key encoding {key_enc!r}")
        if doc.get("storage_transformers"):
            raise Unsupported("storage transformers")
        self.codec = ChunkCodec.from_json(doc.get("data_type"), doc.get("codecs") or [])
        self._fill = _parse_fill(doc, self.codec.dtype)
        self._zero_fill = self.codec.dtype is not None and not self._fill.tobytes().strip(b"\0")
        self.directory = directory
        self._doc = doc
        self.chunk_shape: tuple[int, ...] = tuple(int(c) for c in chunks)
        self._key_suffix = ".0" * (len(shape) - 1)
        self._write_empty = bool(zarr.config.get("array.write_empty_chunks"))
        self._indent = zarr.config.get("json_indent")
        self._tail: tuple[int, np.ndarray] | None = None
        self.fsync = False  # fsync each file before its rename (a durable store)

    @classmethod
    def open(cls, directory: Path) -> DirectArray:
        """Read ``directory/zarr.json``; raises :class:`Unsupported` for other layouts and
        for a zarr release the byte-identity test has not covered."""
        if not zarr_verified():
            raise Unsupported(f"zarr {zarr.__version__} is not one whose chunk bytes are verified")
        try:
            doc = json.loads((directory / ZARR_JSON).read_bytes())
        except (OSError, ValueError) as err:
            raise Unsupported(f"unreadable {ZARR_JSON}: {err}") from err
        if not isinstance(doc, dict):
            raise Unsupported(f"{ZARR_JSON} is not an object")
        return cls(directory, doc)

    @property
    def length(self) -> int:
        """Current size along axis 0 (as this writer last stored it)."""
        return int(self._doc["shape"][0])

    def chunk_path(self, idx: int) -> Path:
        return self.directory / f"c.{idx}{self._key_suffix}"

    def resize(self, n: int) -> None:
        """Set the length to ``n``; like zarr, drops chunks wholly past a shorter length."""
        old, c = self.length, self.chunk_shape[0]
        if n == old:
            return
        doc = {**self._doc, "shape": [n, *self._doc["shape"][1:]]}
        payload = json.dumps(doc, indent=self._indent, allow_nan=True).encode()
        for idx in range(-(-n // c), -(-old // c)):  # zarr deletes before storing metadata
            self.chunk_path(idx).unlink(missing_ok=True)
        if self._tail is not None and self._tail[0] * c >= n:
            self._tail = None
        write_atomic(self.directory / ZARR_JSON, payload, self.fsync)
        self._doc = doc

    def _blank(self) -> np.ndarray:
        if self.codec.dtype is None:
            return np.full(self.chunk_shape, self._fill, dtype=object)
        return np.full(self.chunk_shape, self._fill, dtype=self.codec.dtype)

    def _base(self, idx: int, keep: int) -> np.ndarray:
        """Chunk ``idx`` with its first ``keep`` rows as stored, fill value after them."""
        if self._tail is not None and self._tail[0] == idx:
            chunk = self._tail[1]
        else:
            try:
                chunk = self.codec.decode(self.chunk_path(idx).read_bytes(), self.chunk_shape)
            except FileNotFoundError:
                return self._blank()
        chunk[keep:] = self._fill
        return chunk

    def plan(self, n0: int, data: np.ndarray) -> Plan:
        """The chunks that hold rows ``[n0, n0 + len(data))`` = ``data`` afterwards.

        Chunks wholly inside ``data`` are views of it; a partial first chunk is merged with
        the stored rows before ``n0``; everything past the data is the fill value.
        """
        c, n1 = self.chunk_shape[0], n0 + len(data)
        plan = Plan()
        for idx in range(n0 // c, -(-n1 // c)):
            start = idx * c
            lo, hi = max(n0, start), min(n1, start + c)
            if lo == start and hi == start + c:
                plan.chunks.append((idx, data[lo - n0 : hi - n0]))
                continue
            chunk = self._base(idx, lo - start) if lo > start else self._blank()
            chunk[lo - start : hi - start] = data[lo - n0 : hi - n0]
            plan.chunks.append((idx, chunk))
        if n1 % c and plan.chunks:
            plan.tail = plan.chunks[-1]
        return plan

    def _is_fill(self, chunk: np.ndarray) -> bool:
        """zarr's ``all_equal(fill_value)``: bitwise for 0 (so -0.0 is kept), NaN == NaN."""
        if self.codec.dtype is None:
            return bool(np.all(chunk == self._fill))
        if self._zero_fill:
            return not np.ascontiguousarray(chunk).view(np.uint8).any()
        return bool(np.array_equal(chunk, self._fill, equal_nan=self.codec.dtype.kind == "f"))

    def store(self, idx: int, chunk: np.ndarray) -> None:
        """Encode and write one full chunk (or delete it when it is all fill value)."""
        path = self.chunk_path(idx)
        if not self._write_empty and self._is_fill(chunk):
            path.unlink(missing_ok=True)
            return
        write_atomic(path, self.codec.encode(chunk), self.fsync)

    def stored(self, plan: Plan) -> None:
        """Record that every chunk of ``plan`` is on disk."""
        self._tail = plan.tail

    def forget(self) -> None:
        """Drop the in-memory tail chunk (after a failed append); re-read when needed."""
        self._tail = None
