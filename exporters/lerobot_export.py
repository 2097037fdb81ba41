"""Write episodes of an :class:`~factory.store.EpisodeStore` as a LeRobotDataset v3.0, through
lerobot's own writer (``LeRobotDataset.create`` / ``add_frame`` / ``save_episode`` /
``finalize``). Nothing of the format is written here by hand.

Videos are encoded by lerobot's streaming encoder: one PyAV encoder thread per camera runs
while the next frames are added (PyAV releases the GIL), instead of writing PNG files
first and encoding them at the end of each episode. Its frame queue is sized to hold a
whole episode, so it never drops a frame; episodes too large for that fall back to
lerobot's PNG path, with its image-writer threads.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from exporters.lerobot_common import (
    ENV_STATE,
    NEXT,
    PROVENANCE,
    RESERVED,
    VIDEO_BACKEND,
    feature_name,
    named_cameras,
    provenance_text,
    require_lerobot,
)
from exporters.lerobot_next import next_columns, next_features
from factory.envs.pusht_geometry import keypoints
from factory.errors import FactoryError
from factory.store import EpisodeMeta, EpisodeStore

log = logging.getLogger(__name__)

DEFAULT_CRF = {"libsvtav1": 30, "h264": 23}  # both >= 35 dB PSNR on 96 px PushT frames
STREAMING_MAX_BYTES = 1 << 30  # largest episode (all cameras) held in the encoder queue
IMAGE_WRITER_THREADS = 2
BLOCK_POSE_NAMES = ["block_x", "block_y", "block_angle"]
MODEL_WORLD_SUFFIX = "-model"  # ModelWorld's spec name: f"{world}-model"
_NAME_TUPLE = re.compile(r"\(\s*([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)+)\s*\)")
OBS_TYPES = ("all", "pixels_agent_pos", "environment_state_agent_pos")
"""What an export holds besides ``action``, named after gym-pusht's ``obs_type``: ``all``
(every store key, plus ``observation.environment_state`` where the store has a block pose),
``pixels_agent_pos`` (the cameras and ``observation.state``) or
``environment_state_agent_pos`` (the T's 8 keypoints and ``observation.state``, no cameras:
lerobot's state-based PushT policies)."""
ACTIONS = ("executed", "label")
"""Which actions an export's ``action`` holds: ``executed`` (the store's ``action``, what
the world was given) or ``label`` (its ``action_label``: the supervisor's clean action, in
a store recorded with DART noise injection; what a policy should imitate)."""


@dataclass(frozen=True)
class VideoOptions:
    """How cameras are encoded: ``vcodec`` (``libsvtav1`` | ``h264``), ``crf`` (None: the
    codec's entry in :data:`DEFAULT_CRF`), ``encoder_threads`` per encoder (None: codec's
    choice)."""

    vcodec: str = "libsvtav1"
    crf: int | None = None
    encoder_threads: int | None = None

    def __post_init__(self) -> None:
        if self.vcodec not in DEFAULT_CRF:
            raise FactoryError(
                f"unknown --vcodec {self.vcodec!r}; use one of {', '.join(DEFAULT_CRF)}"
            )
        if self.crf is not None and not 0 <= self.crf <= 63:
            raise FactoryError(f"--crf must be in [0, 63], got {self.crf}")


@dataclass(frozen=True)
class WriteRequest:
    """One export: ``episodes`` (store indices, in order) of ``store`` into a new ``root``.

    ``video`` None stores frames as PNG images (lossless); ``task`` overrides each
    episode's task string; ``obs`` is one of :data:`OBS_TYPES` and ``actions`` of
    :data:`ACTIONS`.
    """

    store: EpisodeStore
    episodes: Sequence[int]
    root: Path
    repo_id: str
    video: VideoOptions | None
    task: str | None = None
    obs: str = "all"
    actions: str = "executed"


EpisodeCallback = Callable[[int, int, int], None]  # (episodes done, total, frames done)


def has_block_pose(store: EpisodeStore) -> bool:
    """Whether ``task_state`` is a PushT block pose (x, y, angle), the source of the keypoints.
    In a generated store it is the model's own reading, never the ground truth."""
    return (
        "task_state" in store.schema.keys
        and store.attrs.get("task_state_names") == BLOCK_POSE_NAMES
    )


def exported_keys(store: EpisodeStore, obs: str = "all", actions: str = "executed") -> list[str]:
    """The store keys an export of kind ``obs`` (:data:`OBS_TYPES`) writes, checked. With
    ``actions`` ``label`` the ``action`` column is read from ``action_label`` (see
    :func:`episode_columns`), so that key is not written on its own."""
    schema = store.schema
    if obs not in OBS_TYPES:
        raise FactoryError(f"unknown --obs {obs!r}; use one of {', '.join(OBS_TYPES)}")
    if actions not in ACTIONS:
        raise FactoryError(f"unknown --actions {actions!r}; use one of {', '.join(ACTIONS)}")
    if "action" not in schema.keys:
        raise FactoryError(f"{store.path} has no 'action' key; a LeRobot export needs actions")
    if actions == "label" and "action_label" not in schema.keys:
        raise FactoryError(
            f"{store.path} has no 'action_label' key (it was not recorded with "
            "--action-noise); export its executed actions (--actions executed)"
        )
    if obs == "environment_state_agent_pos":
        if not has_block_pose(store) or "state" not in schema.keys:
            raise FactoryError(
                f"{store.path} has no block pose (task_state {BLOCK_POSE_NAMES}) and agent state; "
                "--obs environment_state_agent_pos needs both"
            )
        return ["action", "state"]
    if not schema.image_keys:
        raise FactoryError(
            f"{store.path} has no image key (keys: {', '.join(schema.keys)}); "
            "a LeRobot export needs camera frames (or --obs environment_state_agent_pos)"
        )
    keys = [k for k in schema.keys if not (actions == "label" and k == "action_label")]
    if obs == "pixels_agent_pos":
        keys = [k for k in keys if k in schema.image_keys or k in ("action", "state")]
    return sorted(keys, key=lambda k: k != "image")  # the main camera first: import's main


def feature_names(store: EpisodeStore, keys: Sequence[str]) -> dict[str, str]:
    """Store key -> LeRobot feature for ``keys``: a store whose attrs name its cameras
    (pile: ``["top", "side"]``) exports ``observation.images.<camera>`` for each one,
    others ``observation.image`` for ``image`` (see :mod:`exporters.lerobot_common`).
    Two keys onto one feature raise :class:`FactoryError`."""
    cameras = named_cameras(store.attrs)
    names = {key: feature_name(key, cameras) for key in keys}
    if len(set(names.values())) < len(names):
        raise FactoryError(
            f"{store.path}: keys {sorted(names)} do not map to distinct LeRobot features "
            f"(cameras {cameras})"
        )
    return names


def writes_env_state(store: EpisodeStore, obs: str) -> bool:
    """Whether the export adds ``observation.environment_state`` (the T's keypoints)."""
    return obs != "pixels_agent_pos" and has_block_pose(store)


def writes_next(store: EpisodeStore) -> bool:
    """Whether the export adds ``next.reward`` / ``next.success`` / ``next.done`` (every
    ``obs``): they are scored from the block pose (:mod:`exporters.lerobot_next`)."""
    return has_block_pose(store)


def lerobot_features(
    store: EpisodeStore, video: bool, obs: str = "all", actions: str = "executed"
) -> dict[str, dict[str, Any]]:
    """LeRobot feature specs for the keys an export of kind ``obs`` writes, plus the
    provenance string (and the keypoints and ``next.*``, see :func:`writes_env_state` and
    :func:`writes_next`).

    Images must be (H, W, 3) uint8. Raises :class:`FactoryError` for a store without what
    ``obs`` needs, or with a key that clashes with LeRobot's own columns.
    """
    schema = store.schema
    features: dict[str, dict[str, Any]] = {}
    for key, name in feature_names(store, exported_keys(store, obs, actions)).items():
        spec = schema.keys[key]
        if name in RESERVED or name == ENV_STATE or name in NEXT:
            raise FactoryError(f"{store.path}: key {key!r} clashes with a LeRobot column name")
        if key in schema.image_keys:
            if len(spec.shape) != 3 or spec.shape[2] != 3 or spec.dtype != "uint8":
                raise FactoryError(
                    f"{store.path}: image key {key!r} is {spec.shape} {spec.dtype}; "
                    "LeRobot cameras need (H, W, 3) uint8"
                )
            features[name] = {
                "dtype": "video" if video else "image",
                "shape": spec.shape,
                "names": ["height", "width", "channels"],
            }
        else:
            features[name] = {
                "dtype": spec.dtype,
                "shape": spec.shape,
                "names": _names(store, key, spec.shape),
            }
    if writes_env_state(store, obs):
        names = [f"keypoint{i}_{ax}" for i in range(8) for ax in "xy"]
        features[ENV_STATE] = {"dtype": "float32", "shape": (16,), "names": names}
    if writes_next(store):
        features.update(next_features())
    features[PROVENANCE] = {"dtype": "string", "shape": (1,), "names": None}
    return features


def _names(store: EpisodeStore, key: str, shape: tuple[int, ...]) -> list[str] | None:
    """Per-dimension names of a 1-D key: the store's ``<key>_names`` attr; for ``action``
    else the names its world spec gives in ``action_meaning`` (PushT's "... position (x, y)
    ..." -> ``x``, ``y``); else ``key_i``."""
    if len(shape) != 1:
        return None
    given = store.attrs.get(f"{key}_names")
    if isinstance(given, list) and len(given) == shape[0]:
        return [str(n) for n in given]
    if key == "action":
        spelled = meaning_names(store.action_meaning, shape[0])
        if spelled is not None:
            return spelled
    return [f"{key}_{i}" for i in range(shape[0])]


def meaning_names(meaning: str, n: int) -> list[str] | None:
    """The first parenthesised tuple of ``n`` identifiers in ``meaning``, e.g. ``["x", "y"]``
    of "absolute agent target position (x, y) in board pixels"; None if there is none."""
    for match in _NAME_TUPLE.finditer(meaning):
        names = [part.strip() for part in match.group(1).split(",")]
        if len(names) == n:
            return names
    return None


def robot_type(store: EpisodeStore) -> str | None:
    """The store's world (``env`` attr), a world model's without its ``-model`` suffix:
    its episodes are of the same robot, and lerobot merges only equal robot types."""
    env = str(store.attrs.get("env", ""))
    return env.removesuffix(MODEL_WORLD_SUFFIX) or None


def store_info(store: EpisodeStore) -> dict[str, Any]:
    """Store-level facts carried in every provenance record."""
    return {
        "name": store.path.name,
        "fps": store.fps,
        "action_meaning": store.action_meaning,
        "attrs": store.attrs,
    }


def integer_fps(store: EpisodeStore) -> int:
    """The store's fps as the integer LeRobot needs (:class:`FactoryError` otherwise)."""
    fps = store.fps
    if fps <= 0 or fps != round(fps):
        raise FactoryError(f"{store.path} has fps={fps}; a LeRobot dataset needs a whole fps")
    return round(fps)


def write_dataset(req: WriteRequest, on_episode: EpisodeCallback | None = None) -> dict[str, Any]:
    """Write the requested episodes into the new folder ``req.root`` and finalize it.

    Returns ``{"episodes", "frames", "features", "seconds"}``. The caller owns ``root``:
    on failure it is left half-written, for the caller to delete.
    """
    lerobot = require_lerobot()
    store = req.store
    exported = exported_keys(store, req.obs, req.actions)
    if not any(k in store.schema.image_keys for k in exported):
        req = replace(req, video=None)  # no cameras: nothing to encode
    features = lerobot_features(store, req.video is not None, req.obs, req.actions)
    metas = req.store.all_meta()
    tasks = _tasks(req, metas)
    start = time.perf_counter()
    dataset = lerobot.LeRobotDataset.create(
        req.repo_id,
        integer_fps(store),
        features,
        root=req.root,
        robot_type=robot_type(store),
        use_videos=req.video is not None,
        video_backend=VIDEO_BACKEND,
        **writer_options(req),
    )
    info = store_info(store)
    keys = feature_names(store, exported)
    frames = 0
    try:
        for n, index in enumerate(req.episodes, start=1):
            # Read in this thread: a reader thread measured slower (0.86-0.875x against 0.96x
            # of the direct loop): it fights add_frame and zarr's I/O thread for the GIL.
            data = episode_columns(store.episode(index).to_dict(), req.actions)
            columns = {name: data[key] for key, name in keys.items()}
            columns.update(derived_columns(store, req.obs, data, metas[index]))
            prov = provenance_text(metas[index], index, info)
            for t in range(len(data["action"])):
                frame: dict[str, Any] = {name: col[t] for name, col in columns.items()}
                frame["task"] = tasks[index]
                frame[PROVENANCE] = prov
                dataset.add_frame(frame)
            dataset.save_episode()
            frames += len(data["action"])
            if on_episode is not None:
                on_episode(n, len(req.episodes), frames)
    finally:
        dataset.finalize()
    seconds = time.perf_counter() - start
    _check_written(dataset, len(req.episodes), frames)
    return {
        "episodes": len(req.episodes),
        "frames": frames,
        "features": list(features),
        "seconds": seconds,
    }


def episode_columns(data: dict[str, np.ndarray], actions: str) -> dict[str, np.ndarray]:
    """An episode's arrays as exported: with ``actions`` ``label``, ``action`` (T, A) is
    the episode's ``action_label`` (and that key is gone)."""
    if actions != "label":
        return data
    out = {k: v for k, v in data.items() if k != "action_label"}
    out["action"] = data["action_label"]
    return out


def derived_columns(
    store: EpisodeStore, obs: str, data: dict[str, np.ndarray], meta: EpisodeMeta
) -> dict[str, np.ndarray]:
    """The columns an episode's export adds from its ``task_state`` (T, 3): the keypoints
    (T, 16) float32 and ``next.*`` (T, 1), where :func:`writes_env_state` and
    :func:`writes_next` say so."""
    out: dict[str, np.ndarray] = {}
    if writes_env_state(store, obs):
        out[ENV_STATE] = keypoints(data["task_state"]).astype(np.float32)
    if writes_next(store):
        out.update(next_columns(data["task_state"], meta.score))
    return out


def _tasks(req: WriteRequest, metas: list[EpisodeMeta]) -> dict[int, str]:
    """Task string of each exported episode: ``req.task``, the episode's, or the store's."""
    fallback = str(req.store.attrs.get("task", ""))
    out = {}
    for i in req.episodes:
        task = req.task or metas[i].task or fallback
        if not task:
            raise FactoryError(
                f'episode {i} of {req.store.path} has no task string; pass --task "..."'
            )
        out[i] = task
    return out


def writer_options(req: WriteRequest) -> dict[str, Any]:
    """Keyword arguments of ``LeRobotDataset.create`` for the encoder and image writer."""
    if req.video is None:
        return {"image_writer_threads": IMAGE_WRITER_THREADS}
    from lerobot.configs import RGBEncoderConfig

    crf = req.video.crf if req.video.crf is not None else DEFAULT_CRF[req.video.vcodec]
    opts: dict[str, Any] = {
        "rgb_encoder": RGBEncoderConfig(vcodec=req.video.vcodec, crf=crf),
        "encoder_threads": req.video.encoder_threads,
    }
    lengths = req.store.episode_lengths[list(req.episodes)]
    longest = int(lengths.max()) if len(lengths) else 1
    frame_bytes = sum(
        int(np.prod(req.store.schema.keys[k].shape)) for k in req.store.schema.image_keys
    )
    if longest * frame_bytes <= STREAMING_MAX_BYTES:
        opts.update(streaming_encoding=True, encoder_queue_maxsize=longest + 1)
    else:
        log.info("episodes of %d frames: encoding through PNG files", longest)
        opts["image_writer_threads"] = IMAGE_WRITER_THREADS
    return opts


def _check_written(dataset: Any, episodes: int, frames: int) -> None:
    """lerobot's own counts of the finished dataset must be what was written."""
    meta = dataset.meta
    if (meta.total_episodes, meta.total_frames) != (episodes, frames):
        raise RuntimeError(
            f"lerobot wrote {meta.total_episodes} episodes / {meta.total_frames} frames, "
            f"expected {episodes} / {frames}"
        )
