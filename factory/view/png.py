"""Images for the data view: a small PNG encoder, thumbnails, filmstrips, sprite sheets.

numpy and zlib only (no OpenCV, no Pillow), so the view's data logic imports nothing
heavy. Shapes: ``T`` frames, ``H, W`` frame size, ``3`` RGB channels, uint8.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from factory.errors import FactoryError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def encode_png(image: np.ndarray, level: int = 6) -> bytes:
    """image (H, W, 3) uint8 RGB -> PNG bytes (8-bit RGB, every row "Sub"-filtered)."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise FactoryError(f"a PNG frame must be (H, W, 3) uint8, got {image.shape} {image.dtype}")
    h, w, _ = image.shape
    rows = np.ascontiguousarray(image).reshape(h, w * 3)
    sub = rows.copy()
    sub[:, 3:] = rows[:, 3:] - rows[:, :-3]  # uint8 wraps: the PNG "Sub" filter
    raw = np.empty((h, 1 + w * 3), np.uint8)
    raw[:, 0] = 1  # filter type 1 (Sub) on every row
    raw[:, 1:] = sub
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    body = zlib.compress(raw.tobytes(), level)
    return PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", body) + _chunk(b"IEND", b"")


def shrink(frames: np.ndarray, max_side: int) -> np.ndarray:
    """frames (..., H, W, 3) uint8 -> (..., H//f, W//f, 3) uint8, averaged over f x f
    blocks, with the smallest integer f that brings the longer side to ``max_side`` or
    less (f = 1: the frames themselves)."""
    h, w = frames.shape[-3], frames.shape[-2]
    f = max(1, math.ceil(max(h, w) / max(1, max_side)))
    if f == 1:
        return frames
    hh, ww = h // f, w // f
    crop = frames[..., : hh * f, : ww * f, :].astype(np.float32)
    blocks = crop.reshape(*frames.shape[:-3], hh, f, ww, f, 3)
    return np.rint(blocks.mean(axis=(-4, -2))).astype(np.uint8)


def shrunk_shape(h: int, w: int, max_side: int) -> tuple[int, int]:
    """The (height, width) that :func:`shrink` gives an (h, w) frame."""
    f = max(1, math.ceil(max(h, w) / max(1, max_side)))
    return h // f, w // f


def beside_shape(shapes: Sequence[tuple[int, int]], gap: int = 2) -> tuple[int, int]:
    """The (height, width) that :func:`beside` gives views of (h_i, w_i)."""
    return max(h for h, _ in shapes), sum(w for _, w in shapes) + gap * (len(shapes) - 1)


def beside(views: Sequence[np.ndarray], gap: int = 2) -> np.ndarray:
    """Cameras side by side: views, each (..., h_i, w_i, 3) uint8 with the same leading
    dims (frames), -> (..., max h_i, sum w_i + gaps, 3), left to right in order, white
    ``gap`` px between them, black below a shorter view. One view: itself."""
    if len(views) == 1:
        return views[0]
    lead = views[0].shape[:-3]
    h, w = beside_shape([(v.shape[-3], v.shape[-2]) for v in views], gap)
    out = np.full((*lead, h, w, 3), 255, np.uint8)
    x = 0
    for v in views:
        vh, vw = v.shape[-3], v.shape[-2]
        out[..., :, x : x + vw, :] = 0
        out[..., :vh, x : x + vw, :] = v
        x += vw + gap
    return out


def pick(length: int, count: int) -> np.ndarray:
    """(min(count, length),) int64 indices spread evenly over ``length`` frames, first
    and last included."""
    if length < 1:
        return np.zeros(0, np.int64)
    n = max(1, min(count, length))
    if n == 1:
        return np.array([length - 1], np.int64)
    return np.rint(np.linspace(0, length - 1, n)).astype(np.int64)


@dataclass(frozen=True)
class Sheet:
    """Where frame ``t`` lies in a sprite sheet: row ``t // cols``, column ``t % cols``,
    each cell ``height`` x ``width`` pixels."""

    frames: int
    cols: int
    height: int
    width: int

    def to_json(self) -> dict[str, int]:
        return {
            "frames": self.frames,
            "cols": self.cols,
            "height": self.height,
            "width": self.width,
        }


def tile(frames: np.ndarray, cols: int) -> tuple[np.ndarray, Sheet]:
    """frames (T, h, w, 3) -> one (rows*h, cols*w, 3) image, frames in reading order
    (unused cells black), and its :class:`Sheet`."""
    t, h, w, _ = frames.shape
    cols = max(1, min(cols, t))
    rows = math.ceil(t / cols)
    padded = np.zeros((rows * cols, h, w, 3), np.uint8)
    padded[:t] = frames
    grid = padded.reshape(rows, cols, h, w, 3).transpose(0, 2, 1, 3, 4)
    return grid.reshape(rows * h, cols * w, 3), Sheet(t, cols, h, w)


def strip(frames: np.ndarray, gap: int = 2) -> np.ndarray:
    """frames (N, h, w, 3) -> (h, N*w + (N-1)*gap, 3): side by side, white gaps."""
    n, h, w, _ = frames.shape
    out = np.full((h, n * w + max(0, n - 1) * gap, 3), 255, np.uint8)
    for i, frame in enumerate(frames):
        x = i * (w + gap)
        out[:, x : x + w] = frame
    return out
