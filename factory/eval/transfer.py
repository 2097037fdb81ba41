"""Transfer: does what happened inside the model happen in the world?

Each episode that ``factory generate`` ran inside the model from a ground-truth reset
(``meta.source == "world_model"``, ``extra.initial`` ``"seed"`` or ``"config"`` and
``extra.initial_config`` = the reset's agent xy and block pose) is replayed open loop in the
ground-truth env from the same initial state, and the outcomes are compared. The replay is
the ``replay`` generator run by the episode runner (:class:`factory.record.EpisodeRunner`),
which records it by the same convention as generation.

Alignment (that of :class:`factory.gen.RolloutEngine`): ``action[t]`` is applied at frame
``t``, so the recorded last frame ``T-1`` is what the model showed after ``T-1`` actions,
and ``task_state[T-1]`` (the model's own reading of the block, the probe's) is compared with
the real block after the same ``T-1`` actions. Success is sticky, as the engine records it:
the model's ``meta.success`` is whether any step's reading covered the goal; the real one
is whether the env reported success after any of the ``T`` replayed actions.

The final readings are compared by the world's own measure (:func:`final_errors`): PushT's
block position (px) and angle (deg) errors; the pile's mean disc distance (px) under the
matching of least total distance (discs are unordered). A pile episode (``world``
``pile-model``) is replayed in the pile env, from its seed, by the same runner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from factory.envs import WORLDS, make_world
from factory.errors import FactoryError
from factory.eval import metrics as m
from factory.eval.pile_metrics import disc_position_error
from factory.generators import make_generator
from factory.record.runner import EpisodeRunner, EpisodeSpec
from factory.store import Episode, EpisodeStore
from factory.store.provenance import is_seeded
from factory.world import World, WorldObs

log = logging.getLogger(__name__)

RESET_TOL = 1e-3  # board px / rad: a seeded reset must land within this of initial_config
ANGLE_LAST = frozenset({"pusht"})
"""Worlds whose configs end in an angle (rad), wrapped when configs are compared."""
ERROR_KEYS: dict[str, tuple[str, ...]] = {
    "pusht": ("block_err_px", "angle_err_deg"),
    "pile": ("disc_err_px",),
}
"""World -> the final-reading errors of its rows (:func:`final_errors`), each summarised
as ``<key>_median``."""


@dataclass(frozen=True)
class TransferEpisode:
    """One generated episode to replay: actions (T, A) float32, model_pose (K,) the
    model's task-state reading at the last frame (PushT: the block pose; pile: every
    disc's x, y), initial_config (C,) the recorded reset."""

    index: int
    seed: int | None
    initial: str  # "seed" | "config"
    initial_config: np.ndarray
    actions: np.ndarray
    model_pose: np.ndarray
    model_success: bool
    env: str


def world_of(meta_extra: dict[str, Any]) -> str:
    """The ground-truth env an episode was generated against (``pusht-model`` -> ``pusht``,
    ``pile-model`` -> ``pile``)."""
    return str(meta_extra.get("world", "pusht")).removesuffix("-model")


def seeded_episode(ep: Episode, env: str | None = None) -> TransferEpisode | None:
    """The episode as a :class:`TransferEpisode`, or None if it was not generated inside
    the model from a seeded (or configured) ground-truth reset."""
    meta = ep.meta
    extra = meta.extra
    if not is_seeded(meta):
        return None
    config = extra["initial_config"]
    return TransferEpisode(
        index=ep.index,
        seed=meta.seed,
        initial=str(extra["initial"]),
        initial_config=np.asarray(config, np.float64),
        actions=np.asarray(ep["action"], np.float32),
        model_pose=np.asarray(ep["task_state"][-1], np.float64),
        model_success=bool(meta.success),
        env=env or world_of(extra),
    )


def load_targets(store: EpisodeStore, env: str | None = None) -> tuple[list[TransferEpisode], int]:
    """The store's seeded episodes and the number of others skipped; refuses a store with
    none, one without ``action`` and ``task_state``, an episode with non-finite actions or
    one generated in another world than ``env`` (before any replay starts)."""
    for key in ("action", "task_state"):
        if key not in store.schema.keys:
            raise FactoryError(f"{store.path} has no data/{key}; it was not written by generate")
    targets: list[TransferEpisode] = []
    sources: dict[str, int] = {}
    for ep in store:
        target = seeded_episode(ep, env)
        made_in = world_of(ep.meta.extra) if "world" in ep.meta.extra else None
        if target is None:
            kind = f"{ep.meta.source}/{ep.meta.extra.get('initial', '-')}"
            sources[kind] = sources.get(kind, 0) + 1
        elif env in WORLDS and made_in is not None and made_in != env:
            raise FactoryError(
                f"{store.path} episode {target.index} was generated in a model of the "
                f"{made_in} world, not {env}; drop --env or pass --env {made_in}"
            )
        elif not np.isfinite(target.actions).all():
            raise FactoryError(
                f"{store.path} episode {target.index} has non-finite actions (NaN or inf); "
                "it cannot be replayed"
            )
        else:
            targets.append(target)
    if not targets:
        found = ", ".join(f"{n} {k}" for k, n in sorted(sources.items())) or "no episodes"
        raise FactoryError(
            f"{store.path} holds no episode generated inside the model from a seeded reset "
            f"(found {found}); make one with `factory generate --generator expert`"
        )
    return targets, sum(sources.values())


def _config_of(obs: WorldObs) -> np.ndarray:
    return np.concatenate([obs.state[0], obs.task_state[0]]).astype(np.float64)


def _config_err(a: np.ndarray, b: np.ndarray, env: str) -> float:
    """Max abs difference of two configs (C,) of ``env``, the last entry wrapped where it
    is an angle (:data:`ANGLE_LAST`)."""
    if a.shape != b.shape:
        return float("inf")
    diff = np.abs(a - b)
    if env in ANGLE_LAST:
        diff[-1] = np.abs(np.angle(np.exp(1j * (a[-1] - b[-1]))))
    return float(diff.max())


def final_errors(env: str, model: np.ndarray, real: np.ndarray) -> dict[str, float]:
    """The model's final task-state reading (K,) against the real one (K,), by ``env``'s
    measure (keys :data:`ERROR_KEYS`): PushT the block's position error (board px) and
    wrapped angle error (deg); the pile the mean distance (board px) of the model's discs
    to the real ones, matched by least total distance."""
    if env == "pile":
        return {"disc_err_px": float(disc_position_error(model, real))}
    return {
        "block_err_px": float(m.position_error(model[:2], real[:2])),
        "angle_err_deg": float(m.angle_error_deg(model[2], real[2])),
    }


def reset_like(world: World, target: TransferEpisode) -> tuple[WorldObs, str, float]:
    """Reset ``world`` (batch 1) to the episode's initial state: by its seed when the
    episode started from one and the seed reproduces ``initial_config``, else by config.

    Returns the observation, how it was reset ("seed" | "config") and the max difference
    of the reset's state from the recorded initial config.
    """
    want = target.initial_config
    if target.initial == "seed":
        obs = world.reset(seeds=np.array([int(target.seed or 0)]))
        err = _config_err(_config_of(obs), want, target.env)
        if err <= RESET_TOL:
            return obs, "seed", err
        log.warning(
            "episode %d: seed %s resets %.3g away; using the config", target.index, target.seed, err
        )
    obs = world.reset(configs=want[None])
    return obs, "config", _config_err(_config_of(obs), want, target.env)


def replay(world: World, target: TransferEpisode) -> dict[str, Any]:
    """Replay one episode open loop from its initial state (:func:`reset_like` picks seed
    or config); its per-episode row."""
    _, how, reset_err = reset_like(world, target)
    config = target.initial_config if how == "config" else None
    spec = EpisodeSpec(int(target.seed or 0), len(target.actions), config=config)
    policy = make_generator("replay", actions=target.actions, config=target.initial_config)
    (ep,) = EpisodeRunner(world, source="real").run([policy], [spec])
    real_pose = ep.data["task_state"][-1].astype(np.float64)  # frame T-1: after T-1 actions
    return {
        "index": target.index,
        "seed": target.seed,
        "steps": len(target.actions),
        "reset": how,
        "reset_err": reset_err,
        "model_success": target.model_success,
        "real_success": bool(ep.meta.success),
        "real_final_score": float(ep.meta.score or 0.0),
        "model_pose": target.model_pose.tolist(),
        "real_pose": real_pose.tolist(),
        **final_errors(target.env, target.model_pose, real_pose),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rates and medians over per-episode rows (see the module docstring); the median of
    each final-reading error (:data:`ERROR_KEYS`) that every row has."""
    model = np.array([r["model_success"] for r in rows], bool)
    real = np.array([r["real_success"] for r in rows], bool)
    errors = dict.fromkeys(k for keys in ERROR_KEYS.values() for k in keys)
    return {
        "episodes": len(rows),
        "model_success": float(model.mean()),
        "real_success": float(real.mean()),
        "real_success_given_model_success": float(real[model].mean()) if model.any() else None,
        "agreement": float((model == real).mean()),
        **{
            f"{k}_median": float(np.median([r[k] for r in rows]))
            for k in errors
            if all(k in r for r in rows)
        },
        "reset_err_max": float(max(r["reset_err"] for r in rows)),
        "reset_by_config": sum(r["reset"] == "config" for r in rows),
    }


def run_transfer(
    path: Path, env: str | None = None, on_progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Replay every seeded episode of the store at ``path`` in the ground truth.

    Returns :func:`summarise`'s keys plus ``store``, ``env``, ``skipped`` (episodes not
    generated from a seeded reset) and ``per_episode`` (the rows of :func:`replay`).
    """
    if not Path(path).exists():
        raise FactoryError(f"no episode store at {path}")
    with EpisodeStore.open(path) as store:
        targets, skipped = load_targets(store, env)
        image = store.schema.keys.get("image")
        resolution = int(image.shape[0]) if image is not None else 96
    envs = sorted({t.env for t in targets})
    worlds = {name: make_world(name, batch_size=1, resolution=resolution) for name in envs}
    rows = []
    try:
        for name, world in worlds.items():
            dim = world.spec.action_dim
            if targets[0].actions.shape[-1] != dim:
                raise FactoryError(
                    f"{path} holds {targets[0].actions.shape[-1]}-D actions, "
                    f"env {name!r} takes {dim}-D"
                )
        for i, target in enumerate(targets):
            rows.append(replay(worlds[target.env], target))
            if on_progress is not None:
                on_progress(i + 1, len(targets))
    finally:
        for world in worlds.values():
            world.close()
    rows.sort(key=lambda r: r["index"])
    return {
        "store": str(path),
        "env": ",".join(envs),
        **summarise(rows),
        "skipped": skipped,
        "per_episode": rows,
    }
