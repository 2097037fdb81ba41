"""``factory generate``: whole datasets of episodes inside the world model, on Ray.

Episode ``i`` uses seed ``seed + i``. With ``append``, episodes whose generator and seed
are already in the output store are skipped (the rule of ``factory collect``), so rerunning
a command resumes it. Every episode goes through one writer, this process; workers (Ray
actors, one model replica each) run :class:`factory.gen.RolloutEngine` and stream episodes
back (:mod:`pipelines.generate_ray`). All bad input is refused in :func:`prepare_generate`,
before Ray starts or any episode runs; a new output store is created only once the workers
are up, so a run that fails before (a Ray cluster that cannot be joined, too few CPUs or
GPUs, a worker that cannot load the model) leaves nothing behind.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from factory.envs.pusht import pusht_spec
from factory.errors import FactoryError
from factory.gen import GeneratedEpisode, GenJob, perturb_actions
from factory.generators import GENERATORS
from factory.model import read_config
from factory.model.files import model_dir_or_default, model_identity
from factory.model.registry import kind_of
from factory.record import check_output, done_episodes, open_output
from factory.store import EpisodeStore
from factory.world import WorldSpec

log = logging.getLogger(__name__)

"""Parts every generation needs; the task state also needs a probe or a task head."""


@dataclass(frozen=True)
class GenerateConfig:
    """What ``factory generate`` does. ``model`` None: the shipped model."""

    out: Path
    generator: str = "expert"
    episodes: int = 10
    model: Path | None = None
    source: Path | None = None  # replay: the store whose episodes are replayed
    policy: Path | None = None  # policy: a LeRobot checkpoint directory
    steps: int = 200
    batch_size: int = 16
    workers: int = 1
    ray_address: str | None = None
    seed: int = 0
    only_success: bool = False
    append: bool = False
    stop_on_success: bool | None = None  # default: True for expert
    replay_noise: float = 0.0  # px std of Gaussian noise on replayed actions
    replay_time_warp: float = 0.0  # replay speed drawn from U(1 - w, 1 + w)
    context: int = 1  # replay: real frames (and their actions) the model starts from
    device: str = "auto"
    cpus_per_worker: float = 1.0
    max_restarts: int | None = None  # replacement workers for dead ones (default: workers)
    generator_params: dict[str, Any] = field(default_factory=dict)


@dataclass
class GeneratePlan:
    """Validated inputs, the output store and the episodes still to generate.

    ``store`` is the opened output when it already existed (``--append``); a new one is
    created by the first :meth:`output` call, once the work can start.
    """

    cfg: GenerateConfig
    model_dir: Path
    model_id: str
    spec: WorldSpec
    store: EpisodeStore | None
    jobs: list[GenJob]

    @property
    def skipped(self) -> int:
        return self.cfg.episodes - len(self.jobs)

    def output(self) -> EpisodeStore:
        """The output store, created on first use."""
        if self.store is None:
            res = self.spec.image_shape[0]
            self.store = open_output(self.cfg.out, self.spec, res, self.cfg.append)
        return self.store

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


@dataclass(frozen=True)
class GenProgress:
    """Where a run stands, after each episode arrives at the writer."""

    written: int
    tried: int
    total: int
    successes: int
    frames: int
    elapsed_s: float
    worker: str  # the worker that generated this episode
    worker_names: tuple[str, ...]
    restarts: int


def _check_numbers(cfg: GenerateConfig) -> None:
    checks = {
        "--episodes": cfg.episodes,
        "--batch-size": cfg.batch_size,
        "--workers": cfg.workers,
        "--steps": cfg.steps,
        "--context": cfg.context,
    }
    for flag, value in checks.items():
        if value <= 0:
            raise FactoryError(f"{flag} must be positive, got {value}")
    if not 0.0 <= cfg.replay_time_warp < 1.0:
        raise FactoryError(f"--time-warp must be in [0, 1), got {cfg.replay_time_warp}")
    if cfg.replay_noise < 0.0:
        raise FactoryError(f"--noise must be >= 0, got {cfg.replay_noise}")
    if cfg.device not in ("auto", "cpu") and not cfg.device.startswith("cuda"):
        raise FactoryError(f"--device must be auto, cpu or cuda, got {cfg.device!r}")
    if cfg.generator not in GENERATORS:
        raise FactoryError(
            f"unknown generator {cfg.generator!r}; valid: {', '.join(sorted(GENERATORS))}"
        )


def _generator_action_dim(cfg: GenerateConfig, resolution: int) -> int:
    if cfg.generator == "policy":
        from factory.generators.policy import policy_action_dim

        if cfg.policy is None:
            raise FactoryError("--generator policy needs --policy PATH (a LeRobot checkpoint)")
        return policy_action_dim(cfg.policy)
    if cfg.generator == "replay":
        if cfg.source is None:
            raise FactoryError("--generator replay needs --source STORE (the episodes to replay)")
        with EpisodeStore.open(cfg.source, mode="r") as src:
            return int(np.prod(src.schema.keys["action"].shape))
    return pusht_spec(resolution).action_dim


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
    """Validate everything and open the output store, before any work starts."""
    _check_numbers(cfg)
    model_dir = model_dir_or_default(cfg.model)
    mcfg = read_config(model_dir)
    missing = kind_of(mcfg).missing_for_rollout(mcfg)
    if missing:
        raise FactoryError(f"model {model_dir} lacks part(s) {', '.join(missing)}; train them")
    resolution = mcfg.image_shape[0]
    gen_dim = _generator_action_dim(cfg, resolution)
    if gen_dim != mcfg.action_dim:
        raise FactoryError(
            f"generator {cfg.generator!r} makes {gen_dim}-D actions but model {model_dir} "
            f"takes {mcfg.action_dim}-D actions; use a matching model or generator"
        )
    check_ray_address(cfg.ray_address)
    base_jobs = _replay_jobs(cfg, resolution) if cfg.generator == "replay" else None
    spec = pusht_spec(resolution)
    check_output(cfg.out, spec, resolution, cfg.append)
    jobs = plan_jobs(cfg, done_episodes(cfg.out), base_jobs)
    model_id = model_identity(model_dir)
    # an existing store is opened (and locked) now; a new one waits for the workers
    store = open_output(cfg.out, spec, resolution, cfg.append) if cfg.out.exists() else None
    return GeneratePlan(cfg, model_dir, model_id, spec, store, jobs)


def plan_jobs(
    cfg: GenerateConfig, done: set[tuple[str, int | None]], replay: list[GenJob] | None = None
) -> list[GenJob]:
    """The episodes still to generate: seeds ``seed .. seed+N-1`` not yet ``done``."""
    stop = cfg.stop_on_success if cfg.stop_on_success is not None else cfg.generator == "expert"
    params = dict(cfg.generator_params)
    if cfg.generator == "policy":
        params.setdefault("path", str(cfg.policy))
    jobs = []
    for i in range(cfg.episodes):
        seed = cfg.seed + i
        if (cfg.generator, seed) in done:
            continue
        if replay is not None:
            jobs.append(_perturbed(cfg, replay[i % len(replay)], seed, stop))
        else:
            jobs.append(GenJob(seed, cfg.generator, params, cfg.steps, stop))
    return jobs


def _replay_jobs(cfg: GenerateConfig, resolution: int) -> list[GenJob]:
    """One template job per ``--source`` episode: its real first frames and its actions."""
    assert cfg.source is not None
    out = []
    with EpisodeStore.open(cfg.source, mode="r") as src:
        shape = tuple(src.schema.keys["image"].shape) if "image" in src.schema.keys else None
        if shape != (resolution, resolution, 3):
            raise FactoryError(
                f"{cfg.source} holds frames of shape {shape}, the model needs "
                f"({resolution}, {resolution}, 3); replay a store at the model's resolution"
            )
        has_gt = "gt_state" in src.schema.keys and "state" in src.schema.keys
        for ep in src:
            if ep.length <= cfg.context:
                continue
            actions = np.asarray(ep["action"], np.float32)
            k = cfg.context
            states = (
                np.concatenate([ep["state"][:k, :2], ep["gt_state"][:k]], axis=1)
                if has_gt
                else None
            )
            config = states[0] if states is not None else []
            out.append(
                GenJob(
                    seed=0,
                    generator="replay",
                    generator_params={"actions": actions[k - 1 :], "config": np.asarray(config)},
                    steps=len(actions) - k + 1,
                    context_frames=np.asarray(ep["image"][:k]),
                    context_actions=actions[: k - 1] if k > 1 else None,
                    context_states=None if states is None else states.astype(np.float32),
                    extra={"source": str(cfg.source), "source_episode": ep.index},
                )
            )
    if not out:
        raise FactoryError(f"{cfg.source} holds no episode longer than --context {cfg.context}")
    return out


def _perturbed(cfg: GenerateConfig, template: GenJob, seed: int, stop: bool) -> GenJob:
    """The template replay with this seed's perturbation of its actions."""
    params = dict(template.generator_params)
    knobs = {"noise": cfg.replay_noise, "time_warp": cfg.replay_time_warp}
    if cfg.replay_noise or cfg.replay_time_warp:
        rng = np.random.default_rng(seed)
        params["actions"] = perturb_actions(
            params["actions"], rng, noise=cfg.replay_noise, time_warp=cfg.replay_time_warp
        )
    return GenJob(
        seed=seed,
        generator="replay",
        generator_params=params,
        steps=len(params["actions"]),
        stop_on_success=stop,
        context_frames=template.context_frames,
        context_actions=template.context_actions,
        context_states=template.context_states,
        params_extra={"perturb": knobs, "context": cfg.context},
        extra=dict(template.extra),
    )


class Writer:
    """The single writer: appends episodes (only successful ones with ``only_success``),
    never the same seed twice, and keeps the run's counts."""

    def __init__(self, plan: GeneratePlan, on_progress: Callable[[GenProgress], None] | None):
        self.plan, self.on_progress = plan, on_progress
        self.seen: set[int] = set()
        self.written = self.tried = self.successes = self.frames = self.frames_generated = 0
        self.start = time.perf_counter()

    def add(
        self, ep: GeneratedEpisode, worker: str, worker_names: tuple[str, ...], restarts: int
    ) -> None:
        seed = int(ep.meta.seed or 0)
        if seed in self.seen:
            log.warning("seed %d arrived twice; keeping the first", seed)
            return
        self.seen.add(seed)
        self.tried += 1
        self.frames_generated += ep.frames
        self.successes += bool(ep.meta.success)
        if ep.meta.success or not self.plan.cfg.only_success:
            self.plan.output().append_episode(ep.data, ep.meta)
            self.written += 1
            self.frames += ep.frames
        if self.on_progress is not None:
            self.on_progress(
                GenProgress(
                    written=self.written,
                    tried=self.tried,
                    total=len(self.plan.jobs),
                    successes=self.successes,
                    frames=self.frames_generated,
                    elapsed_s=time.perf_counter() - self.start,
                    worker=worker,
                    worker_names=worker_names,
                    restarts=restarts,
                )
            )


def summarise(writer: Writer, plan: GeneratePlan, info: dict[str, Any]) -> dict[str, Any]:
    """The run's summary (the ``--json`` object)."""
    seconds = max(info.get("generate_s", 0.0), 1e-9)
    return {
        "episodes": writer.written,
        "tried": writer.tried,
        "kept": writer.written,
        "skipped": plan.skipped,
        "successes": writer.successes,
        "success_rate": writer.successes / writer.tried if writer.tried else 0.0,
        "frames": writer.frames,
        "frames_generated": writer.frames_generated,
        "frames_per_s": writer.frames_generated / seconds,
        "episodes_per_s": writer.tried / seconds,
        "generator": plan.cfg.generator,
        "model_id": plan.model_id,
        "batch_size": plan.cfg.batch_size,
        "only_success": plan.cfg.only_success,
        **info,
        "store": plan.output().summary(),
    }


def execute_generate(
    plan: GeneratePlan, on_progress: Callable[[GenProgress], None] | None = None
) -> dict[str, Any]:
    """Run the planned episodes on Ray workers; each one is committed as it arrives.

    Closes the store and returns the summary (see :func:`summarise`).
    """
    from pipelines.generate_ray import run_on_ray

    writer = Writer(plan, on_progress)
    try:
        info = run_on_ray(plan, writer) if plan.jobs else {"generate_s": 0.0}
        return summarise(writer, plan, info)
    finally:
        plan.close()


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
        f"({summary['skipped']} already there); probe success rate "
        f"{summary['success_rate']:.0%}; {summary['frames_per_s']:.0f} frames/s on "
        f"{summary.get('workers', 0)} worker(s); {out}: {s['episodes']} episodes, "
        f"{s['frames']} frames"
    )
