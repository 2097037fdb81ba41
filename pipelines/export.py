"""LeRobot export and import: episode store <-> LeRobotDataset v3.0, through lerobot.

:func:`export_lerobot` writes the selected episodes of a store into a new dataset folder
(written beside it under a temporary name, renamed into place when complete, so a failed
export leaves nothing at ``out``). :func:`import_lerobot` turns a LeRobot v3.0 dataset into
a new store. Neither modifies its source.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporters.lerobot_common import require_lerobot
from exporters.lerobot_export import (
    DEFAULT_CRF,
    VideoOptions,
    WriteRequest,
    exported_keys,
    integer_fps,
    lerobot_features,
    write_dataset,
)
from exporters.lerobot_import import (
    check_version,
    open_dataset,
    plan_keys,
    read_dataset,
    store_attrs,
    store_schema,
)
from factory.errors import FactoryError
from factory.store import EpisodeStore
from factory.store.finite import non_finite_episodes, shown

Progress = Callable[[int, int, int], None]  # (episodes done, episodes total, frames done)
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class ExportConfig:
    """What ``factory export lerobot`` does.

    ``episodes``: a selection such as ``"0:10,15"`` (half-open ranges and indices; None:
    all); ``only_success`` then keeps the successful ones. ``video`` False stores PNG images.
    ``obs``: what besides ``action`` is written (:data:`~exporters.lerobot_export.OBS_TYPES`);
    ``actions``: which actions ``action`` holds (:data:`~exporters.lerobot_export.ACTIONS`:
    the executed ones, or a DART store's labels).
    """

    store: Path
    out: Path
    repo_id: str
    task: str | None = None
    video: bool = True
    vcodec: str = "libsvtav1"
    crf: int | None = None
    encoder_threads: int | None = None
    only_success: bool = False
    episodes: str | None = None
    overwrite: bool = False
    obs: str = "all"
    actions: str = "executed"


@dataclass(frozen=True)
class ImportConfig:
    """What ``factory import lerobot`` does: ``root`` (a LeRobot v3.0 dataset folder) into
    the new store ``store``; ``camera`` imports only that camera."""

    root: Path
    store: Path
    camera: str | None = None


def parse_selection(text: str | None, n: int) -> list[int]:
    """Sorted unique episode indices of ``"0:10,15,20:"`` (half-open ranges) in ``[0, n)``."""
    if text is None:
        return list(range(n))
    chosen: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        try:
            if ":" in part:
                lo, hi = part.split(":", 1)
                a, b = int(lo) if lo.strip() else 0, int(hi) if hi.strip() else n
                if a < 0 or b > n or a >= b:
                    raise IndexError(part)
                chosen.update(range(a, b))
            else:
                i = int(part)
                if not 0 <= i < n:
                    raise IndexError(part)
                chosen.add(i)
        except ValueError:
            raise FactoryError(
                f"--episodes {text!r}: {part!r} is not an index or a range like 0:10"
            ) from None
        except IndexError:
            raise FactoryError(
                f"--episodes {text!r}: {part!r} is out of range; the store has {n} episodes "
                f"(indices 0..{n - 1})"
            ) from None
    return sorted(chosen)


def select_episodes(store: EpisodeStore, text: str | None, only_success: bool) -> list[int]:
    """The store indices to export (:class:`FactoryError` if none are left)."""
    if store.n_episodes == 0:
        raise FactoryError(f"{store.path} holds no episodes to export")
    chosen = parse_selection(text, store.n_episodes)
    if only_success:
        metas = store.all_meta()
        chosen = [i for i in chosen if metas[i].success is True]
        if not chosen:
            raise FactoryError("--only-success left no episodes: none of those succeeded")
    return chosen


def check_finite(
    store: EpisodeStore, episodes: list[int], keys: list[str], actions: str = "executed"
) -> None:
    """Refuse (one line, before anything is written) episodes whose exported numbers hold
    a NaN or inf: a policy trained on the dataset would learn them. ``keys`` are the
    exported store keys (:func:`exported_keys`), and the task state that the environment
    state is derived from; with ``actions`` ``label`` the action column comes from
    ``action_label``."""
    numeric = [k for k in keys if k not in store.schema.image_keys]
    if "task_state" in store.schema.keys and "task_state" not in numeric:
        numeric.append("task_state")  # the environment state's keypoints come from it
    if actions == "label":
        numeric = ["action_label" if k == "action" else k for k in numeric]
    ends = store.episode_ends
    for key, values in store.load(numeric).items():
        bad = sorted(set(non_finite_episodes(values, ends)) & set(episodes))
        if bad:
            raise FactoryError(
                f"{store.path} episode(s) {shown(bad)} hold non-finite {key} values (NaN or "
                "inf); export the others with --episodes"
            )


def check_out(cfg: ExportConfig) -> None:
    """Refuse a malformed repo id, an existing ``out`` (unless ``overwrite`` and it is a
    LeRobot dataset or empty) and an ``out`` that holds the source store."""
    if not REPO_ID.match(cfg.repo_id):
        raise FactoryError(f"--repo-id {cfg.repo_id!r} must look like local/NAME")
    out, store = cfg.out.resolve(), cfg.store.resolve()
    if out == store or out in store.parents:
        raise FactoryError(f"{cfg.out} holds the source store; choose another output folder")
    if not cfg.out.exists():
        return
    if not cfg.overwrite:
        raise FactoryError(f"{cfg.out} already exists; pass --overwrite to replace it")
    is_dataset = (cfg.out / "meta" / "info.json").is_file()
    if not cfg.out.is_dir() or not (is_dataset or not any(cfg.out.iterdir())):
        raise FactoryError(
            f"{cfg.out} is not a LeRobot dataset; --overwrite only replaces one, "
            "so remove it yourself or choose another folder"
        )


def export_lerobot(cfg: ExportConfig, on_progress: Progress | None = None) -> dict[str, Any]:
    """Export a store's episodes as a LeRobotDataset v3.0 at ``cfg.out``; returns a summary.

    Every bad input raises :class:`FactoryError` before anything is written.
    """
    video = VideoOptions(cfg.vcodec, cfg.crf, cfg.encoder_threads) if cfg.video else None
    check_out(cfg)
    with EpisodeStore.open(cfg.store, mode="r") as store:
        episodes = select_episodes(store, cfg.episodes, cfg.only_success)
        lerobot_features(store, cfg.video, cfg.obs, cfg.actions)
        check_finite(store, episodes, exported_keys(store, cfg.obs, cfg.actions), cfg.actions)
        fps = integer_fps(store)
        require_lerobot()
        tmp = cfg.out.parent / f".{cfg.out.name}.exporting-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        req = WriteRequest(store, episodes, tmp, cfg.repo_id, video, cfg.task, cfg.obs, cfg.actions)
        try:
            result = write_dataset(req, on_progress)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    _publish(tmp, cfg.out)
    return {
        "out": str(cfg.out),
        "repo_id": cfg.repo_id,
        "episodes": result["episodes"],
        "frames": result["frames"],
        "fps": fps,
        "video": cfg.video,
        "obs": cfg.obs,
        "actions": cfg.actions,
        "vcodec": cfg.vcodec if cfg.video else None,
        "crf": (cfg.crf if cfg.crf is not None else DEFAULT_CRF[cfg.vcodec]) if cfg.video else None,
        "features": result["features"],
        "seconds": round(result["seconds"], 3),
        "frames_per_s": round(result["frames"] / max(result["seconds"], 1e-9), 1),
        "store_episodes": episodes,
    }


def _publish(tmp: Path, out: Path) -> None:
    """Move the finished dataset ``tmp`` to ``out``, replacing what ``check_out`` allowed."""
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.replaced-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def import_lerobot(cfg: ImportConfig, on_progress: Progress | None = None) -> dict[str, Any]:
    """Turn the LeRobot v3.0 dataset at ``cfg.root`` into a new store; returns its summary.

    On any failure the partly written new store is removed; the dataset is only read.
    """
    if cfg.store.exists():
        raise FactoryError(f"{cfg.store} already exists; choose a new store path")
    check_version(cfg.root)
    dataset = open_dataset(cfg.root)
    plan = plan_keys(dataset.meta, cfg.camera)
    main = next(c for c, k in plan.cameras.items() if k == "image")
    described = store_attrs(dataset, cfg.root, main, plan)
    store = EpisodeStore.create(
        cfg.store,
        store_schema(dataset.meta, plan),
        fps=float(dataset.meta.fps),
        action_meaning=described["action_meaning"],
        attrs=described["attrs"],
    )
    try:
        with store:
            frames = read_dataset(dataset, plan, store, cfg.root, on_progress)
            summary = store.summary()
    except BaseException:
        shutil.rmtree(cfg.store, ignore_errors=True)
        raise
    return {
        "store": summary,
        "frames": frames,
        "cameras": plan.cameras,
        "features": plan.numeric,
        "skipped": plan.skipped,
    }
