"""Durability-test writer: appends many small deterministic episodes to a new store.

Usage: python tests/store_durable_child.py STORE SEED MAX_EPISODES [durable]

Creates STORE (durable with the 4th argument), prints "ready" once it holds the writer lock,
then appends episodes and prints "committed <i>" (flushed) after each append returns.
Episode ``i`` is ``store_writer_child.make_episode(i, length(i, SEED))``, so the parent can
check every episode bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from store_writer_child import SCHEMA, append_and_report

from factory.store import EpisodeStore


def length(i: int, seed: int) -> int:
    """Frames of episode ``i``: 1 to 40 (many episodes, each within one or two chunks)."""
    return int(np.random.default_rng([seed, i]).integers(1, 41))


def main() -> None:
    path, seed, max_eps = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    durable = len(sys.argv) > 4 and sys.argv[4] == "durable"
    store = EpisodeStore.create(path, SCHEMA, fps=10.0, action_meaning="test", durable=durable)
    print("ready", flush=True)
    for i in range(max_eps):
        append_and_report(store, i, length(i, seed))
    store.close()


if __name__ == "__main__":
    main()
