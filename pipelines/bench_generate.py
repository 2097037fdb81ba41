"""``factory bench generate``: batched generation against a batch-1 loop, same run.

    factory bench generate --json                          # the shipped model
    factory bench generate --model runs/model --episodes 32 --steps 50 --json
    factory bench generate --model runs/model --resolution 128 --device cuda --json

Every run generates the same episodes (seeds 0..N-1, the same generator and steps) with
the same model, each into its own fresh store through the single writer:

- ``batch1``: one process, a batch-1 ``ModelWorld`` stepped by ``run_episode``;
- ``engine``: one process, :class:`factory.gen.RolloutEngine` with ``--batch-size`` slots;
- ``ray_1`` / ``ray_2``: ``factory generate`` with 1 and 2 Ray workers (startup excluded);
- ``bare``: the model alone at ``--batch-size`` (``WorldModel.step`` on random actions: no
  generator, no writer, no Ray), ``steps`` timed steps after a short warm-up;
- ``ray_1_<other>``: ``ray_1`` again with the other scripted generator (play <-> expert),
  for the expert-vs-play comparison.

Each process or worker uses ``--threads`` torch threads. ``batched_fps`` is ``ray_1``'s
frames/s (the full ``factory generate`` path); ``ratio`` = batched_fps / batch1_fps;
``pipeline_ratio`` = batched_fps / bare_model_fps; ``expert_vs_play`` = expert frames/s
over play frames/s, both through ``factory generate`` with 1 worker: the median over
``--repeats`` interleaved play / expert pairs (each pair's ratio in
``expert_vs_play_runs``; every other pair runs the other generator first), since one pair
is timed over seconds of a shared machine. The default 128 episodes (6,400 frames per
run) time each side for about 12 s: at 32 (1,600 frames, about 3 s) three pairs in a row
on this 2-core CPU (light work beside it) gave 1.08, 0.59 and 0.62.
``--resolution R`` times a randomly initialised copy of the model's architecture at R px
(speed only; the weights do not change the work).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from factory.envs.model_world import ModelWorld
from factory.errors import FactoryError
from factory.gen import GenJob, RolloutEngine
from factory.gen.plan import GenerateConfig
from factory.generators import make_generator
from factory.model import build_part, load_model_dir, read_config, save_part
from factory.model.files import model_dir_or_default, model_identity
from factory.model.registry import kind_of
from factory.record import open_output
from factory.record.runner import run_episode
from factory.store import EpisodeStore
from pipelines.generate import run_generate

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class BenchConfig:
    """What the generate benchmark measures."""

    model: Path | None = None
    episodes: int = 128  # 6,400 frames a run: 32 (1,600) timed each side over ~3 s (noise)
    steps: int = 50
    batch_size: int = 16
    generator: str = "play"
    threads: int = 1
    resolution: int | None = None
    device: str = "cpu"
    repeats: int = 3  # play / expert pairs behind expert_vs_play (its median)


def _model_dir(cfg: BenchConfig, tmp: Path) -> Path:
    model_dir = model_dir_or_default(cfg.model)
    if cfg.resolution is None:
        return model_dir
    return resized_model(model_dir, cfg.resolution, tmp / f"model{cfg.resolution}")


def resized_model(model_dir: Path, resolution: int, dest: Path) -> Path:
    """A random-weight model with ``model_dir``'s architecture at ``resolution`` px."""
    cfg = read_config(model_dir)
    new = kind_of(cfg).resized(cfg, (resolution, resolution))
    for name in cfg.parts:
        new = save_part(dest, name, build_part(name, new), new, steps=0, data="bench")
    return dest


def _jobs(cfg: BenchConfig) -> list[GenJob]:
    return [GenJob(seed, cfg.generator, {}, cfg.steps) for seed in range(cfg.episodes)]


def _store(path: Path, resolution: int) -> EpisodeStore:
    from factory.envs.pusht import pusht_spec

    return open_output(path, pusht_spec(resolution), resolution, append=False)


def _batch1(cfg: BenchConfig, model_dir: Path, tmp: Path, progress: Progress) -> dict[str, Any]:
    model = load_model_dir(model_dir, device=cfg.device)
    world = ModelWorld(model, batch_size=1, seed=0)
    frames = 0
    with _store(tmp / "batch1.zarr", model.config.image_shape[0]) as store:
        start = time.perf_counter()
        for i, job in enumerate(_jobs(cfg)):
            gen = make_generator(job.generator)
            ep = run_episode(world, gen, job.seed, job.steps, source="world_model")
            store.append_episode(ep.data, ep.meta)
            frames += len(ep.data["action"])
            progress(i + 1, cfg.episodes, "batch-1 loop")
        seconds = time.perf_counter() - start
    world.close()
    return {"frames": frames, "seconds": seconds, "fps": frames / seconds}


def _engine(cfg: BenchConfig, model_dir: Path, tmp: Path, progress: Progress) -> dict[str, Any]:
    model = load_model_dir(model_dir, device=cfg.device)
    engine = RolloutEngine(model, make_generator, batch_size=cfg.batch_size, seed=0)
    frames = 0
    with _store(tmp / "engine.zarr", model.config.image_shape[0]) as store:
        start = time.perf_counter()
        for i, ep in enumerate(engine.run(_jobs(cfg))):
            store.append_episode(ep.data, ep.meta)
            frames += ep.frames
            progress(i + 1, cfg.episodes, f"engine batch {cfg.batch_size}")
        seconds = time.perf_counter() - start
    engine.close()
    return {"frames": frames, "seconds": seconds, "fps": frames / seconds}


def _bare(cfg: BenchConfig, model_dir: Path, progress: Progress) -> dict[str, Any]:
    """The model alone at the same batch: frames/s of ``WorldModel.step``."""
    from pipelines.bench_rollout import _step_times

    model = load_model_dir(model_dir, device=cfg.device)
    progress(0, 1, f"bare model, batch {cfg.batch_size}")
    times = _step_times(model, cfg.batch_size, cfg.steps, warmup=5, seed=0)
    progress(1, 1, f"bare model, batch {cfg.batch_size}")
    frames = cfg.batch_size * len(times)
    seconds = float(times.sum())
    return {"frames": frames, "seconds": seconds, "fps": frames / seconds}


def _ray(
    cfg: BenchConfig,
    model_dir: Path,
    tmp: Path,
    workers: int,
    progress: Progress,
    generator: str | None = None,
) -> dict[str, Any]:
    generator = generator or cfg.generator
    gcfg = GenerateConfig(
        out=tmp / f"ray{workers}-{generator}.zarr",
        generator=generator,
        episodes=cfg.episodes,
        model=model_dir,
        steps=cfg.steps,
        batch_size=cfg.batch_size,
        workers=workers,
        stop_on_success=False,
        device=cfg.device,
        cpus_per_worker=float(cfg.threads),
    )
    name = f"ray {workers} worker(s), {generator}"
    s = run_generate(gcfg, lambda p: progress(p.tried, p.total, name))
    return {
        "frames": s["frames_generated"],
        "seconds": s["generate_s"],
        "fps": s["frames_per_s"],
        "startup_s": s["startup_s"],
        "worker_restarts": s["worker_restarts"],
    }


def _two_workers_fit(cfg: BenchConfig) -> bool:
    """Whether 2 workers fit the local Ray: 2 GPUs on a GPU run, 2 CPUs otherwise."""
    import ray

    res = ray.cluster_resources()
    if cfg.device != "cpu":
        return res.get("GPU", 0) >= 2
    return res.get("CPU", 0) >= 2 * cfg.threads


def run_bench(cfg: BenchConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Run the four measurements; one JSON-able dict (``batched_fps``, ``batch1_fps``,
    ``ratio`` and the details)."""
    if min(cfg.episodes, cfg.steps, cfg.batch_size, cfg.threads, cfg.repeats) <= 0:
        raise FactoryError(
            "--episodes, --steps, --batch-size, --threads and --repeats must be positive"
        )
    report: Progress = progress or (lambda _d, _t, _n: None)
    torch.set_num_threads(cfg.threads)
    with tempfile.TemporaryDirectory(prefix="bench-generate-") as name:
        tmp = Path(name)
        model_dir = _model_dir(cfg, tmp)
        batch1 = _batch1(cfg, model_dir, tmp, report)
        engine = _engine(cfg, model_dir, tmp, report)
        bare = _bare(cfg, model_dir, report)
        other = _OTHER.get(cfg.generator)
        ray1, ray1_other, pairs, ray2 = _ray_runs(cfg, model_dir, tmp, report, other)
        model_id = model_identity(model_dir)
        resolution = read_config(model_dir).image_shape[0]
    return {
        "bench": "generate",
        "model_id": model_id,
        "resolution": resolution,
        "cpus": os.cpu_count(),
        "device": cfg.device,
        "threads": cfg.threads,
        "generator": cfg.generator,
        "episodes": cfg.episodes,
        "steps": cfg.steps,
        "batch_size": cfg.batch_size,
        "batch1_fps": batch1["fps"],
        "engine_fps": engine["fps"],
        "batched_fps": ray1["fps"],
        "ratio": ray1["fps"] / batch1["fps"],
        "engine_ratio": engine["fps"] / batch1["fps"],
        "workers_2_fps": ray2["fps"] if ray2 else None,
        "workers_2_vs_1": ray2["fps"] / ray1["fps"] if ray2 else None,
        "bare_model_fps": bare["fps"],
        "pipeline_ratio": ray1["fps"] / bare["fps"],
        **_expert_vs_play(cfg.generator, pairs),
        "runs": {
            "batch1": batch1,
            "engine": engine,
            "bare": bare,
            "ray_1": ray1,
            "ray_2": ray2,
            f"ray_1_{other}": ray1_other,
        },
    }


_OTHER = {"play": "expert", "expert": "play"}


def _ray_runs(
    cfg: BenchConfig, model_dir: Path, tmp: Path, report: Progress, other: str | None
) -> tuple[dict[str, Any], dict[str, Any] | None, list[Any], dict[str, Any] | None]:
    """The Ray measurements: one worker (and the other generator, interleaved over
    ``cfg.repeats``), then two workers where they fit: ``(ray1, ray1_other, pairs, ray2)``."""
    from pipelines.generate_ray import connect

    started = connect(None)
    try:
        ray1 = _ray(cfg, model_dir, tmp, 1, report)
        ray1_other = _ray(cfg, model_dir, tmp, 1, report, other) if other else None
        pairs: list[Any] = [(ray1, ray1_other)] if ray1_other else []
        for k in range(1, cfg.repeats if other else 0):  # interleaved, same conditions
            tag = tmp / f"repeat{k}"
            tag.mkdir()
            assert other is not None  # the range is empty without one
            pairs.append(_pair(cfg, model_dir, tag, report, other, swap=k % 2 == 1))
        ray2 = _ray(cfg, model_dir, tmp, 2, report) if _two_workers_fit(cfg) else None
    finally:
        if started:
            import ray

            ray.shutdown()
    return ray1, ray1_other, pairs, ray2


def _pair(
    cfg: BenchConfig, model_dir: Path, tmp: Path, report: Progress, other: str, swap: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One (``cfg.generator``, ``other``) pair of 1-worker runs; ``swap`` runs ``other``
    first, so that alternate pairs cancel a drift of the machine's speed over the pair."""
    if swap:
        second = _ray(cfg, model_dir, tmp, 1, report, other)
        return _ray(cfg, model_dir, tmp, 1, report), second
    first = _ray(cfg, model_dir, tmp, 1, report)
    return first, _ray(cfg, model_dir, tmp, 1, report, other)


def _expert_vs_play(
    generator: str, pairs: list[tuple[dict[str, Any], dict[str, Any]]]
) -> dict[str, Any]:
    """``play_fps``, ``expert_fps`` (medians) and ``expert_vs_play``: the median over the
    interleaved (``generator``, other) pairs of expert fps / play fps, with every pair's
    ratio in ``expert_vs_play_runs`` (None where not measured)."""
    if not pairs:
        none = {"play_fps": None, "expert_fps": None, "expert_vs_play": None}
        return {**none, "expert_vs_play_runs": []}
    first = 0 if generator == "play" else 1
    play = [p[first]["fps"] for p in pairs]
    expert = [p[1 - first]["fps"] for p in pairs]
    ratios = [e / q for e, q in zip(expert, play, strict=True)]
    return {
        "play_fps": float(np.median(play)),
        "expert_fps": float(np.median(expert)),
        "expert_vs_play": float(np.median(ratios)),
        "expert_vs_play_runs": ratios,
    }


def render_bench(result: dict[str, Any]) -> None:
    """A small table of the bench result on stderr."""
    from rich.table import Table

    from pipelines.console import err_console

    table = Table(title=f"generate bench ({result['model_id']}, {result['resolution']} px)")
    for col in ("run", "frames/s", "vs batch-1"):
        table.add_column(col)
    base = result["batch1_fps"]
    for run, fps in (
        ("batch-1 loop", base),
        (f"engine, batch {result['batch_size']}", result["engine_fps"]),
        ("factory generate, 1 worker", result["batched_fps"]),
        ("factory generate, 2 workers", result["workers_2_fps"]),
        (f"bare model, batch {result['batch_size']}", result["bare_model_fps"]),
        ("factory generate, 1 worker, expert", result["expert_fps"]),
        ("factory generate, 1 worker, play", result["play_fps"]),
    ):
        if fps is not None:
            table.add_row(run, f"{fps:.1f}", f"{fps / base:.2f}x")
    err_console.print(table)
