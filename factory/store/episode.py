"""Lazy view of one episode of an :class:`~factory.store.EpisodeStore`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from factory.store.schema import EpisodeMeta

if TYPE_CHECKING:
    from factory.store.episode_store import EpisodeStore


class Episode:
    """Lazy view of one episode: arrays are read from disk on access.

    ``episode[key]`` is the ``(T, *schema.keys[key].shape)`` array of that key.
    """

    def __init__(self, store: EpisodeStore, index: int, start: int, stop: int) -> None:
        self._store = store
        self.index = index
        self.start = start  # first frame in the store's data arrays
        self.stop = stop  # one past the last frame
        self._meta: EpisodeMeta | None = None

    @property
    def length(self) -> int:
        return self.stop - self.start

    def __len__(self) -> int:
        return self.length

    @property
    def meta(self) -> EpisodeMeta:
        if self._meta is None:
            self._meta = self._store.episode_meta(self.index)
        return self._meta

    def keys(self) -> list[str]:
        return list(self._store.schema.keys)

    def __contains__(self, key: object) -> bool:
        return key in self._store.schema.keys

    def __getitem__(self, key: str) -> np.ndarray:
        return self._store._read_slice(key, self.start, self.stop)

    def to_dict(self, keys: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """All (or the given) keys as ``{key: (T, *shape)}`` arrays."""
        return {k: self[k] for k in (keys if keys is not None else self.keys())}

    def __repr__(self) -> str:
        return (
            f"Episode(index={self.index}, length={self.length}, frames=[{self.start}, {self.stop}))"
        )
