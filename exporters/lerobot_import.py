"""Read a LeRobotDataset v3.0 through lerobot's reader into a new episode store.

Cameras become ``image`` (the main camera) and ``image_<name>``; ``action``,
``observation.state`` and other numeric features become store keys (see
:mod:`exporters.lerobot_common`). Episodes exported by demofactory get their original
:class:`~factory.store.EpisodeMeta` and store attributes back from the ``provenance``
feature; other datasets are recorded as ``source="real"``, ``generator="lerobot"``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from exporters.lerobot_common import (
    CAMERA_PREFIX,
    CODEBASE_VERSION,
    ENV_STATE,
    MAIN_CAMERA,
    NEXT,
    PROVENANCE,
    RESERVED,
    VIDEO_BACKEND,
    parse_provenance,
    require_lerobot,
    store_key,
)
from factory.errors import FactoryError
from factory.store import EpisodeMeta, EpisodeStore, KeySpec, StoreSchema
from factory.store.renames import RENAMED_ATTRS

log = logging.getLogger(__name__)

EpisodeCallback = Callable[[int, int, int], None]  # (episodes done, total, frames done)


@dataclass(frozen=True)
class KeyPlan:
    """Which LeRobot features become which store keys: ``cameras`` and ``numeric`` map
    feature -> store key; ``skipped`` lists features that are not imported."""

    cameras: dict[str, str]
    numeric: dict[str, str]
    skipped: list[str] = field(default_factory=list)


def check_version(root: Path) -> dict[str, Any]:
    """``meta/info.json`` of a LeRobot dataset at ``root`` whose format is v3.0.

    Raises :class:`FactoryError` for a missing folder, a folder that is not a LeRobot
    dataset, or a dataset of another format version.
    """
    info_path = root / "meta" / "info.json"
    if not root.is_dir():
        raise FactoryError(f"{root} does not exist; pass the folder of a LeRobot dataset")
    try:
        info = json.loads(info_path.read_text())
        version = str(info["codebase_version"])
    except (OSError, ValueError, KeyError, TypeError):
        raise FactoryError(
            f"{root} is not a LeRobot dataset (no readable meta/info.json with a codebase_version)"
        ) from None
    if version != CODEBASE_VERSION:
        raise FactoryError(
            f"{root} is a LeRobot {version} dataset; factory import reads {CODEBASE_VERSION} "
            "only: convert it first (python -m lerobot.scripts.convert_dataset_v21_to_v30)"
        )
    if not (root / "data").is_dir():
        raise FactoryError(f"{root} has no data/ folder; is the dataset complete?")
    return dict(info)


def open_dataset(root: Path) -> Any:
    """A read-only ``LeRobotDataset`` over the local folder ``root`` (no Hub access)."""
    lerobot = require_lerobot()
    try:
        return lerobot.LeRobotDataset(
            f"local/{root.name}", root=root, video_backend=VIDEO_BACKEND, return_uint8=True
        )
    except Exception as err:  # lerobot's own errors: a corrupt or partial dataset
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise FactoryError(
            f"{root} cannot be read as a LeRobot dataset ({type(err).__name__}: {first})"
        ) from None


def plan_keys(meta: Any, camera: str | None) -> KeyPlan:
    """Map the dataset's features to store keys; ``camera`` picks the only camera to import
    (stored as ``image``), else every camera is imported with the main one as ``image``."""
    cameras = [k for k in meta.camera_keys if k not in meta.depth_keys]
    if not cameras:
        raise FactoryError("the LeRobot dataset has no RGB camera; the store needs images")
    if camera is not None and camera not in cameras:
        raise FactoryError(f"no camera {camera!r} in the dataset; its cameras: {cameras}")
    main = camera or (MAIN_CAMERA if MAIN_CAMERA in cameras else cameras[0])
    chosen = [main] if camera is not None else cameras
    plan = KeyPlan(cameras={c: str(store_key(c, main)) for c in chosen}, numeric={})
    taken = set(plan.cameras.values())
    for name, ft in meta.features.items():
        if name in RESERVED or name in meta.camera_keys:
            continue
        if _derived(meta.features, name):
            plan.skipped.append(name)
            continue
        key = store_key(name)
        if ft["dtype"] in ("string", "language", "image", "video") or key is None or key in taken:
            plan.skipped.append(name)
            continue
        plan.numeric[name] = key
        taken.add(key)
    if "action" not in plan.numeric:
        raise FactoryError("the LeRobot dataset has no 'action' feature; the store needs actions")
    return plan


def _derived(features: dict[str, Any], name: str) -> bool:
    """Whether ``name`` is a column our export computes from the store rather than a
    store key: the keypoints of task_state's block pose, and ``next.*`` (a demofactory
    export's, marked by its provenance column)."""
    if name == ENV_STATE:
        return any(store_key(f) == "task_state" for f in features)
    return name in NEXT and PROVENANCE in features


def store_schema(meta: Any, plan: KeyPlan) -> StoreSchema:
    """Per-frame shapes and dtypes: cameras (H, W, 3) uint8, numeric features as declared."""
    keys: dict[str, KeySpec] = {}
    for name, key in plan.cameras.items():
        keys[key] = KeySpec(shape=_hwc(meta.features[name]), dtype="uint8")
    for name, key in plan.numeric.items():
        ft = meta.features[name]
        keys[key] = KeySpec(shape=tuple(ft["shape"]), dtype=np.dtype(ft["dtype"]).name)
    return StoreSchema(keys=keys)


def _hwc(ft: dict[str, Any]) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in ft["shape"])
    names = ft.get("names") or []
    if len(names) == 3 and names[0] in ("channel", "channels"):
        return shape[1], shape[2], shape[0]
    return shape[0], shape[1], shape[2]


def read_episode(dataset: Any, index: int, plan: KeyPlan) -> tuple[dict[str, np.ndarray], str, str]:
    """``({key: (T, ...)}, task, provenance text)`` of episode ``index``."""
    meta = dataset.meta
    ep = meta.episodes[index]
    start, stop = int(ep["dataset_from_index"]), int(ep["dataset_to_index"])
    columns = ["index", "timestamp", "task_index", *plan.numeric]
    if PROVENANCE in meta.features:
        columns.append(PROVENANCE)
    columns += [c for c in plan.cameras if meta.features[c]["dtype"] == "image"]
    rows = dataset.hf_dataset.with_format("numpy").select_columns(columns)[start:stop]
    if not np.array_equal(rows["index"], np.arange(start, stop)):
        raise FactoryError(f"episode {index}: frame index column does not match its metadata")
    data: dict[str, np.ndarray] = {}
    for name, key in plan.numeric.items():
        spec_shape = tuple(meta.features[name]["shape"])
        data[key] = np.asarray(rows[name]).reshape(stop - start, *spec_shape)
    for name, key in plan.cameras.items():
        if meta.features[name]["dtype"] == "image":
            data[key] = np.stack([np.asarray(img, dtype=np.uint8) for img in rows[name]])
        else:
            data[key] = _decode(dataset, index, name, rows["timestamp"])
    task = str(meta.tasks.index[int(rows["task_index"][0])])
    prov = str(rows[PROVENANCE][0]) if PROVENANCE in rows else ""
    return data, task, prov


def _decode(dataset: Any, index: int, name: str, timestamps: np.ndarray) -> np.ndarray:
    """(T, H, W, 3) uint8 frames of one camera and episode, decoded by lerobot in one pass."""
    from lerobot.datasets.video_utils import decode_video_frames

    meta = dataset.meta
    offset = float(meta.episodes[index][f"videos/{name}/from_timestamp"])
    path = dataset.root / meta.get_video_file_path(index, name)
    frames = decode_video_frames(
        path,
        [offset + float(t) for t in timestamps],
        dataset.tolerance_s,
        VIDEO_BACKEND,
        return_uint8=True,
    )
    return np.ascontiguousarray(frames.numpy().transpose(0, 2, 3, 1))


def episode_meta(index: int, task: str, prov: str, root: Path) -> EpisodeMeta:
    """The original meta of a demofactory episode, else a ``real``/``lerobot`` record."""
    record = parse_provenance(prov)
    if record is not None:
        return EpisodeMeta.from_json(record["meta"])
    return EpisodeMeta(
        source="real",
        generator="lerobot",
        task=task,
        extra={"lerobot_dataset": root.name, "lerobot_episode": index},
    )


def store_attrs(dataset: Any, root: Path, camera: str, plan: KeyPlan) -> dict[str, Any]:
    """``{"action_meaning", "attrs"}`` for the new store: the exporting store's when the
    dataset came from demofactory, else what the LeRobot metadata says (with the
    per-dimension names of each imported feature as ``<key>_names``)."""
    meta = dataset.meta
    source = {"root": str(root), "codebase_version": CODEBASE_VERSION, "camera": camera}
    record = None
    if PROVENANCE in meta.features and meta.total_frames > 0:
        first = dataset.hf_dataset.with_format("numpy").select_columns([PROVENANCE])[0]
        record = parse_provenance(str(first[PROVENANCE]))
    if record is not None and isinstance(record.get("store"), dict):
        info = record["store"]
        kept = {RENAMED_ATTRS.get(k, k): v for k, v in (info.get("attrs") or {}).items()}
        if "cameras" in kept:
            _keep_imported_cameras(kept, plan)
        return {
            "action_meaning": str(info.get("action_meaning", "")),
            "attrs": {**kept, "imported_from": source},
        }
    names = meta.features["action"].get("names")
    tasks = list(meta.tasks.index) if meta.tasks is not None else []
    attrs: dict[str, Any] = {"env": meta.robot_type or "lerobot", "imported_from": source}
    for name, key in plan.numeric.items():
        dims = _dimension_names(meta.features[name])
        if dims is not None:
            attrs[f"{key}_names"] = dims
    if tasks:
        attrs["task"] = str(tasks[0])
    return {"action_meaning": f"LeRobot feature 'action' (names: {names})", "attrs": attrs}


def _keep_imported_cameras(attrs: dict[str, Any], plan: KeyPlan) -> None:
    """Make the exporting store's ``cameras`` attr name the cameras imported, main first
    (``--camera`` imports one): each ``observation.images.<name>`` gives ``<name>``. The
    attr is dropped when an imported camera has no such name."""
    order = sorted(plan.cameras, key=lambda c: plan.cameras[c] != "image")
    names = [c.removeprefix(CAMERA_PREFIX) for c in order]
    if all(c.startswith(CAMERA_PREFIX) for c in order):
        attrs["cameras"] = names
    else:
        attrs.pop("cameras")


def _dimension_names(ft: dict[str, Any]) -> list[str] | None:
    """A 1-D feature's names: a list, or a dict holding one list (``{"motors": [...]}``)."""
    names = ft.get("names")
    if isinstance(names, dict) and len(names) == 1:
        names = next(iter(names.values()))
    shape = tuple(ft.get("shape") or ())
    if isinstance(names, list) and len(shape) == 1 and len(names) == shape[0]:
        return [str(n) for n in names]
    return None


def read_dataset(
    dataset: Any, plan: KeyPlan, out: EpisodeStore, root: Path, on_episode: EpisodeCallback | None
) -> int:
    """Append every episode of ``dataset`` to the open store ``out``; returns frames."""
    frames = 0
    total = int(dataset.meta.total_episodes)
    for i in range(total):
        data, task, prov = read_episode(dataset, i, plan)
        out.append_episode(data, episode_meta(i, task, prov, root))
        frames += len(data["action"])
        if on_episode is not None:
            on_episode(i + 1, total, frames)
    return frames
