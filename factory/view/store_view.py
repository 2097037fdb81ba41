"""What the data view serves, built lazily and cached: one read-only store's table,
episode details, thumbnails, filmstrips, player sprite sheets and side-by-side replays.

A store of several cameras (``image`` and ``image_<cam>``, e.g. pile's top and side) shows
every camera of a frame side by side, the main one first, in every image it serves.

Every method is safe to call from several threads: store reads are serialised by one lock;
PNG encoding and ground-truth replays run outside it, and their results are kept in LRU
caches (``image_budget`` bytes of PNGs, ``replays`` side-by-side results).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from factory.errors import FactoryError
from factory.store import EpisodeStore
from factory.view.cache import LruCache
from factory.view.png import (
    Sheet,
    beside,
    beside_shape,
    encode_png,
    pick,
    shrink,
    shrunk_shape,
    strip,
    tile,
)
from factory.view.sidebyside import SideBySide, compare, read_generated
from factory.view.table import POSE_KEY, EpisodeRow, coverage_curve, episode_rows, store_scorer

IMAGE_KEY = "image"


@dataclass(frozen=True)
class ViewConfig:
    """thumb_side: longest side of a table thumbnail (px); film_frames: frames in a
    filmstrip; player_side: longest side of a player frame (larger frames are averaged
    down); image_budget: bytes of PNGs kept; replays: side-by-side results kept."""

    thumb_side: int = 48
    film_frames: int = 10
    player_side: int = 192
    image_budget: int = 256 * 2**20
    replays: int = 8


class StoreView:
    """The data view of the store at ``path`` (opened read-only; :meth:`close` it)."""

    def __init__(self, path: Path, config: ViewConfig | None = None) -> None:
        self.config = config or ViewConfig()
        self.store = EpisodeStore.open(path, mode="r")
        self._lock = threading.Lock()
        self._rows: list[EpisodeRow] | None = None
        self.images = LruCache(self.config.image_budget)
        self.replays = LruCache(self.config.replays, size=lambda _: 1)
        self.cameras = camera_keys(self.store)
        """The image keys shown, left to right: ``image`` first, then ``image_<cam>``."""

    def close(self) -> None:
        with self._lock:
            self.store.close()

    # -- metadata (no images) -----------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The store's path, size, fps, image size and keys."""
        s = self.store
        image = s.schema.keys.get(IMAGE_KEY)
        return {
            "path": str(s.path),
            "episodes": s.n_episodes,
            "frames": s.n_frames,
            "fps": s.fps,
            "env": str(s.attrs.get("env", "")),
            "image": list(image.shape) if image is not None else None,
            "cameras": list(self.cameras),
            "keys": list(s.schema.keys),
        }

    def rows(self) -> list[EpisodeRow]:
        """The table (built on the first call, then kept: the store is a snapshot)."""
        with self._lock:
            if self._rows is None:
                self._rows = episode_rows(self.store)
            return self._rows

    def _row(self, index: int) -> EpisodeRow:
        rows = self.rows()
        if not 0 <= index < len(rows):
            raise FactoryError(f"no episode {index}: the store has {len(rows)}")
        return rows[index]

    def sheet(self, index: int) -> Sheet | None:
        """Where each frame (every camera side by side) lies in :meth:`frames_png` (None:
        the store has no images)."""
        if not self.cameras:
            return None
        length = self._row(index).length
        side = self.config.player_side
        keys = self.store.schema.keys
        shapes = [shrunk_shape(keys[k].shape[0], keys[k].shape[1], side) for k in self.cameras]
        h, w = beside_shape(shapes)
        return Sheet(length, math.ceil(math.sqrt(length)), h, w)

    def detail(self, index: int) -> dict[str, Any]:
        """One episode: its row, full metadata, per-frame coverage and sheet geometry."""
        row = self._row(index)
        scorer = store_scorer(self.store)
        with self._lock:
            meta = self.store.episode_meta(index).to_json()
            poses = self.store.episode(index)[POSE_KEY] if scorer is not None else None
        coverage = None if poses is None or scorer is None else coverage_curve(poses, scorer)
        sheet = self.sheet(index)
        return {
            **row.to_json(),
            "meta": meta,
            "coverage": None if coverage is None else coverage.tolist(),
            "sheet": None if sheet is None else sheet.to_json(),
            "cameras": list(self.cameras),
        }

    # -- images ------------------------------------------------------------------------
    def _frames(self, index: int) -> list[np.ndarray]:
        """The episode's frames of every camera in :attr:`cameras`, each (T, H, W, 3)
        uint8."""
        self._row(index)
        if not self.cameras:
            raise FactoryError(f"{self.store.path} has no data/{IMAGE_KEY}: nothing to show")
        with self._lock:
            episode = self.store.episode(index)
            return [np.asarray(episode[k]) for k in self.cameras]

    def _thumbs(self, index: int) -> bytes:
        """Build the thumbnail and the filmstrip from one read; returns the thumbnail."""
        views = self._frames(index)
        picked = pick(len(views[0]), self.config.film_frames)
        small = beside([shrink(v[picked], self.config.thumb_side) for v in views])
        film = encode_png(strip(small))
        thumb = encode_png(small[-1])
        self.images.put(("film", index), film)
        self.images.put(("thumb", index), thumb)
        return thumb

    def thumb_png(self, index: int) -> bytes:
        """A PNG of the episode's last frame, ``thumb_side`` px at most."""
        return bytes(self.images.get_or_build(("thumb", index), lambda: self._thumbs(index)))

    def filmstrip_png(self, index: int) -> bytes:
        """A PNG of ``film_frames`` frames spread over the episode, first to last."""

        def build() -> bytes:
            self._thumbs(index)
            film = self.images.get(("film", index))
            assert film is not None
            return bytes(film)

        return bytes(self.images.get_or_build(("film", index), build))

    def _sheet_png(self, index: int, views: list[np.ndarray]) -> bytes:
        """views: each camera's (T, H, W, 3) frames -> the sprite sheet PNG."""
        sheet = self.sheet(index)
        assert sheet is not None
        side = self.config.player_side
        image, _ = tile(beside([shrink(v, side) for v in views]), sheet.cols)
        return encode_png(image, level=3)

    def frames_png(self, index: int) -> bytes:
        """Every frame of the episode in one sprite sheet (see :meth:`sheet`)."""
        key = ("frames", index)
        return bytes(
            self.images.get_or_build(key, lambda: self._sheet_png(index, self._frames(index)))
        )

    # -- side by side --------------------------------------------------------------------
    def replay(self, index: int) -> SideBySide:
        """The episode next to its ground-truth replay (computed once, then kept)."""
        if not self._row(index).seeded:
            raise FactoryError(
                f"episode {index} was not generated inside the model from a seeded reset; "
                "only those can be replayed in the ground truth"
            )

        def build() -> SideBySide:
            with self._lock:  # the replay itself runs outside the store's lock
                generated = read_generated(self.store, index)
            return compare(generated)

        result: SideBySide = self.replays.get_or_build(("replay", index), build)
        return result

    def replay_frames_png(self, index: int) -> bytes:
        """The ground-truth replay's frames, a sprite sheet laid out like :meth:`frames_png`
        (the main camera: a generated episode has no other)."""
        key = ("real", index)
        return bytes(
            self.images.get_or_build(
                key, lambda: self._sheet_png(index, [self.replay(index).real_frames])
            )
        )


def camera_keys(store: EpisodeStore) -> list[str]:
    """The store's camera keys that the view shows, left to right: ``image`` (the main
    camera) first, then every ``image_<cam>`` in schema order; only (H, W, 3) keys."""
    keys = store.schema.keys
    cams = [k for k in store.schema.image_keys if len(keys[k].shape) == 3]
    cams = [k for k in cams if keys[k].shape[2] == 3]
    return sorted(cams, key=lambda k: k != IMAGE_KEY) if IMAGE_KEY in cams else []
