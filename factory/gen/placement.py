"""Where ``factory generate``'s Ray workers run: the resources each one asks Ray for.

``--gpus-per-worker F`` (``gpus_per_worker``): None (the default) gives every worker one
whole GPU where the cluster has GPUs and ``--device`` is not ``cpu``, else
``cpus_per_worker`` CPUs; ``F > 0`` gives every worker ``F`` of a GPU (``F < 1``: that
many workers share one GPU, e.g. 0.25 puts four on each; above 1 Ray takes whole GPUs
only); ``0`` gives CPU workers. A plan that the cluster cannot hold is refused here, on
the driver, before any worker starts: Ray would otherwise leave the extra workers pending
for ever. Each GPU worker also takes ``cpus_per_worker`` CPUs.

Pure planning, no Ray: the driver (:mod:`pipelines.generate_ray`) reads the cluster's
resources and asks here; the worker's side, which device a worker uses for the GPU Ray
gave it, is :func:`pipelines.generate_ray.worker_device`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from factory.errors import FactoryError
from factory.gen.plan import GenerateConfig


def gpu_slots(node_gpus: Sequence[float], per_worker: float) -> int:
    """How many workers of ``per_worker`` GPUs the nodes hold (``node_gpus``: each node's
    GPU count). A fraction must fit inside one GPU, so a node of G GPUs holds
    ``G * floor(1 / per_worker)`` of them; whole GPUs: ``floor(G / per_worker)``."""
    if per_worker <= 1.0:
        per_gpu = math.floor(1.0 / per_worker + 1e-9)
        return sum(math.floor(g + 1e-9) * per_gpu for g in node_gpus)
    return sum(math.floor(g / per_worker + 1e-9) for g in node_gpus)


def check_gpus_per_worker(value: float | None, device: str = "auto") -> None:
    """Refuse a value Ray cannot schedule (negative, or above 1 and not whole) or one that
    contradicts ``--device`` (cpu with GPUs, cuda with none); before any work starts."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0:
        raise FactoryError(f"--gpus-per-worker must be >= 0, got {value:g}")
    if value > 1 and value != int(value):
        raise FactoryError(
            f"--gpus-per-worker {value:g}: above 1 Ray gives whole GPUs only; use a whole "
            "number or a fraction below 1"
        )
    if device == "cpu" and value > 0:
        raise FactoryError(f"--device cpu but --gpus-per-worker {value:g}; drop one of them")
    if device.startswith("cuda") and value == 0:
        raise FactoryError(f"--device {device} but --gpus-per-worker 0; drop one of them")


def worker_options(
    cfg: GenerateConfig, cluster: dict[str, float], node_gpus: Sequence[float]
) -> dict[str, Any]:
    """The ``ray.remote`` options of every worker (num_gpus, num_cpus, scheduling), for a
    cluster of ``cluster`` total resources whose nodes have ``node_gpus`` GPUs each."""
    asked = cfg.gpus_per_worker
    check_gpus_per_worker(asked, cfg.device)
    has_gpu = cluster.get("GPU", 0) >= 1
    use_gpu = bool(asked) if asked is not None else has_gpu and cfg.device != "cpu"
    if cfg.device.startswith("cuda") and not has_gpu:
        raise FactoryError(f"--device {cfg.device} but the Ray cluster has no GPU; use auto")
    need_cpus = cfg.workers * cfg.cpus_per_worker
    if cluster.get("CPU", 0) < need_cpus:
        raise FactoryError(
            f"--workers {cfg.workers} need {need_cpus:g} CPUs but the "
            f"Ray cluster has {cluster.get('CPU', 0):g}; use fewer workers"
        )
    if not use_gpu:
        return {"num_cpus": cfg.cpus_per_worker, "scheduling_strategy": "SPREAD"}
    per = asked or 1.0
    slots = gpu_slots(node_gpus, per)
    if cfg.workers > slots:
        raise FactoryError(
            f"--workers {cfg.workers} at {per:g} GPU each but the Ray cluster's "
            f"{cluster.get('GPU', 0):g} GPUs hold {slots}; use fewer workers or a smaller "
            "--gpus-per-worker"
        )
    return {"num_gpus": per, "num_cpus": cfg.cpus_per_worker, "scheduling_strategy": "SPREAD"}
