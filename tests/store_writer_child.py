"""Crash-test writer: appends deterministic episodes to a store until it is killed.

Usage: python tests/store_writer_child.py STORE SEED [MAX_EPISODES]

Creates STORE if it does not exist, prints "ready <n_episodes>" once it holds the writer
lock, then appends episodes and prints "committed <i>" (flushed) after each append returns.
Episode ``i`` is a pure function of ``i`` (see :func:`make_episode`), so the parent can check
every committed episode bit for bit. ``SEED`` only picks the episode lengths, so a kill lands
in small and in large (multi-chunk, ~10 ms+) writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from factory.store import EpisodeMeta, EpisodeStore, KeySpec, StoreSchema

H = W = 16
SCHEMA = StoreSchema(
    {
        "image": KeySpec((H, W, 3), "uint8"),
        "action": KeySpec((2,), "float32"),
        "state": KeySpec((2,), "float32"),
    }
)


def episode_length(i: int, seed: int) -> int:
    rng = np.random.default_rng([seed, i])
    if rng.random() < 0.35:
        return int(rng.integers(1500, 4000))  # large: many chunks, long write
    return int(rng.integers(1, 60))


def make_episode(i: int, length: int) -> dict[str, np.ndarray]:
    """Episode number ``i`` of ``length`` frames; image (T,16,16,3) u8, action/state (T,2)."""
    rng = np.random.default_rng(1000 + i)
    image = rng.integers(0, 256, size=(length, H, W, 3), dtype=np.uint8)
    image[:, 0, 0, 0] = i % 256  # episode id in every frame, easy to eyeball
    t = np.arange(length, dtype=np.float32)
    action = np.stack([t, np.full(length, i, np.float32)], axis=1)
    state = rng.random((length, 2), dtype=np.float32)
    return {"image": image, "action": action, "state": state}


def make_meta(i: int, length: int) -> EpisodeMeta:
    return EpisodeMeta(
        source="real",
        generator="crash_test",
        generator_params={"i": i},
        seed=i,
        task="crash",
        success=i % 3 == 0,
        score=float(i) / 7.0,
        wall_time_s=0.0,
        extra={"length": length},
    )


def append_and_report(store: EpisodeStore, i: int, length: int) -> None:
    """Append episode ``i`` of ``length`` frames, then tell the parent: "committed <i>"."""
    store.append_episode(make_episode(i, length), make_meta(i, length))
    print(f"committed {i}", flush=True)


def main() -> None:
    path = Path(sys.argv[1])
    seed = int(sys.argv[2])
    max_eps = int(sys.argv[3]) if len(sys.argv) > 3 else 10**9
    if path.exists():
        store = EpisodeStore.open(path, mode="a")
    else:
        store = EpisodeStore.create(path, SCHEMA, fps=10.0, action_meaning="test xy")
    print(f"ready {store.n_episodes}", flush=True)
    while store.n_episodes < max_eps:
        i = store.n_episodes
        append_and_report(store, i, episode_length(i, seed))
    store.close()


if __name__ == "__main__":
    main()
