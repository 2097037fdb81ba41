"""What the LeRobot exporter and importer share: the lazy lerobot import, key names, and
the provenance record carried per frame.

Key mapping (store key -> LeRobot feature):

    image           -> observation.image            (the main camera)
    image_<camera>  -> observation.images.<camera>  (extra cameras)
    state           -> observation.state
    action          -> action
    <other>         -> <other>   (e.g. task_state: no "observation." prefix, so policies ignore it)

A store whose attrs name its ``cameras`` (main first; pile: ``["top", "side"]``) exports
its main camera as ``observation.images.<main>`` instead (``observation.images.top``). The
export writes the main camera first, and the import takes the first camera as ``image``
when there is no ``observation.image``, so the round trip gives ``image`` and
``image_<camera>`` back.

Derived from the store, not stored in it (the importer skips them in our own exports):
``observation.environment_state`` (the T's keypoints, from task_state's block pose) and
``next.reward`` / ``next.success`` / ``next.done`` (see :mod:`exporters.lerobot_next`).

Provenance travels as the string feature ``provenance``: one JSON object per frame (the
same for every frame of an episode; parquet's dictionary encoding stores it once).
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from factory.errors import FactoryError
from factory.store import EpisodeMeta
from factory.store.renames import RENAMED_KEYS

LEROBOT_VERSION = "0.6.1"
LEROBOT_INSTALL = f"uv sync (or pip install 'lerobot[dataset,training]=={LEROBOT_VERSION}')"
CODEBASE_VERSION = "v3.0"  # the LeRobotDataset format lerobot 0.6.1 writes and reads

MAIN_CAMERA = "observation.image"
CAMERA_PREFIX = "observation.images."
STATE = "observation.state"
ENV_STATE = "observation.environment_state"  # the T's keypoints, derived from task_state
ACTION = "action"
REWARD = "next.reward"  # lerobot.utils.constants' names
SUCCESS = "next.success"
DONE = "next.done"
NEXT = (REWARD, SUCCESS, DONE)
PROVENANCE = "provenance"
PROVENANCE_FORMAT = "demofactory.provenance"
PROVENANCE_VERSION = 1
RESERVED = frozenset(
    {"timestamp", "frame_index", "episode_index", "index", "task_index", "task", PROVENANCE}
)
VIDEO_BACKEND = "pyav"  # torchcodec needs system FFmpeg libraries; PyAV ships its own
_STORE_TO_FEATURE = {"image": MAIN_CAMERA, "state": STATE, "action": ACTION}
_FEATURE_TO_STORE = {v: k for k, v in _STORE_TO_FEATURE.items()}
_NON_KEY = re.compile(r"[^A-Za-z0-9_]+")


def require_lerobot() -> ModuleType:
    """``lerobot.datasets.lerobot_dataset``, or a one-line :class:`FactoryError` saying how
    to install it. Also quiets the console output of the encoders (FFmpeg, SVT-AV1) and of
    ``datasets``' progress bars: the CLI shows its own progress.
    """
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only
    try:
        module = importlib.import_module("lerobot.datasets.lerobot_dataset")
        av = importlib.import_module("av")
        hf_datasets = importlib.import_module("datasets")
    except ImportError as err:
        why = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise FactoryError(
            f"lerobot {LEROBOT_VERSION} with its dataset extra is not importable ({why}); "
            f"install it with: {LEROBOT_INSTALL}"
        ) from None
    av.logging.set_libav_level(av.logging.ERROR)
    hf_datasets.disable_progress_bars()
    return module


def feature_name(store_key: str, cameras: Sequence[str] = ()) -> str:
    """The LeRobot feature a store key is exported as (see the module docstring);
    ``cameras`` the store's named cameras, main first (``()``: one unnamed camera)."""
    if store_key == "image" and cameras:
        return CAMERA_PREFIX + cameras[0]
    if store_key in _STORE_TO_FEATURE:
        return _STORE_TO_FEATURE[store_key]
    if store_key.startswith("image_"):
        return CAMERA_PREFIX + store_key[len("image_") :]
    return store_key


def store_key(feature: str, main_camera: str | None = None) -> str | None:
    """The store key a LeRobot feature is imported as; ``None`` when it has no valid name.

    ``main_camera`` (a camera feature) becomes ``image``; other cameras ``image_<name>``.
    """
    if main_camera is not None and feature == main_camera:
        return "image"
    if feature in _FEATURE_TO_STORE and feature != MAIN_CAMERA:
        return _FEATURE_TO_STORE[feature]
    if feature == MAIN_CAMERA or feature.startswith(CAMERA_PREFIX):
        name = feature.removeprefix(CAMERA_PREFIX).removeprefix(MAIN_CAMERA)
        return "image_" + (_NON_KEY.sub("_", name).strip("_") or "main")
    key = _NON_KEY.sub("_", feature.removeprefix("observation.")).strip("_")
    return RENAMED_KEYS.get(key, key) if key[:1].isalpha() else None  # old exports: gt_state


def named_cameras(attrs: Mapping[str, Any]) -> list[str]:
    """A store's named cameras (its ``cameras`` attr, main first: ``["top", "side"]``);
    ``[]`` for a store of one unnamed camera (PushT) or a malformed attr."""
    cameras = attrs.get("cameras")
    if not isinstance(cameras, list) or not all(isinstance(c, str) and c for c in cameras):
        return []
    return list(cameras)


def provenance_text(meta: EpisodeMeta, store_episode: int, store_info: Mapping[str, Any]) -> str:
    """The per-frame provenance JSON of one exported episode."""
    record = {
        "format": PROVENANCE_FORMAT,
        "version": PROVENANCE_VERSION,
        "store_episode": store_episode,
        "meta": meta.to_json(),
        "store": dict(store_info),
    }
    return json.dumps(record, separators=(",", ":"), sort_keys=True)


def parse_provenance(text: str) -> dict[str, Any] | None:
    """The record written by :func:`provenance_text`, or ``None`` for anything else."""
    try:
        record = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != PROVENANCE_FORMAT:
        return None
    if not isinstance(record.get("meta"), dict):
        return None
    return record
