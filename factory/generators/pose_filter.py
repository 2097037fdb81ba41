"""A filter for a noisy block-pose estimate, and how far it must move to count as moved.

Inside the world model the block pose comes from a learned probe whose estimate jitters
from frame to frame by many pixels, while the block itself is still. The filter averages the
estimate over the last few frames in which the block is expected to be still, restarts the
average when the estimate jumps by more than its noise allows (the block really moved), and
learns the noise online from the frame-to-frame jumps while still (their median, so an
occasional real bump does not count). In the ground-truth env the noise is zero and the
filter passes the pose through.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from factory.envs import pusht_geometry as geo

# median |jump| between two frames / per-axis noise std: a Rayleigh of scale sqrt(2) sigma
# for the 2-D position, a half-normal of scale sqrt(2) sigma for the angle
_RAYLEIGH_MEDIAN = 1.1774 * np.sqrt(2.0)
_HALF_NORMAL_MEDIAN = 0.6745 * np.sqrt(2.0)


class PoseFilter:
    """Averages block poses (x, y, angle) over still frames; thresholds in noise units.

    ``frames``: at most this many frames are averaged; ``sigmas``: a move counts when it is
    this many noise standard deviations; ``floor``: px / degrees, the smallest move that
    counts (the threshold for a noiseless estimate); ``history``: jumps kept to learn the
    noise from.
    """

    def __init__(self, frames: int, sigmas: float, floor: float, history: int = 32) -> None:
        self.frames, self.sigmas, self.floor = max(int(frames), 1), sigmas, floor
        self._jumps: deque[tuple[float, float]] = deque(maxlen=max(int(history), 1))
        self._window: deque[np.ndarray] = deque(maxlen=self.frames)
        self._last: np.ndarray | None = None
        self._noise: tuple[float, float] | None = None  # noise() of the current jumps
        self._mean: np.ndarray | None = None  # estimate() of the current window

    def reset(self) -> None:
        """Forget everything (a new episode)."""
        self._jumps.clear()
        self._window.clear()
        self._last = None
        self._noise = None
        self._mean = None

    @property
    def count(self) -> int:
        """How many frames the current estimate averages."""
        return len(self._window)

    def noise(self) -> tuple[float, float]:
        """The estimate's per-frame noise std: (px per axis, degrees); 0 until learnt."""
        if len(self._jumps) < 4:
            return 0.0, 0.0
        if self._noise is None:
            shifts, turns = zip(*self._jumps, strict=True)
            self._noise = _median(shifts) / _RAYLEIGH_MEDIAN, _median(turns) / _HALF_NORMAL_MEDIAN
        return self._noise

    def update(self, pose: np.ndarray, still: bool) -> np.ndarray:
        """Feed this frame's estimate (3,); returns the filtered pose (3,).

        ``still``: whether the block should not be moving (nothing is pushing it). Frames
        that are not still restart the average and teach nothing about the noise.
        """
        pose = np.asarray(pose, np.float64)
        if still and self._last is not None:
            self._jumps.append(_distance(pose, self._last))
            self._noise = None
        self._last = pose.copy() if still else None
        if not still or not self._window:
            self._window.clear()
        elif self.moved(self.estimate(), pose, len(self._window), 1):
            self._window.clear()  # a real move: start a new average
        self._window.append(pose)
        self._mean = None
        return self.estimate()

    def estimate(self) -> np.ndarray:
        """The mean of the window's poses (3,); angles averaged around the newest."""
        if self._mean is None:
            window = np.asarray(self._window)
            ref = window[-1, 2]
            mean = window.mean(axis=0)
            mean[2] = ref + float(np.mean(geo.wrap_angle(window[:, 2] - ref)))
            self._mean = mean
        return self._mean.copy()

    def moved(self, a: np.ndarray, b: np.ndarray, count_a: int, count_b: int) -> bool:
        """Whether estimates ``a`` and ``b`` (means of ``count_*`` frames; 0: exact) differ
        by more than ``sigmas`` noise std (and by more than the floor)."""
        noise_px, noise_deg = self.noise()
        spread = np.sqrt(sum(1.0 / c for c in (count_a, count_b) if c > 0))
        shift, turn = _distance(a, b)
        px = max(self.floor, self.sigmas * noise_px * spread)
        deg = max(self.floor, self.sigmas * noise_deg * spread)
        return bool(shift > px or turn > deg)


def _median(values: tuple[float, ...]) -> float:
    """The median of a few floats (``np.median``'s value, without its overhead)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def _distance(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(px between positions, degrees between angles) of two poses.

    In scalar math with numpy's rounding (``np.linalg.norm``, ``geo.wrap_angle``).
    """
    d = a[:2] - b[:2]
    turn = math.pi - (math.pi - float(a[2] - b[2])) % (2 * math.pi)
    return math.sqrt(float(d.dot(d))), math.degrees(abs(turn))
