"""Episode-store test data: a small schema, deterministic episodes and metadata."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

from factory.store import EpisodeMeta, EpisodeStore, KeySpec, StoreSchema

REPO = Path(__file__).resolve().parents[1]


def arr(group: zarr.Group, name: str) -> zarr.Array:
    node = group[name]
    assert isinstance(node, zarr.Array)
    return node


H = W = 16
LENGTHS = [3, 20, 7, 50, 16, 33]


def make_schema(h: int = H, w: int = W) -> StoreSchema:
    return StoreSchema(
        {
            "image": KeySpec((h, w, 3), "uint8"),
            "action": KeySpec((2,), "float32"),
            "state": KeySpec((2,), "float32"),
        }
    )


def make_episode(i: int, length: int) -> dict[str, np.ndarray]:
    """action[:, 0] = frame index in the episode, action[:, 1] = episode index i."""
    rng = np.random.default_rng(i)
    image = rng.integers(0, 256, size=(length, H, W, 3), dtype=np.uint8)
    image[:, 0, 0, 0] = i
    action = np.stack(
        [np.arange(length, dtype=np.float32), np.full(length, i, dtype=np.float32)], axis=1
    )
    state = rng.standard_normal((length, 2)).astype(np.float32)
    return {"image": image, "action": action, "state": state}


def make_meta(i: int) -> EpisodeMeta:
    return EpisodeMeta(
        source=["real", "world_model", "teleop"][i % 3],
        generator=f"gen{i % 2}",
        generator_params={"noise": 0.1 * i, "arr": np.arange(2)},
        seed=i,
        model_id=None if i % 2 else f"model-{i}",
        task="push the T",
        success=[True, False, None][i % 3],
        score=float(i) / 3,
        wall_time_s=1.5 * i,
        extra={"device": "cpu", "timing": {"step_ms": np.float32(2.5)}},
    )


def new_store(path: Path, **kw: object) -> EpisodeStore:
    return EpisodeStore.create(
        path,
        make_schema(),
        fps=10.0,
        action_meaning="agent target xy in [0, 512]",
        attrs={"env": "gym_pusht/PushT-v0", "resolution": [H, W]},
        **kw,  # type: ignore[arg-type]
    )
