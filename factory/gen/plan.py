"""What one ``factory generate`` run will do: its config, checked, and the episodes to make.

Episode ``i`` uses seed ``seed + i``. With ``append``, episodes whose generator and seed
are already in the output store are skipped (the rule of ``factory collect``), so rerunning
a run resumes it. :func:`plan_generate` refuses every bad input (as :class:`FactoryError`)
before any episode runs; a new output store is only created by the plan's first
:meth:`GeneratePlan.output` call, once the work can start, so a run that fails before
leaves nothing behind. Running the plan (on Ray) is ``pipelines.generate``'s part.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from factory.envs import make_world, recorded_world
from factory.envs.model_world import check_main_camera
from factory.envs.pusht import pusht_spec
from factory.envs.scoring import check_success_score
from factory.errors import FactoryError
from factory.gen.jobs import GenJob
from factory.gen.judges import check_judges, check_mean_dynamics
from factory.gen.perturb import perturb_actions
from factory.gen.robustness import RobustConfig, check_plan
from factory.generators import (
    EXPERTS,
    GENERATOR_WORLDS,
    GENERATORS,
    check_generator_world,
    labels_actions,
    make_generator,
)
from factory.generators.dart import split_noise
from factory.model import read_config
from factory.model.files import model_dir_or_default, model_identity
from factory.model.registry import kind_of, world_of
from factory.record import check_output, close_output, done_episodes, open_output
from factory.store import EpisodeStore
from factory.world import WorldSpec


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
    fsync: bool = False  # a durable store: fsync data, meta and episode_ends at every commit
    stop_on_success: bool | None = None  # default: True for expert
    success_score: float | None = None  # a stricter success reading (None: the task's own)
    robust: RobustConfig | None = None  # keep only episodes this robust (needs only_success)
    mean_dynamics: tuple[str, ...] = ()  # judges: generate in the mean of their dynamics
    replay_noise: float = 0.0  # px std of Gaussian noise on replayed actions
    replay_time_warp: float = 0.0  # replay speed drawn from U(1 - w, 1 + w)
    context: int = 1  # replay: real frames (and their actions) the model starts from
    device: str = "auto"
    cpus_per_worker: float = 1.0
    gpus_per_worker: float | None = None  # None: one whole GPU each where there are GPUs
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
    created: bool = False  # :meth:`output` created the store (a failed run may remove it)

    @property
    def labelled(self) -> bool:
        """Whether the generator labels its steps (``action_label`` in the store)."""
        return labels_actions(self.cfg.generator_params)

    @property
    def skipped(self) -> int:
        return self.cfg.episodes - len(self.jobs)

    def output(self) -> EpisodeStore:
        """The output store, created on first use."""
        if self.store is None:
            res = self.spec.image_shape[0]
            self.created = not self.cfg.out.exists()
            self.store = open_output(
                self.cfg.out, self.spec, res, self.cfg.append, self.cfg.fsync, self.labelled
            )
        return self.store

    def close(self, failed: bool = False) -> None:
        """Close the output; a store this run created and ``failed`` to commit any episode
        to is removed (:func:`~factory.record.output.close_output`)."""
        if self.store is not None:
            close_output(self.store, self.created, failed)


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


def _check_generator_params(cfg: GenerateConfig) -> None:
    """Refuse bad ``--param`` / ``--action-noise`` values here, not in a worker: the
    generator is built once to check them (replay and policy take no ``--param``)."""
    own, _ = split_noise(cfg.generator_params)
    if cfg.generator in ("replay", "policy"):
        if own:
            raise FactoryError(
                f"--generator {cfg.generator} takes no --param (got {', '.join(sorted(own))})"
            )
        return
    make_generator(cfg.generator, **cfg.generator_params)


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


def _generator_world(name: str) -> str:
    """The world whose shipped model a generator runs in without ``--model``: the one
    world it is written for, else PushT."""
    worlds = GENERATOR_WORLDS.get(name, ())
    return worlds[0] if len(worlds) == 1 else "pusht"


def plan_generate(cfg: GenerateConfig) -> GeneratePlan:
    """Validate everything and open an existing output store, before any work starts."""
    _check_numbers(cfg)
    _check_generator_params(cfg)
    model_dir = model_dir_or_default(cfg.model, _generator_world(cfg.generator))
    mcfg = read_config(model_dir)
    missing = kind_of(mcfg).missing_for_rollout(mcfg)
    if missing:
        raise FactoryError(f"model {model_dir} lacks part(s) {', '.join(missing)}; train them")
    resolution = mcfg.image_shape[0]
    spec = model_world_spec(mcfg, resolution)
    check_generator_world(cfg.generator, spec.name)
    check_success_score(world_of(mcfg), cfg.success_score)
    if cfg.robust is not None:
        check_plan(kind_of(mcfg).name, world_of(mcfg), cfg.only_success)
        check_judges(mcfg, cfg.robust.judges)
    if cfg.mean_dynamics:
        check_mean_dynamics(kind_of(mcfg).name, mcfg, cfg.mean_dynamics)
    gen_dim = _generator_action_dim(cfg, resolution)
    if gen_dim != mcfg.action_dim:
        raise FactoryError(
            f"generator {cfg.generator!r} makes {gen_dim}-D actions but model {model_dir} "
            f"takes {mcfg.action_dim}-D actions; use a matching model or generator"
        )
    replaying = cfg.generator == "replay"
    base_jobs = _replay_jobs(cfg, resolution, world_of(mcfg)) if replaying else None
    labelled = labels_actions(cfg.generator_params)
    check_output(cfg.out, spec, resolution, cfg.append, labelled)
    jobs = plan_jobs(cfg, done_episodes(cfg.out), base_jobs)
    model_id = model_identity(model_dir)
    if cfg.mean_dynamics:  # the episodes record the ensemble that made them
        members = ",".join(model_identity(Path(j)) for j in cfg.mean_dynamics)
        model_id = f"{model_id}+mean({members})"
    # an existing store is opened (and locked) now; a new one waits for the workers
    store = None
    if cfg.out.exists():
        store = open_output(cfg.out, spec, resolution, cfg.append, cfg.fsync, labelled)
    return GeneratePlan(cfg, model_dir, model_id, spec, store, jobs)


def model_world_spec(model_config: Any, resolution: int) -> WorldSpec:
    """The spec of the world a model of ``model_config`` simulates at ``resolution``, with
    the cameras the model renders (none named: the main camera only), as its
    ``ModelWorld`` records them."""
    world = world_of(model_config)
    if world == "pusht":
        spec = pusht_spec(resolution)
    else:
        gt = make_world(world, batch_size=1, resolution=resolution)
        spec = gt.spec
        gt.close()
    cameras = tuple(model_config.cameras)
    check_main_camera(cameras, spec.cameras)
    return replace(spec, cameras=cameras)


def plan_jobs(
    cfg: GenerateConfig, done: set[tuple[str, int | None]], replay: list[GenJob] | None = None
) -> list[GenJob]:
    """The episodes still to generate: seeds ``seed .. seed+N-1`` not yet ``done``."""
    stop = cfg.stop_on_success if cfg.stop_on_success is not None else cfg.generator in EXPERTS
    params = dict(cfg.generator_params)
    if cfg.generator == "policy":
        params.setdefault("path", str(cfg.policy))
    # a stricter success reading is part of how an episode was made: its meta records it
    strict = {} if cfg.success_score is None else {"success_score": cfg.success_score}
    jobs = []
    for i in range(cfg.episodes):
        seed = cfg.seed + i
        if (cfg.generator, seed) in done:
            continue
        if replay is not None:
            job = _perturbed(cfg, replay[i % len(replay)], seed, stop)
        else:
            job = GenJob(seed, cfg.generator, params, cfg.steps, stop)
        jobs.append(replace(job, extra={**job.extra, **strict}) if strict else job)
    return jobs


def _replay_jobs(cfg: GenerateConfig, resolution: int, world: str) -> list[GenJob]:
    """One template job per ``--source`` episode: its real first frames and its actions;
    refuses a source recorded in another world than the model's ``world``."""
    assert cfg.source is not None
    out = []
    with EpisodeStore.open(cfg.source, mode="r") as src:
        recorded = recorded_world(src.attrs)
        if recorded is not None and recorded != world:
            raise FactoryError(
                f"{cfg.source} holds {recorded} episodes and the model simulates the {world} "
                f"world; replay a {world} store"
            )
        shape = tuple(src.schema.keys["image"].shape) if "image" in src.schema.keys else None
        if shape != (resolution, resolution, 3):
            raise FactoryError(
                f"{cfg.source} holds frames of shape {shape}, the model needs "
                f"({resolution}, {resolution}, 3); replay a store at the model's resolution"
            )
        has_gt = "task_state" in src.schema.keys and "state" in src.schema.keys
        for ep in src:
            if ep.length <= cfg.context:
                continue
            actions = np.asarray(ep["action"], np.float32)
            k = cfg.context
            states = (
                np.concatenate([ep["state"][:k, :2], ep["task_state"][:k]], axis=1)
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
    params = {**template.generator_params, **cfg.generator_params}  # + DART noise, if any
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
