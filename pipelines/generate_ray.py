"""Ray side of ``factory generate``: worker actors, the job queue, and fault tolerance.

Each worker actor holds one model replica (one GPU where the cluster has GPUs, or the
share ``--gpus-per-worker`` asks for, else ``cpus_per_worker`` CPUs:
:mod:`factory.gen.placement`) and runs a :class:`factory.gen.RolloutEngine` that pulls jobs
from one shared queue actor as its slots free up, streaming each finished episode back
(a Ray streaming generator). The driver is the only writer. When a worker dies, a
replacement starts (up to ``max_restarts``); the jobs it had taken are found by seed once
the queue runs dry (whatever never reached the writer) and queued again, so the store
ends with exactly the planned episodes, none twice.

The model (and a policy checkpoint) travel to the workers through Ray's object store (as
bytes: :mod:`factory.model.shipping`), so only the driver needs the model directory, the
output store and any ``--source`` store.

A worker runs on the GPU Ray gave it, or on the CPU when Ray gave it none
(:func:`worker_device`); one given a GPU where torch has no CUDA refuses to start, and the
run stops with that one line, rather than silently generating on the CPU.
"""

from __future__ import annotations

import logging
import os
import pickle
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from factory.errors import FactoryError
from factory.gen import GeneratedEpisode, GenJob
from factory.model.shipping import model_bytes, pack_dir, unpack_dir
from pipelines.ray_auth import prepare_local_start

if TYPE_CHECKING:  # types only: a worker process need not import the planning modules
    from factory.gen.plan import GeneratePlan
    from factory.gen.robustness import RobustConfig
    from factory.gen.writer import Writer

log = logging.getLogger(__name__)


def worker_device(requested: str, gpu_ids: list[str], cuda: bool, node: str = "") -> str:
    """The torch device of a worker that asked for ``requested`` (auto | cpu | cuda[:N])
    and was given GPUs ``gpu_ids`` by Ray, where ``cuda`` says whether torch sees CUDA.

    Given a GPU: ``cuda`` (Ray's CUDA_VISIBLE_DEVICES shows the worker its own GPU only,
    as device 0), or a :class:`FactoryError` where torch has no CUDA. Given none: ``cpu``
    (``--device cuda`` without a GPU is refused before any worker starts).
    """
    if gpu_ids:
        if not cuda:
            where = f" on node {node[:12]}" if node else ""
            raise FactoryError(
                f"Ray gave a generate worker GPU {','.join(gpu_ids)}{where} but torch there "
                "has no CUDA (torch.cuda.is_available() is False: a CPU-only torch or no "
                "NVIDIA driver); fix that node, or run with --gpus-per-worker 0"
            )
        return "cuda"
    if requested.startswith("cuda"):
        raise FactoryError(f"--device {requested} but Ray gave this worker no GPU")
    return "cpu"


def placement() -> dict[str, Any]:
    """Where the calling Ray worker runs: its node id and the GPU ids Ray gave it."""
    import ray

    ctx = ray.get_runtime_context()
    gpus = [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])]
    return {"node": ctx.get_node_id(), "gpus": gpus}


WARM_GENERATORS = {"pusht": "play", "pile": "pile_play"}
"""World -> the generator a worker warms up with (any other world: ``hold_still``)."""


class GenWorker:
    """One model replica and its rollout engine (wrapped by ``ray.remote`` at run time).

    A worker that cannot use the device Ray gave it keeps the reason and raises it from
    :meth:`ready` (a :class:`FactoryError` the driver reports as one line), not from its
    constructor (Ray would report a dead actor with a traceback).
    """

    def __init__(
        self,
        model_files: dict[str, bytes],
        model_id: str,
        batch_size: int,
        seed: int,
        device: str,
        threads: int,
        policy_files: dict[str, bytes] | None = None,
        policy_label: str | None = None,
        success_score: float | None = None,
        robust: RobustConfig | None = None,
        mean_files: list[dict[str, bytes]] | None = None,
    ) -> None:
        import torch

        from factory.gen import RolloutEngine
        from factory.model import load_model_dir

        torch.set_num_threads(max(1, threads))
        self.error: str | None = None
        where = placement()
        try:
            device = worker_device(device, where["gpus"], torch.cuda.is_available(), where["node"])
        except FactoryError as err:
            self.error = str(err)
            return
        self.device = device
        self._tmp = tempfile.TemporaryDirectory(prefix="demofactory-gen-")
        root = Path(self._tmp.name)
        model = load_model_dir(unpack_dir(model_files, root / "model"), device=device)
        if mean_files:  # generate in the mean of the model's dynamics and the judges'
            from factory.gen.judges import with_mean_dynamics

            judges = [unpack_dir(f, root / f"judge{i}") for i, f in enumerate(mean_files)]
            model = with_mean_dynamics(model, judges)
        self.policy_dir = str(unpack_dir(policy_files, root / "policy")) if policy_files else None
        self.policy_label = policy_label
        self.engine = RolloutEngine(
            model,
            self._make_generator,
            batch_size=batch_size,
            seed=seed,
            model_id=model_id,
            success_score=success_score,
            robust=robust,
        )
        self._warm_up(batch_size)

    def _warm_up(self, batch_size: int) -> None:
        """Run B two-step play episodes of the model's world and (PushT) build the
        expert's stroke tables: imports, allocations, first passes and caches happen now,
        in start-up, not in the first real episodes."""
        import factory.generators.replay  # noqa: F401  (import now, not on the first job)
        from factory.generators.expert import ExpertGenerator

        world = self.engine.world_name
        if world == "pusht":
            ExpertGenerator().planner.warm_strokes()  # the default expert's strokes, ~0.4 s
        play = WARM_GENERATORS.get(world, "hold_still")
        warm = [GenJob(i, play, {}, 2) for i in range(batch_size)]
        for _ in self.engine.run(warm):
            pass

    def _make_generator(self, name: str, **params: Any) -> Any:
        from factory.generators import make_generator

        if name == "policy" and self.policy_dir is not None:
            params = {**params, "path": self.policy_dir, "label": self.policy_label}
            params.setdefault("device", self.device)
        return make_generator(name, **params)

    def ready(self) -> dict[str, Any]:
        """{device, node, gpus}, once the model is loaded; raises why it could not be."""
        if self.error is not None:
            raise FactoryError(self.error)
        return {"device": self.device, **placement()}

    def run(self, queue: Any) -> Iterator[GeneratedEpisode]:
        """Generate jobs taken from ``queue`` until it is empty; yield each episode."""
        yield from self.engine.run(_drain(queue))


def _drain(queue: Any) -> Iterator[GenJob]:
    from ray.util.queue import Empty

    while True:
        try:
            yield pickle.loads(queue.get_nowait())
        except Empty:
            return


def _enqueue(queue: Any, jobs: list[GenJob]) -> None:
    """Queue jobs as pickled bytes: the queue actor then never imports factory (and torch)
    to unpickle them, which cost seconds per run."""
    queue.put_nowait_batch([pickle.dumps(job, protocol=5) for job in jobs])


def ray_env_defaults() -> None:
    """Environment for Ray, set before ``import ray`` (this module calls it on import).

    Ray 2.60 re-runs ``uv run`` for every worker when the driver was started by ``uv run``
    (it rebuilt the whole venv per worker: 20+ s); the workers use this venv instead.
    """
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


ray_env_defaults()


def connect(address: str | None) -> bool:
    """Join ``address`` (or start a local Ray, token authentication on: see
    :mod:`pipelines.ray_auth`); True when this call started Ray."""
    import ray
    from ray._private import ray_constants

    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ENABLE_UV_RUN_RUNTIME_ENV") == "0":
        # Ray read the flag when it was first imported, perhaps before this module set it.
        ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING}
    if address is None:
        prepare_local_start()  # token auth stays on; the token file owner-only
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise FactoryError(f"cannot connect to Ray at {address}: {err}") from None
    return True


def _worker_options(cfg: Any) -> dict[str, Any]:
    """Each worker's Ray resources on this cluster: see
    :func:`factory.gen.placement.worker_options`."""
    import ray

    from factory.gen.placement import worker_options

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    node_gpus = [float(n.get("Resources", {}).get("GPU", 0)) for n in nodes]
    return worker_options(cfg, ray.cluster_resources(), node_gpus)


class Pool:
    """The worker actors, their streams and the shared job queue. ``worker_cls``: the actor
    class (:class:`GenWorker`; a test may place stand-ins that load no model)."""

    def __init__(self, plan: GeneratePlan, worker_cls: type = GenWorker) -> None:
        import ray
        from ray.util.queue import Queue

        cfg = plan.cfg
        self.plan, self.cfg = plan, cfg
        self.options = _worker_options(cfg)
        self.model_ref = ray.put(model_bytes(plan.model_dir))
        self.policy_ref = ray.put(pack_dir(cfg.policy)) if cfg.policy is not None else None
        self.mean_ref = ray.put([model_bytes(Path(j)) for j in cfg.mean_dynamics])
        self.queue = Queue(actor_options={"num_cpus": 0})
        self.queue.size()  # wait until the queue actor runs (startup, not generation)
        self.actor_cls: Any = ray.remote(worker_cls)
        self.run_id = uuid.uuid4().hex[:8]
        self.workers: dict[str, Any] = {}
        self.streams: dict[str, Any] = {}
        self.spawned = 0
        self.restarts = 0
        self.requeued = 0
        self.nodes: set[str] = set()
        self.placement: dict[str, dict[str, Any]] = {}  # worker name -> {device, node, gpus}

    def spawn(self, n: int = 1) -> list[str]:
        """Start ``n`` workers (in parallel) and wait until each has loaded its model."""
        names = []
        for _ in range(n):
            name = f"demofactory-gen-{self.run_id}-{self.spawned}"
            threads = max(1, int(self.options.get("num_cpus", 1)))
            self.workers[name] = self.actor_cls.options(name=name, **self.options).remote(
                self.model_ref,
                self.plan.model_id,
                self.cfg.batch_size,
                self.cfg.seed + 1000 * self.spawned,
                self.cfg.device,
                threads,
                self.policy_ref,
                None if self.cfg.policy is None else str(self.cfg.policy),
                self.cfg.success_score,
                self.cfg.robust,
                self.mean_ref,
            )
            self.spawned += 1
            names.append(name)
        infos = _get_or_refuse([self.workers[n].ready.remote() for n in names])
        self.nodes.update(info["node"] for info in infos)
        self.placement.update(zip(names, infos, strict=True))
        return names

    def start_stream(self, name: str) -> None:
        actor = self.workers[name]
        self.streams[name] = actor.run.options(num_returns="streaming").remote(self.queue)

    def lose(self, name: str) -> None:
        """Forget a dead worker; start a replacement while the restart budget lasts."""
        self.workers.pop(name, None)
        self.streams.pop(name, None)
        budget = self.cfg.max_restarts if self.cfg.max_restarts is not None else self.cfg.workers
        if self.restarts >= budget:
            if not self.workers:
                raise FactoryError(
                    f"every generate worker died ({self.restarts} restarts); the episodes "
                    "already written are kept: rerun the command with --append to resume"
                )
            return
        self.restarts += 1
        log.warning("worker %s died; starting a replacement", name)
        self.start_stream(self.spawn()[0])

    def close(self) -> None:
        import ray

        for actor in self.workers.values():
            ray.kill(actor)
        self.queue.shutdown(force=True)


def _get_or_refuse(refs: list[Any]) -> list[Any]:
    """``ray.get(refs)``; a :class:`FactoryError` raised in a worker comes back as one."""
    import ray
    from ray.exceptions import RayTaskError

    try:
        return list(ray.get(refs))
    except RayTaskError as err:
        if isinstance(err.cause, FactoryError):
            raise FactoryError(str(err.cause)) from None
        raise


def _next_episode(pool: Pool, name: str) -> GeneratedEpisode | None:
    """The next episode of worker ``name``'s stream; None when it ended or the worker died."""
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    try:
        ref = next(pool.streams[name])
        return ray.get(ref)
    except StopIteration:
        pool.streams.pop(name, None)
    except RayActorError:
        pool.lose(name)
    except RayTaskError as err:
        cause = err.as_instanceof_cause()
        if isinstance(cause, FactoryError) or isinstance(err.cause, FactoryError):
            raise FactoryError(str(err.cause)) from None
        raise
    return None


def run_on_ray(plan: GeneratePlan, writer: Writer) -> dict[str, Any]:
    """Generate ``plan.jobs`` on Ray workers, writing through ``writer``; run info."""
    import ray

    started_ray = connect(plan.cfg.ray_address)
    t0 = time.perf_counter()
    pool = Pool(plan)
    try:
        pool.spawn(plan.cfg.workers)
        plan.output()  # the workers are up: only now create a new output store
        startup = time.perf_counter() - t0
        t1 = time.perf_counter()
        writer.start = t1
        _dispatch(pool, writer, plan.jobs)
        generate_s = time.perf_counter() - t1
    finally:
        pool.close()
        if started_ray:
            ray.shutdown()
    return {
        "generate_s": generate_s,
        "startup_s": startup,
        "workers": plan.cfg.workers,
        "worker_restarts": pool.restarts,
        "requeued": pool.requeued,
        "worker_nodes": len(pool.nodes),
        "device": "gpu" if "num_gpus" in pool.options else "cpu",
        "gpus_per_worker": pool.options.get("num_gpus", 0),
        "placement": [{"worker": name, **info} for name, info in pool.placement.items()],
    }


def _dispatch(pool: Pool, writer: Writer, jobs: list[GenJob]) -> None:
    """Queue the jobs, stream episodes into the writer, and requeue what a dead worker lost."""
    import ray

    todo = list(jobs)
    while todo:
        _enqueue(pool.queue, todo)
        for name in list(pool.workers):
            pool.start_stream(name)
        while pool.streams:
            names = list(pool.streams)
            ready, _ = ray.wait([pool.streams[n] for n in names], num_returns=1, timeout=1.0)
            for name in names:
                if name in pool.streams and pool.streams[name] in ready:
                    ep = _next_episode(pool, name)
                    if ep is not None:
                        writer.add(ep, name, tuple(pool.workers), pool.restarts)
        todo = [j for j in jobs if j.seed not in writer.seen]
        if todo:
            pool.requeued += len(todo)
            log.warning("requeueing %d episodes lost with dead workers", len(todo))
