"""Typed description of what an episode store holds.

:class:`StoreSchema` maps each data key (``"image"``, ``"action"``, ``"state"``, ...) to a
:class:`KeySpec`: the per-frame shape and the dtype. An episode of ``T`` frames holds, for
every key, an array of shape ``(T, *spec.shape)`` and exactly ``spec.dtype``.

:class:`EpisodeMeta` is the per-episode provenance record (where the episode came from, the
generator and its parameters, the outcome), stored as one JSON document per episode.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from factory.errors import SchemaMismatchError, StoreError

KEY_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
SOURCES = ("real", "world_model", "teleop")


@dataclass(frozen=True)
class KeySpec:
    """Per-frame layout of one data key.

    ``shape`` is the shape of ONE frame, e.g. ``(96, 96, 3)`` for an image or ``(2,)`` for a
    PushT action; a whole episode of ``T`` frames is ``(T, *shape)``. ``dtype`` is a numpy
    dtype name (``"uint8"``, ``"float32"``, ...).
    """

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        try:
            shape = tuple(int(s) for s in self.shape)
            dtype = np.dtype(self.dtype)
        except (TypeError, ValueError) as err:
            raise StoreError(
                f"invalid key spec shape={self.shape!r} dtype={self.dtype!r}: {err}; "
                "use a tuple of ints and a numpy dtype name such as 'float32'"
            ) from err
        if any(s <= 0 for s in shape):
            raise StoreError(f"invalid key spec shape {shape}: every dimension must be >= 1")
        if dtype.kind not in "biuf":
            raise StoreError(
                f"invalid key spec dtype {dtype.name!r}: use a bool, integer or float dtype"
            )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype.name)

    def to_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> KeySpec:
        try:
            return cls(shape=tuple(d["shape"]), dtype=str(d["dtype"]))
        except (KeyError, TypeError) as err:
            raise StoreError(
                f"invalid key spec {d!r}: expected {{'shape': [...], 'dtype': ...}}"
            ) from err


@dataclass(frozen=True)
class StoreSchema:
    """The data keys of a store and their per-frame :class:`KeySpec`.

    Keys are stored as ``data/<key>`` zarr arrays of shape ``(N, *spec.shape)``, where ``N``
    is the total number of frames in the store.
    """

    keys: dict[str, KeySpec]

    def __post_init__(self) -> None:
        if not self.keys:
            raise StoreError("a store schema needs at least one key (e.g. 'image', 'action')")
        for name, spec in self.keys.items():
            if not isinstance(name, str) or not KEY_PATTERN.match(name):
                raise StoreError(
                    f"invalid data key {name!r}: use letters, digits and '_', "
                    "starting with a letter"
                )
            if not isinstance(spec, KeySpec):
                raise StoreError(f"schema key {name!r} must map to a KeySpec, got {spec!r}")
        object.__setattr__(self, "keys", dict(self.keys))

    @property
    def image_keys(self) -> list[str]:
        """Keys that hold camera frames (names starting with ``"image"``), in schema order."""
        return [k for k in self.keys if k.startswith("image")]

    def to_json(self) -> dict[str, Any]:
        return {k: spec.to_json() for k, spec in self.keys.items()}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StoreSchema:
        if not isinstance(d, Mapping):
            raise StoreError(f"invalid store schema {d!r}: expected a mapping of key -> spec")
        return cls(keys={str(k): KeySpec.from_json(v) for k, v in d.items()})

    def check_episode(self, data: Mapping[str, Any]) -> int:
        """Validate one episode against the schema and return its length ``T``.

        ``data[key]`` must be a numpy array of shape ``(T, *keys[key].shape)`` and dtype
        ``keys[key].dtype`` (no implicit casts), the same ``T >= 1`` for every key, and the
        key sets must be equal. Raises :class:`SchemaMismatchError` naming the key, what was
        expected and what was given.
        """
        missing = [k for k in self.keys if k not in data]
        extra = [k for k in data if k not in self.keys]
        if missing or extra:
            raise SchemaMismatchError(
                f"episode keys do not match the store schema: missing {missing}, "
                f"unexpected {extra}; expected exactly {list(self.keys)}"
            )
        length: int | None = None
        first_key = ""
        for name, spec in self.keys.items():
            arr = data[name]
            if not isinstance(arr, np.ndarray):
                raise SchemaMismatchError(
                    f"episode key {name!r}: expected a numpy array, got {type(arr).__name__}"
                )
            expected = ("T", *spec.shape)
            if arr.ndim != len(spec.shape) + 1 or tuple(arr.shape[1:]) != spec.shape:
                raise SchemaMismatchError(
                    f"episode key {name!r}: expected shape {expected}, got {tuple(arr.shape)}"
                )
            if arr.dtype.name != spec.dtype:
                raise SchemaMismatchError(
                    f"episode key {name!r}: expected dtype {spec.dtype}, got {arr.dtype.name}; "
                    f"convert with .astype(np.{spec.dtype})"
                )
            if length is None:
                length, first_key = int(arr.shape[0]), name
            elif arr.shape[0] != length:
                raise SchemaMismatchError(
                    f"episode key {name!r} has {arr.shape[0]} frames but {first_key!r} has "
                    f"{length}; every key needs the same number of frames"
                )
        assert length is not None
        if length < 1:
            raise SchemaMismatchError("episode has 0 frames; an episode needs at least 1 frame")
        return length

    def describe_difference(self, other: StoreSchema) -> str:
        """One line saying how ``other`` differs from this schema ('' when equal)."""
        parts = []
        for k in self.keys:
            if k not in other.keys:
                parts.append(f"key {k!r} missing")
            elif other.keys[k] != self.keys[k]:
                a, b = self.keys[k], other.keys[k]
                parts.append(
                    f"key {k!r}: expected shape {a.shape} {a.dtype}, got {b.shape} {b.dtype}"
                )
        parts += [f"unexpected key {k!r}" for k in other.keys if k not in self.keys]
        return "; ".join(parts)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def to_json_text(obj: Any) -> str:
    """Serialise ``obj`` to compact JSON, accepting numpy scalars and arrays."""
    return json.dumps(obj, default=_json_default, separators=(",", ":"), allow_nan=True)


@dataclass
class EpisodeMeta:
    """Provenance and outcome of one episode.

    ``source`` is where the frames came from: ``"real"`` (a ground-truth env or robot),
    ``"world_model"`` (generated) or ``"teleop"`` (an operator). ``generator`` names the
    policy or recorder that produced the actions and ``generator_params`` its settings.
    ``extra`` is free-form (device, timing stats, ...); everything must be JSON-serialisable
    (numpy scalars and arrays are converted).
    """

    source: str
    generator: str
    generator_params: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    model_id: str | None = None
    task: str = ""
    success: bool | None = None
    score: float | None = None
    wall_time_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise StoreError(f"episode source {self.source!r} is not one of {', '.join(SOURCES)}")

    @property
    def task_state_source(self) -> str:
        """Where the episode's ``task_state`` came from: ``"model"``, a world model's own
        reading (generated, or teleoperated inside a model: ``model_id`` is set), or
        ``"ground_truth"`` (a simulator, a tracker or labels)."""
        if self.source == "world_model" or self.model_id is not None:
            return "model"
        return "ground_truth"

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible dict (numpy values converted to Python ones)."""
        d = dataclasses.asdict(self)
        out: dict[str, Any] = json.loads(to_json_text(d))
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EpisodeMeta:
        """Inverse of :meth:`to_json`; unknown fields are kept in ``extra``."""
        names = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in d.items() if k in names}
        unknown = {k: v for k, v in d.items() if k not in names}
        try:
            meta = cls(**known)
        except TypeError as err:
            raise StoreError(f"invalid episode meta {dict(d)!r}: {err}") from err
        if unknown:
            meta.extra = {**meta.extra, **unknown}
        if meta.score is not None and not isinstance(meta.score, float):
            meta.score = float(meta.score)
        if isinstance(meta.wall_time_s, int):
            meta.wall_time_s = float(meta.wall_time_s)
        return meta


def json_equal(a: Any, b: Any) -> bool:
    """Equality after a JSON round trip (tuples == lists, numpy == Python, nan == nan)."""
    ja, jb = json.loads(to_json_text(a)), json.loads(to_json_text(b))
    if isinstance(ja, float) and isinstance(jb, float):
        return ja == jb or (math.isnan(ja) and math.isnan(jb))
    return bool(ja == jb)
