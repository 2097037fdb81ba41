"""Print a digest of a store's low-dimensional arrays, to check that two machines made
the same episodes (seeds give bit-identical episodes):

    python scripts/store_digest.py STORE [KEY ...]     # default keys: action state task_state

One JSON line: the store's frame and episode counts and, per key, the SHA-256 of its
bytes (first 16 hex digits).
"""

from __future__ import annotations

import hashlib
import json
import sys

from factory.store.episode_store import EpisodeStore


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: store_digest.py STORE [KEY ...]", file=sys.stderr)
        return 2
    store = EpisodeStore.open(argv[0])
    keys = argv[1:] or [k for k in ("action", "state", "task_state") if k in store.schema.keys]
    arrays = store.load(keys)
    digest = {k: hashlib.sha256(arrays[k].tobytes()).hexdigest()[:16] for k in keys}
    out = {"store": argv[0], "frames": store.n_frames, "episodes": store.n_episodes, **digest}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
