"""``factory bench rollout``: how fast the world model rolls out.

    factory bench rollout --json
    factory bench rollout --model runs/v2 --device cpu --steps 300 --json

Batch 1 is the interactive case (teleoperation): the median wall time of one full step
(dynamics + decode + probe, frames copied back to the host) over ``steps`` steps, as FPS.
Batches 10, 16 and 64 are the generation case (10 is lerobot-eval's ``--eval.batch_size``
in the env plugin's target): frames per second over the same number of steps. Each batch
size is warmed up first and rolled out under ``play``-like random actions from
ground-truth initial frames. On CUDA the step is also timed under bf16 autocast
(``fps_batch1_bf16``, ``throughput_bf16``) so its benefit is measured, not assumed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from factory.device import resolve_device
from factory.envs import make_world
from factory.envs.model_world import world_state
from factory.model.files import load_model
from factory.model.protocol import RolloutModel
from factory.model.registry import world_of

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class RolloutBenchRequest:
    """One ``factory bench rollout`` call."""

    model: Path | None = None
    device: str = "auto"
    baseline: Path | None = None
    """Another model directory timed at batch 1 in the same run (``fps_ratio_vs_baseline``)."""
    steps: int = 300
    warmup: int = 10
    batches: tuple[int, ...] = (10, 16, 64)
    seed: int = 0


def _context(model: RolloutModel, batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Ground-truth initial frames (batch, 1, H, W, 3) of the model's world (PushT, pile)
    at the model's resolution and their world states (batch, 1, S)."""
    h = model.config.image_shape[0]
    world = make_world(world_of(model.config), batch_size=min(batch, 4), resolution=h)
    try:
        obs = world.reset(seeds=np.arange(seed, seed + world.batch_size))
    finally:
        world.close()
    states = world_state(obs)
    return (
        np.resize(obs.frames, (batch, *obs.frames.shape[1:]))[:, None],
        np.resize(states, (batch, *states.shape[1:])),
    )


def _step_times(model: RolloutModel, batch: int, steps: int, warmup: int, seed: int) -> np.ndarray:
    """Seconds per step (steps,) of a batch-``batch`` rollout, after ``warmup`` steps."""
    rng = np.random.default_rng(seed)
    frames, states = _context(model, batch, seed)
    model.start(frames, None, seed=seed, states=states)
    target = rng.uniform(100, 412, size=(batch, 2)).astype(np.float32)
    times = np.empty(steps)
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    for i in range(warmup + steps):
        target = np.clip(target + rng.normal(0, 8, size=target.shape), 0, 512).astype(np.float32)
        sync()
        t0 = time.perf_counter()
        model.step(target)  # frames come back to the host inside step()
        sync()
        if i >= warmup:
            times[i - warmup] = time.perf_counter() - t0
    return times


def _measure(model: RolloutModel, req: RolloutBenchRequest, progress: Progress | None) -> dict:
    """fps_batch1 and throughput for the model's current precision setting."""
    t1 = _step_times(model, 1, req.steps, req.warmup, req.seed)
    out: dict[str, Any] = {"fps_batch1": float(1.0 / np.median(t1)), "throughput": {}}
    for i, b in enumerate(req.batches):
        if progress is not None:
            progress("rollout", i + 1, len(req.batches) + 1)
        tb = _step_times(model, b, req.steps, req.warmup, req.seed)
        out["throughput"][str(b)] = float(b * len(tb) / tb.sum())
    return out


def run_rollout_bench(req: RolloutBenchRequest, on_progress: Progress | None = None) -> dict:
    """The benchmark as one JSON-able dict (keys: device, fps_batch1, throughput, ...)."""
    from factory.errors import FactoryError

    if req.steps <= 0:
        raise FactoryError(f"--steps must be positive, got {req.steps}")
    device = resolve_device(req.device)
    model, model_id = load_model(req.model, device)
    if not model.has_task_reader:
        raise FactoryError(
            f"{model_id} has no probe part and no task head; the rollout bench times one"
        )
    result: dict[str, Any] = {
        "model": model_id,
        "kind": model.kind,
        "device": _device_name(model.device),
        "torch_threads": torch.get_num_threads(),
        "steps": req.steps,
    }
    result.update(_measure(model, req, on_progress))
    if req.baseline is not None:
        base, base_id = load_model(req.baseline, device)
        fps = float(1.0 / np.median(_step_times(base, 1, req.steps, req.warmup, req.seed)))
        result["baseline"] = {"model": base_id, "kind": base.kind, "fps_batch1": fps}
        result["fps_ratio_vs_baseline"] = result["fps_batch1"] / fps
    b1 = result["fps_batch1"]
    result["throughput_ratio"] = {k: v / b1 for k, v in result["throughput"].items()}
    if model.device.type == "cuda":
        model.use_bf16 = True
        bf16 = _measure(model, req, on_progress)
        model.use_bf16 = False
        result["fps_batch1_bf16"] = bf16["fps_batch1"]
        result["throughput_bf16"] = bf16["throughput"]
    return result


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"cpu ({torch.get_num_threads()} threads)"
