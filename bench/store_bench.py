"""Episode store throughput: appends vs np.save+fsync, durable (fsync) appends, window reads.

    .venv/bin/python bench/store_bench.py [--frames N] [--resolution 96] [--no-variants]

``fsync`` times the same appends into a durable store (``create(durable=True)``, what
``--fsync`` makes) in the same reps, interleaved, and reports episodes/s against the default.

Frames look like PushT renders (white board, static green goal T, a grey T block and a blue
agent disc that move, anti-aliased edges) plus a sparse +-2 pixel noise, like a learned
decoder's output; the mix compresses about 6x with zstd. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from factory.store import EpisodeMeta, EpisodeStore, KeySpec, StoreSchema, appender


def _t_mask(xx: np.ndarray, yy: np.ndarray, cx: float, cy: float, ang: float, s: float) -> Any:
    """Boolean mask of a T shape centred at (cx, cy), rotated by ``ang``, scale ``s`` px."""
    c, n = np.cos(ang), np.sin(ang)
    u = (xx - cx) * c + (yy - cy) * n
    v = -(xx - cx) * n + (yy - cy) * c
    bar = (np.abs(u) < 2.0 * s) & (np.abs(v + 1.5 * s) < 0.5 * s)
    stem = (np.abs(u) < 0.5 * s) & (v > -1.0 * s) & (v < 2.0 * s)
    return bar | stem


def pusht_like_frames(n: int, res: int, rng: np.random.Generator, noise: float = 0.25) -> Any:
    """(n, res, res, 3) uint8 frames: PushT-like scene, 2x supersampled, sparse noise."""
    ss = 2 * res
    yy, xx = np.mgrid[0:ss, 0:ss].astype(np.float32) + 0.5
    s = ss / 16.0
    goal = _t_mask(xx, yy, ss / 2, ss / 2, np.pi / 4, s)
    agent = rng.uniform(0.2, 0.8, 2) * ss
    block = np.array([*(rng.uniform(0.3, 0.7, 2) * ss), rng.uniform(0, 2 * np.pi)])
    out = np.empty((n, res, res, 3), dtype=np.uint8)
    for i in range(n):
        agent = np.clip(agent + rng.normal(0, ss / 60, 2), s, ss - s)
        block = block + np.array([*rng.normal(0, ss / 300, 2), rng.normal(0, 0.02)])
        img = np.full((ss, ss, 3), 255.0, dtype=np.float32)
        img[goal] = (144, 238, 144)
        img[_t_mask(xx, yy, block[0], block[1], block[2], s)] = (119, 136, 153)
        img[(xx - agent[0]) ** 2 + (yy - agent[1]) ** 2 < (0.9 * s) ** 2] = (65, 105, 225)
        out[i] = img.reshape(res, 2, res, 2, 3).mean(axis=(1, 3)).round().astype(np.uint8)
    if noise > 0:
        jitter = rng.integers(-2, 3, size=out.shape, dtype=np.int16)
        jitter *= rng.random(out.shape[:3], dtype=np.float32)[..., None] < noise
        out = np.clip(out.astype(np.int16) + jitter, 0, 255).astype(np.uint8)
    return out


def make_episodes(frames: int, res: int, ep_len: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    eps = []
    left = frames
    while left > 0:
        t = min(ep_len, left)
        eps.append(
            {
                "image": pusht_like_frames(t, res, rng),
                "action": rng.uniform(0, 512, (t, 2)).astype(np.float32),
                "state": rng.uniform(0, 512, (t, 2)).astype(np.float32),
            }
        )
        left -= t
    return eps


def write_npsave(eps: list[dict[str, np.ndarray]], root: Path, keys: tuple[str, ...] = ()) -> float:
    """Seconds to np.save every key (or ``keys``) of every episode to its own file, with fsync."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t0 = time.perf_counter()
    for i, ep in enumerate(eps):
        for key, arr in ep.items():
            if keys and key not in keys:
                continue
            with open(root / f"{i:05d}_{key}.npy", "wb") as f:
                np.save(f, arr)
                f.flush()
                os.fsync(f.fileno())
    return time.perf_counter() - t0


def write_store(
    eps: list[dict[str, np.ndarray]],
    root: Path,
    schema: StoreSchema,
    direct: bool | None = None,
    **kw: Any,
) -> float:
    """Seconds to create a store and append every episode (close included).

    ``direct=False`` appends through zarr's own write pipeline instead of the store's
    direct chunk writer (same files, for comparison); None keeps the default
    (``DEMOFACTORY_STORE_DIRECT``, on unless set to 0).
    """
    shutil.rmtree(root, ignore_errors=True)
    meta = EpisodeMeta(source="world_model", generator="bench", seed=0)
    was = appender.DIRECT
    appender.DIRECT = was if direct is None else direct
    try:
        t0 = time.perf_counter()
        with EpisodeStore.create(root, schema, fps=10.0, action_meaning="xy", **kw) as st:
            for ep in eps:
                st.append_episode(ep, meta)
        return time.perf_counter() - t0
    finally:
        appender.DIRECT = was


def dir_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def windows_per_s(root: Path, batch: int, budget_s: float = 1.5) -> float:
    rng = np.random.default_rng(0)
    with EpisodeStore.open(root) as st:
        st.sample_windows(batch, 16, rng)  # warm up
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < budget_s:
            st.sample_windows(batch, 16, rng)
            n += batch
        return n / (time.perf_counter() - t0)


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=6000)
    ap.add_argument("--resolution", type=int, default=96)
    ap.add_argument("--episode-len", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="scratch dir (default: a temp dir)")
    ap.add_argument("--no-variants", action="store_true", help="skip codec/shard variants")
    return ap.parse_args()


def _write_times(
    eps: list[dict[str, np.ndarray]], scratch: Path, schema: StoreSchema, reps: int
) -> dict[str, list[float]]:
    """Seconds per rep for each writer, interleaved so all see the same machine load."""
    times: dict[str, list[float]] = {"np": [], "np_image": [], "store": [], "fsync": []}
    for _ in range(reps):
        times["np"].append(write_npsave(eps, scratch / "npy"))
        times["np_image"].append(write_npsave(eps, scratch / "npy", keys=("image",)))
        times["store"].append(write_store(eps, scratch / "store", schema))
        times["fsync"].append(write_store(eps, scratch / "fsync", schema, durable=True))
    return times


def _headline(
    eps: list[dict[str, np.ndarray]], store_dir: Path, times: dict[str, list[float]], raw_mb: float
) -> dict[str, Any]:
    """The store against np.save + fsync: write speed, size, durable appends, window reads."""
    n_frames = sum(len(e["action"]) for e in eps)
    np_s, store_s = statistics.median(times["np"]), statistics.median(times["store"])
    np_img_s = statistics.median(times["np_image"])
    image_mb = sum(e["image"].nbytes for e in eps) / 1e6
    image_disk = dir_bytes(store_dir / "data" / "image") / 1e6
    return {
        "frames": n_frames,
        "episodes": len(eps),
        "raw_mb": round(raw_mb, 2),
        "store": {
            "compression": "zstd",
            "chunk_frames": 16,
            "direct_chunk_writes": appender.DIRECT,
            "encoder_threads": appender.THREADS,
            "write_s": round(store_s, 3),
            "write_frames_per_s": round(n_frames / store_s),
            "write_mb_per_s": round(raw_mb / store_s, 1),
            "image_compression_ratio": round(image_mb / image_disk, 2),
            "disk_mb": round(dir_bytes(store_dir) / 1e6, 2),
        },
        "np_save_fsync": {
            "write_s": round(np_s, 3),
            "write_frames_per_s": round(n_frames / np_s),
            "write_mb_per_s": round(raw_mb / np_s, 1),
            "files_per_episode": 3,
            "image_only_write_frames_per_s": round(n_frames / np_img_s),
        },
        "fsync": fsync_result(times["fsync"], store_s, len(eps), n_frames),
        "write_ratio": round(np_s / store_s, 3),
        "write_ratio_vs_image_only_np_save": round(np_img_s / store_s, 3),
        "write_s_all_reps": {
            "store": [round(t, 3) for t in times["store"]],
            "np_save": [round(t, 3) for t in times["np"]],
        },
        "read_windows16_per_s": {
            "batch1": round(windows_per_s(store_dir, 1)),
            "batch32": round(windows_per_s(store_dir, 32)),
        },
    }


def main() -> None:
    args = _parse_args()
    res = args.resolution
    scratch = Path(tempfile.mkdtemp(prefix="store_bench_", dir=args.dir))
    schema = StoreSchema(
        {
            "image": KeySpec((res, res, 3), "uint8"),
            "action": KeySpec((2,), "float32"),
            "state": KeySpec((2,), "float32"),
        }
    )
    try:
        t0 = time.perf_counter()
        eps = make_episodes(args.frames, res, args.episode_len, seed=0)
        gen_s = time.perf_counter() - t0
        raw_mb = sum(a.nbytes for e in eps for a in e.values()) / 1e6
        times = _write_times(eps, scratch, schema, args.reps)
        result: dict[str, Any] = {"resolution": res, "episode_len": args.episode_len}
        result.update(_headline(eps, scratch / "store", times, raw_mb))
        result["gen_s"] = round(gen_s, 2)
        if not args.no_variants:
            np_s = statistics.median(times["np"])
            result["variants"] = run_variants(eps, scratch, schema, raw_mb, result["frames"], np_s)
        print(json.dumps(result))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def fsync_result(times: list[float], default_s: float, n_eps: int, n_frames: int) -> Any:
    """Durable appends (median of ``times``) against the default's ``default_s``."""
    fsync_s = statistics.median(times)
    return {
        "write_s": round(fsync_s, 3),
        "write_frames_per_s": round(n_frames / fsync_s),
        "episodes_per_s": round(n_eps / fsync_s, 2),
        "default_episodes_per_s": round(n_eps / default_s, 2),
        "episodes_per_s_ratio": round(default_s / fsync_s, 3),
        "write_s_all_reps": [round(t, 3) for t in times],
    }


def run_variants(
    eps: list[dict[str, np.ndarray]],
    scratch: Path,
    schema: StoreSchema,
    raw_mb: float,
    n_frames: int,
    np_s: float,
) -> dict[str, Any]:
    """Other codecs and sharding, same frames: write speed, size, window reads."""
    variants: dict[str, dict[str, Any]] = {
        "blosc-zstd": {"compression": "blosc-zstd"},
        "lz4": {"compression": "lz4"},
        "none": {"compression": "none"},
        "zstd_chunk32": {"chunk_frames": 32},
        "zstd_shard128": {"shard_frames": 128},
        "zstd_via_zarr_pipeline": {"direct": False},
    }
    out = {}
    for name, kw in variants.items():
        root = scratch / name
        t = statistics.median(write_store(eps, root, schema, **kw) for _ in range(2))
        out[name] = {
            "write_frames_per_s": round(n_frames / t),
            "write_ratio": round(np_s / t, 3),
            "disk_mb": round(dir_bytes(root) / 1e6, 2),
            "files": sum(1 for f in root.rglob("*") if f.is_file()),
            "read_windows16_batch32_per_s": round(windows_per_s(root, 32, budget_s=1.0)),
        }
        shutil.rmtree(root, ignore_errors=True)
    return out


if __name__ == "__main__":
    main()
