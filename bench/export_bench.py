"""LeRobot export speed: ``factory export lerobot`` against a direct lerobot loop.

    uv run python bench/export_bench.py --store data/pusht_heldout.zarr --episodes 20

The store is only read. The baseline ("direct") is the loop a user would write by hand:
``LeRobotDataset.create`` with the same features and writer options as the export, then
``add_frame`` for every frame and ``save_episode`` per episode, over the same frames (and
the same task and provenance strings) already in RAM: reading the store is not timed for
it. The export is timed end to end (it reads the store itself). Also timed: the same
direct loop with lerobot's default writer options (PNG files, then one encode per
episode) and the same codec and CRF. After one untimed warm-up export, each round runs
the three once, rotating their order; medians are compared. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

from exporters.lerobot_common import (
    PROVENANCE,
    feature_name,
    provenance_text,
    require_lerobot,
)
from exporters.lerobot_export import (
    VideoOptions,
    WriteRequest,
    derived_columns,
    integer_fps,
    lerobot_features,
    store_info,
    writer_options,
)
from factory.store import EpisodeStore
from pipelines.export import ExportConfig, export_lerobot

REPO = "local/bench"


def direct_loop(
    store: EpisodeStore,
    episodes: list[tuple[dict[str, np.ndarray], str, str]],
    root: Path,
    options: dict[str, Any],
) -> float:
    """Seconds for create + add_frame/save_episode + finalize over in-RAM ``episodes``:
    ``(arrays, task, provenance text)``, the same values the export writes."""
    lerobot = require_lerobot()
    features = lerobot_features(store, video=True)
    start = time.perf_counter()
    ds = lerobot.LeRobotDataset.create(
        REPO, integer_fps(store), features, root=root, use_videos=True, **options
    )
    for data, task, prov in episodes:
        for t in range(len(data["action"])):
            frame = {name: column[t] for name, column in data.items()}
            frame["task"] = task
            frame[PROVENANCE] = prov
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("data/pusht_heldout.zarr"))
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--vcodec", default="libsvtav1")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="export_bench-"))
    try:
        with EpisodeStore.open(args.store) as store:
            indices = list(range(min(args.episodes, store.n_episodes)))
            episodes = _in_ram(store, indices)
            same, default = _options(store, indices, work, args.vcodec)
            runs: dict[str, Callable[[Path], float]] = {
                "direct": lambda out: direct_loop(store, episodes, out, dict(same)),
                "export": lambda out: _export(args.store, out, args.vcodec, len(indices)),
                "direct_default": lambda out: direct_loop(store, episodes, out, dict(default)),
            }
            runs["export"](work / "warmup")  # imports, caches: not timed
            times: dict[str, list[float]] = {k: [] for k in runs}
            for r in range(args.rounds):
                order = list(runs)[r % 3 :] + list(runs)[: r % 3]  # rotate the position
                for name in order:
                    times[name].append(runs[name](work / f"{name}{r}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    frames = sum(len(e[0]["action"]) for e in episodes)
    med = {k: statistics.median(v) for k, v in times.items()}
    per_round = [d / e for d, e in zip(times["direct"], times["export"], strict=True)]
    report = {
        "store": str(args.store),
        "episodes": len(indices),
        "frames": frames,
        "vcodec": args.vcodec,
        "rounds": args.rounds,
        "export_frames_per_s": round(frames / med["export"], 1),
        "direct_frames_per_s": round(frames / med["direct"], 1),
        "ratio": round(med["direct"] / med["export"], 3),
        "ratio_median_per_round": round(statistics.median(per_round), 3),
        "direct_default_frames_per_s": round(frames / med["direct_default"], 1),
        "ratio_vs_default_writer": round(med["direct_default"] / med["export"], 3),
        "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "load_avg_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(report))


def _in_ram(store: EpisodeStore, indices: list[int]) -> list[tuple[dict[str, Any], str, str]]:
    """(arrays, task, provenance text) of each episode: what the export writes, its
    derived columns (keypoints, ``next.*``) included under their feature names."""
    info, metas = store_info(store), store.all_meta()
    task = str(store.attrs.get("task", ""))
    out = []
    for i in indices:
        data = store.episode(i).to_dict()
        extra = derived_columns(store, "all", data, metas[i])
        arrays = {feature_name(k): v for k, v in data.items()} | extra
        out.append((arrays, metas[i].task or task, provenance_text(metas[i], i, info)))
    return out


def _options(
    store: EpisodeStore, indices: list[int], work: Path, vcodec: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Writer options: the export's own, and lerobot's defaults with the same codec/CRF."""
    req = WriteRequest(store, indices, work, REPO, VideoOptions(vcodec=vcodec))
    same = writer_options(req)
    default = {"rgb_encoder": same["rgb_encoder"]}
    same["video_backend"] = default["video_backend"] = "pyav"
    return same, default


def _export(store: Path, out: Path, vcodec: str, n: int) -> float:
    """Seconds for ``export_lerobot`` of the first ``n`` episodes, end to end."""
    cfg = ExportConfig(store=store, out=out, repo_id=REPO, vcodec=vcodec, episodes=f"0:{n}")
    start = time.perf_counter()
    export_lerobot(cfg)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
