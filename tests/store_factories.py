"""Episode-store test data: a small schema, deterministic episodes and metadata; a writer
process (:func:`start_child`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from factory.store import EpisodeMeta, EpisodeStore, KeySpec, StoreSchema

REPO = Path(__file__).resolve().parents[1]


def start_child(
    script: Path, *args: object, stderr: int | None = subprocess.PIPE
) -> subprocess.Popen[str]:
    """``python script args...`` from the repository root (on its PYTHONPATH), stdout (and by
    default stderr) piped as text: a writer process for the crash and durability tests."""
    return subprocess.Popen(
        [sys.executable, str(script), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )


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


def still_episode(world: Any, config: np.ndarray, steps: int) -> dict[str, np.ndarray]:
    """Ground-truth frames with the agent holding its position, clear of the block."""
    obs = world.reset(configs=config[None])
    frames, state, gt = [obs.frames[0]], [obs.state[0]], [obs.task_state[0]]
    for _ in range(steps - 1):
        obs = world.step(config[None, :2])
        frames.append(obs.frames[0])
        state.append(obs.state[0])
        gt.append(obs.task_state[0])
    return {
        "image": np.stack(frames),
        "action": np.tile(config[:2], (steps, 1)).astype(np.float32),
        "state": np.stack(state),
        "task_state": np.stack(gt),
    }
