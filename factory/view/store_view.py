"""What the data view serves, built lazily and cached: one read-only store's table,
episode details, thumbnails, filmstrips, player sprite sheets and side-by-side replays.

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
from factory.view.png import Sheet, encode_png, pick, shrink, strip, tile
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
        """Where each frame lies in :meth:`frames_png` (None: the store has no images)."""
        image = self.store.schema.keys.get(IMAGE_KEY)
        if image is None:
            return None
        length = self._row(index).length
        h, w, _ = image.shape
        f = max(1, math.ceil(max(h, w) / self.config.player_side))
        return Sheet(length, math.ceil(math.sqrt(length)), h // f, w // f)

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
        }

    # -- images ------------------------------------------------------------------------
    def _frames(self, index: int) -> np.ndarray:
        """(T, H, W, 3) uint8: the episode's frames."""
        self._row(index)
        if IMAGE_KEY not in self.store.schema.keys:
            raise FactoryError(f"{self.store.path} has no data/{IMAGE_KEY}: nothing to show")
        with self._lock:
            return np.asarray(self.store.episode(index)[IMAGE_KEY])

    def _thumbs(self, index: int) -> bytes:
        """Build the thumbnail and the filmstrip from one read; returns the thumbnail."""
        frames = self._frames(index)
        small = shrink(frames[pick(len(frames), self.config.film_frames)], self.config.thumb_side)
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

    def _sheet_png(self, index: int, frames: np.ndarray) -> bytes:
        sheet = self.sheet(index)
        assert sheet is not None
        image, _ = tile(shrink(frames, self.config.player_side), sheet.cols)
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
        """The ground-truth replay's frames, a sprite sheet laid out like :meth:`frames_png`."""
        key = ("real", index)
        return bytes(
            self.images.get_or_build(
                key, lambda: self._sheet_png(index, self.replay(index).real_frames)
            )
        )
