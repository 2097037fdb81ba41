"""In-RAM training data and window sampling that never crosses episode boundaries.

Shapes: ``N`` frames in total, ``E`` episodes; ``episode_ends`` (E,) int64 is cumulative
(episode e spans ``[ends[e-1], ends[e])``), as in the Zarr store.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from factory.errors import FactoryError
from factory.model.config import MAIN_CAMERA
from factory.record.output import view_key
from factory.store import EpisodeStore
from factory.store.finite import non_finite_episodes, shown

log = logging.getLogger(__name__)


@dataclass
class EpisodeData:
    """frames: (N, H, W, 3) uint8; actions: (N, A) float32 (applied at each frame);
    state: (N, S) float32 robot state; task_state: (N, K) float32 or None (PushT: block x,
    y, angle); episode_ends: (E,) int64 cumulative; ``source``: a path for provenance."""

    frames: np.ndarray
    actions: np.ndarray
    state: np.ndarray
    episode_ends: np.ndarray
    task_state: np.ndarray | None = None
    source: str | None = None
    world: str | None = None
    """The ground-truth world the store was recorded in (its ``env``, ``-model`` stripped)."""

    def __post_init__(self) -> None:
        n = len(self.frames)
        ends = np.asarray(self.episode_ends, dtype=np.int64)
        self.episode_ends = ends
        if self.frames.ndim != 4 or self.frames.shape[-1] != 3 or self.frames.dtype != np.uint8:
            raise ValueError(f"frames must be (N, H, W, 3) uint8, got {self.frames.shape}")
        for name in ("actions", "state", "task_state"):
            arr = getattr(self, name)
            if arr is not None and (arr.ndim != 2 or len(arr) != n):
                raise ValueError(f"{name} must be ({n}, D), got {arr.shape}")
        if len(ends) == 0 or ends[-1] != n or np.any(np.diff(ends) <= 0) or ends[0] <= 0:
            raise ValueError("episode_ends must be increasing, positive and end at N")

    @property
    def n_episodes(self) -> int:
        return len(self.episode_ends)

    @property
    def episode_starts(self) -> np.ndarray:
        """(E,) int64 first frame index of each episode."""
        return np.concatenate([[0], self.episode_ends[:-1]]).astype(np.int64)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(int(s) for s in self.frames.shape[1:])  # type: ignore[return-value]

    def split(self, val_fraction: float = 0.1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Held-out split by episode: (train_episodes, val_episodes) index arrays.

        At least one episode is held out when there are two or more and val_fraction > 0.
        """
        rng = np.random.default_rng(seed)
        order = rng.permutation(self.n_episodes)
        n_val = round(self.n_episodes * val_fraction)
        if val_fraction > 0 and self.n_episodes > 1:
            n_val = max(1, n_val)
        return np.sort(order[n_val:]), np.sort(order[:n_val])

    def frame_indices(self, episodes: np.ndarray | None = None) -> np.ndarray:
        """All frame indices of the given episodes (None: all), int64."""
        if episodes is None:
            return np.arange(len(self.frames), dtype=np.int64)
        starts, ends = self.episode_starts, self.episode_ends
        parts = [np.arange(starts[e], ends[e], dtype=np.int64) for e in episodes]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class WindowSampler:
    """Random windows of ``length`` consecutive frames inside one episode.

    ``sample`` returns frame indices (B, length). With probability ``pad_prob`` a window
    starts at an episode's first frame with ``n_pad`` in [1, pad_max] leading copies of it
    (the rollout's padding when it starts from fewer than K frames).
    """

    def __init__(
        self,
        data: EpisodeData,
        length: int,
        episodes: np.ndarray | None = None,
        pad_prob: float = 0.0,
        pad_max: int = 0,
    ) -> None:
        eps = np.arange(data.n_episodes) if episodes is None else np.asarray(episodes)
        starts, ends = data.episode_starts[eps], data.episode_ends[eps]
        keep = ends - starts >= length
        if not np.any(keep):
            raise ValueError(f"no episode has {length} frames")
        self.length = length
        self.episode_first = starts[keep]
        self.valid = np.concatenate(
            [
                np.arange(s, e - length + 1, dtype=np.int64)
                for s, e in zip(starts, ends, strict=True)
                if e - s >= length
            ]
        )
        self.pad_prob = pad_prob
        self.pad_max = min(pad_max, length - 1)

    def __len__(self) -> int:
        return len(self.valid)

    def sample(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        """(B, length) int64 frame indices."""
        offsets = np.arange(self.length, dtype=np.int64)
        idx = self.valid[rng.integers(0, len(self.valid), batch)][:, None] + offsets[None]
        if self.pad_prob > 0 and self.pad_max > 0:
            padded = rng.random(batch) < self.pad_prob
            n = int(padded.sum())
            if n:
                first = self.episode_first[rng.integers(0, len(self.episode_first), n)]
                n_pad = rng.integers(1, self.pad_max + 1, n)
                idx[padded] = first[:, None] + np.maximum(offsets[None] - n_pad[:, None], 0)
        return idx


def evenly_spaced(indices: np.ndarray, n: int) -> np.ndarray:
    """Up to ``n`` entries of ``indices``, evenly spaced (a fixed evaluation subset)."""
    return indices[np.linspace(0, len(indices) - 1, min(n, len(indices))).astype(np.int64)]


def sample_frames(indices: np.ndarray, batch: int, rng: np.random.Generator) -> np.ndarray:
    """(B,) random frame indices drawn from ``indices``."""
    return indices[rng.integers(0, len(indices), batch)]


def _ground_truth_labels(store: EpisodeStore, required: bool) -> bool:
    """Whether the store's task_state may be a training label: not where an episode holds a
    world model's own reading (generated, or teleoperated inside a model) rather than ground
    truth. Such a store is refused where the label is ``required``; else it goes unused."""
    read = sum(m.task_state_source == "model" for m in store.all_meta())
    if not read:
        return True
    what = (
        f"{store.path}: {read} of its {store.n_episodes} episodes hold a world model's reading "
        "of the task state, not ground truth"
    )
    if required:
        raise FactoryError(f"{what}; train on ground-truth episodes (factory collect)")
    log.warning("%s; its task_state is not used as a label", what)
    return False


def camera_key(store: EpisodeStore, camera: str) -> str:
    """The store key of ``camera``'s frames: ``image`` for the main camera
    (:data:`~factory.model.config.MAIN_CAMERA`, or the first of the store's ``cameras``),
    else ``image_<camera>``; FactoryError where the store has no such camera."""
    named = [str(c) for c in store.attrs.get("cameras", [])]
    if camera == MAIN_CAMERA or (named and camera == named[0]):
        return "image"
    if view_key(camera) in store.schema.keys:
        return view_key(camera)
    main = named[0] if named else MAIN_CAMERA
    others = [k.removeprefix("image_") for k in store.schema.keys if k.startswith("image_")]
    raise FactoryError(
        f"{store.path} has no camera {camera!r} (no data/{view_key(camera)}); its cameras: "
        + ", ".join([main, *others])
    )


def load_episode_data(
    path: Path, need_task_state: bool = False, camera: str = MAIN_CAMERA, frames: bool = True
) -> EpisodeData:
    """The whole store in RAM as :class:`EpisodeData` (images, actions, state, task_state);
    ``frames`` are ``camera``'s (:func:`camera_key`: the main one's ``data/image`` by
    default). ``frames=False`` is for stages that never read pixels (a state kind's
    dynamics): the frames are then a zero-stride all-zero view of the store's shape (N, H,
    W, 3), no memory, instead of N frames in RAM (8.8 GB for 1,600 pile episodes)."""
    with EpisodeStore.open(path, mode="r") as store:
        keys = store.schema.keys
        if "image" not in keys:
            raise FactoryError(f"{path} has no data/image key; the world model trains on frames")
        frames_key = camera_key(store, camera)
        for key in ("action", "state"):
            if key not in keys:
                raise FactoryError(f"{path} has no data/{key} key; it cannot train a world model")
        if need_task_state and "task_state" not in keys:
            raise FactoryError(f"{path} has no data/task_state; this stage learns the task state")
        if store.n_episodes == 0:
            raise FactoryError(f"{path} holds no episodes")
        labelled = "task_state" in keys and _ground_truth_labels(store, need_task_state)
        wanted = ([frames_key] if frames else []) + ["action", "state"]
        arrays = store.load(wanted + (["task_state"] if labelled else []))
        if not frames:
            shape = (store.n_frames, *store.schema.keys[frames_key].shape)
            arrays[frames_key] = np.broadcast_to(np.zeros((1, *shape[1:]), np.uint8), shape)
        ends = np.asarray(store.episode_ends)
        env = store.attrs.get("env")
    for key in ("action", "state", "task_state"):
        if key in arrays:
            refuse_non_finite(path, key, arrays[key], ends)
    return EpisodeData(
        frames=arrays[frames_key],
        actions=arrays["action"].astype(np.float32),
        state=arrays["state"].astype(np.float32),
        episode_ends=ends,
        task_state=arrays.get("task_state"),
        source=str(path),
        world=None if env is None else str(env).removesuffix("-model"),
    )


def refuse_non_finite(path: Path, key: str, values: np.ndarray, ends: np.ndarray) -> None:
    """Refuse (one line) a store whose ``key`` values (N, ...) hold a NaN or inf: training
    on one would spoil every weight it reaches. Names the episodes (``ends``: the store's
    ``episode_ends``) that hold them."""
    bad = non_finite_episodes(values, ends)
    if bad:
        raise FactoryError(
            f"{path} holds non-finite {key} values (NaN or inf) in episode(s) {shown(bad)}; "
            "it cannot train a model"
        )
