"""``factory generate``: whole datasets of episodes inside the world model, on Ray.

The run is planned by :func:`factory.gen.plan.plan_generate` (every bad input refused,
before Ray starts or any episode runs) and its episodes go through one
:class:`factory.gen.writer.Writer`, in this process; workers (Ray actors, one model
replica each) run :class:`factory.gen.RolloutEngine` and stream episodes back
(:mod:`pipelines.generate_ray`). A new output store is created only once the workers are
up, so a run that fails before (a Ray cluster that cannot be joined, too few CPUs or GPUs,
a worker that cannot load the model) leaves nothing behind.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from factory.errors import FactoryError
from factory.gen.plan import GenerateConfig, GeneratePlan, plan_generate
from factory.gen.writer import GenProgress, Writer, summarise
from pipelines.generate_ray import run_on_ray


def check_ray_address(address: str | None) -> None:
    """Refuse an address whose head does not answer on TCP (``auto`` is left to Ray)."""
    if address is None or address == "auto":
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise FactoryError(f"--ray-address must be HOST:PORT or auto, got {address!r}")
    try:
        with socket.create_connection((host, int(port)), timeout=3.0):
            pass
    except OSError as err:
        raise FactoryError(
            f"no Ray cluster answers at {address} ({err.strerror or err}); start one with "
            "`ray start --head` there, or omit --ray-address for a local run"
        ) from None


def prepare_generate(cfg: GenerateConfig) -> GeneratePlan:
    """Refuse an unreachable ``--ray-address``, then plan the run (:func:`plan_generate`)
    and check what the workers would only find after Ray starts (:func:`check_before_ray`)."""
    check_ray_address(cfg.ray_address)
    plan = plan_generate(cfg)
    try:
        check_before_ray(plan)
    except BaseException:
        plan.close()
        raise
    return plan


def check_before_ray(plan: GeneratePlan) -> None:
    """Load the model once on the CPU and build each replay job's generator, so unreadable
    weights and non-finite replayed actions are refused before Ray starts."""
    from factory.generators import make_generator
    from factory.model import load_model_dir

    load_model_dir(plan.model_dir, device="cpu")
    for job in plan.jobs:
        if job.generator != "replay":
            continue
        try:
            make_generator("replay", **job.generator_params)
        except FactoryError as err:
            where = f"{plan.cfg.source} episode {job.extra.get('source_episode')}"
            raise FactoryError(f"{where}: {err}") from None


def execute_generate(
    plan: GeneratePlan, on_progress: Callable[[GenProgress], None] | None = None
) -> dict[str, Any]:
    """Run the planned episodes on Ray workers; each one is committed as it arrives.

    Closes the store and returns the summary (see :func:`factory.gen.writer.summarise`).
    """
    writer = Writer(plan, on_progress)
    failed = True
    try:
        info = run_on_ray(plan, writer) if plan.jobs else {"generate_s": 0.0}
        summary = summarise(writer, plan, info)
        failed = False
        return summary
    finally:
        plan.close(failed)


def run_generate(
    cfg: GenerateConfig, on_progress: Callable[[GenProgress], None] | None = None
) -> dict[str, Any]:
    """:func:`prepare_generate` then :func:`execute_generate` (what ``factory demo`` calls)."""
    return execute_generate(prepare_generate(cfg), on_progress)


def summary_line(summary: dict[str, Any], out: Path) -> str:
    """The human-readable one-line summary of a run."""
    s = summary["store"]
    return (
        f"generated {summary['tried']} episodes, kept {summary['kept']} "
        f"({summary['skipped']} already there); success rate in the model "
        f"{summary['success_rate']:.0%}; {summary['frames_per_s']:.0f} frames/s on "
        f"{summary.get('workers', 0)} worker(s); {out}: {s['episodes']} episodes, "
        f"{s['frames']} frames"
    )
