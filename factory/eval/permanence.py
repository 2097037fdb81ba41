"""Object permanence: does a block that nothing touches stay where it is, and whole?

From ``starts`` held-out real frames where the agent is clear of a block at rest, the
model rolls ``steps`` steps with the agent commanded to stay where it is (action = its
current position): ``hold_still`` episodes generated from the starts' contexts by the
generation engine (:class:`factory.gen.RolloutEngine`, so through the one episode
runner) in :func:`hold_still_episodes`, which the pile's hold-still check
(:mod:`factory.eval.pile_permanence`) shares. The ground truth leaves the block exactly
where it was: gym-pusht's space damping of 0 removes every body's velocity each physics
step, so an untouched block is still. The report compares the generated frames with the
start frame (T-mask IoU at a few horizons) and the model's own reading of the block pose
(the rollout's task state, :mod:`factory.eval.task_state`) at the last step with its
reading of the start frame.

Shapes: ``N`` starts, ``K`` context frames, ``H, W`` image size.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from factory.envs import pusht_geometry as geo
from factory.eval import metrics as m
from factory.gen import GeneratedEpisode, GenJob, RolloutEngine
from factory.generators import make_generator
from factory.model.protocol import RolloutModel
from factory.store import EpisodeStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PermanenceConfig:
    """How the permanence check picks its starts and how long it rolls.

    ``margin_px``: the agent disk must be at least this far from the T (board px), in every
    context frame; ``still_px`` / ``still_deg``: the block may move at most this much over
    the context frames (it is at rest).
    """

    starts: int = 8
    steps: int = 100
    horizons: tuple[int, ...] = (10, 40, 100)
    margin_px: float = 30.0
    still_px: float = 0.5
    still_deg: float = 0.5
    seed: int = 0


@dataclass(frozen=True)
class PermanenceStarts:
    """Chosen starts: frames (N, K, H, W, 3) uint8 (the last is the start frame), actions
    (N, K-1, A) float32 (those applied at all but the last), agent (N, 2) the agent's real
    position at the start frame, where (N, 2) int (episode, frame index of the start)."""

    frames: np.ndarray
    actions: np.ndarray
    agent: np.ndarray
    where: np.ndarray
    states: np.ndarray | None = None
    """(N, K, S) the context frames' world states (agent + block), which a state kind
    starts from."""


def candidate_starts(
    agent: np.ndarray, block: np.ndarray, context: int, cfg: PermanenceConfig = PermanenceConfig()
) -> np.ndarray:
    """Frame indices t (ascending) of one episode whose context window ``t-K+1 .. t``
    qualifies: agent (T, 2) board px, block (T, 3) poses.

    In every frame of the window the agent disk is at least ``margin_px`` from the T, and
    the block moves at most ``still_px`` and ``still_deg`` in all over the window.
    """
    n = len(agent)
    if n < context:
        return np.zeros(0, np.int64)
    gap = np.array([geo.distance_to_block(a, b) for a, b in zip(agent, block, strict=True)])
    clear = gap - geo.AGENT_RADIUS >= cfg.margin_px
    moved = np.concatenate([[0.0], m.position_error(block[1:, :2], block[:-1, :2])])
    turned = np.concatenate([[0.0], m.angle_error_deg(block[1:, 2], block[:-1, 2])])
    ok = []
    for t in range(context - 1, n):
        lo = t - context + 1
        if (
            clear[lo : t + 1].all()
            and moved[lo + 1 : t + 1].sum() <= cfg.still_px
            and turned[lo + 1 : t + 1].sum() <= cfg.still_deg
        ):
            ok.append(t)
    return np.asarray(ok, np.int64)


def choose_starts(
    store: EpisodeStore, context: int, cfg: PermanenceConfig = PermanenceConfig()
) -> PermanenceStarts | None:
    """Up to ``cfg.starts`` qualifying starts, evenly spaced over all qualifying frames of
    the store in (episode, frame) order; None if there is none."""
    pool = [
        (i, int(t))
        for i in range(store.n_episodes)
        for t in candidate_starts(
            store.episode(i)["state"][:, :2], store.episode(i)["task_state"], context, cfg
        )
    ]
    if not pool:
        return None
    picks = np.unique(np.linspace(0, len(pool) - 1, min(cfg.starts, len(pool))).astype(np.int64))
    chosen = [pool[j] for j in picks]
    frames, actions, agent, states = [], [], [], []
    for i, t in chosen:
        ep = store.episode(i)
        lo = t - context + 1
        frames.append(ep["image"][lo : t + 1])
        actions.append(np.asarray(ep["action"][lo:t], np.float32))
        agent.append(np.asarray(ep["state"][t, :2], np.float32))
        states.append(
            np.concatenate([ep["state"][lo : t + 1, :2], ep["task_state"][lo : t + 1]], 1)
        )
    return PermanenceStarts(
        frames=np.stack(frames),
        actions=np.stack(actions),
        agent=np.stack(agent),
        where=np.asarray(chosen, np.int64),
        states=np.stack(states).astype(np.float32),
    )


def run_permanence(
    model: RolloutModel, starts: PermanenceStarts, cfg: PermanenceConfig = PermanenceConfig()
) -> dict[str, Any]:
    """Roll every start ``cfg.steps`` steps with the agent held still; the summary dict.

    The rollouts are ``hold_still`` episodes (the agent's real position at the start
    frame as the target) generated from the starts' contexts by the generation engine,
    one step longer than ``cfg.steps`` so that the recorded frame ``h`` follows ``h`` held
    steps for every ``h <= cfg.steps``.

    Keys: ``starts``, ``steps``, ``iou_<h>`` (mean T-mask IoU of step h against the start
    frame) for each horizon, ``iou_<steps>_min``, ``block_drift_px`` and
    ``angle_drift_deg`` (median over starts of the model's block reading at the last step
    against its own reading of the start frame, ``last_reading``), ``block_drift_px_max``,
    ``agent_drift_px``
    (median distance of the dynamics' agent state from the commanded position) and
    ``where`` ([episode, frame] of each start).
    """
    episodes = hold_still_episodes(model, starts, steps=cfg.steps, seed=cfg.seed)
    start_mask = m.t_mask(starts.frames[:, -1])
    hold = starts.agent.astype(np.float32)
    result: dict[str, Any] = {"starts": len(start_mask), "steps": cfg.steps}
    horizons = sorted({h for h in cfg.horizons if 1 <= h <= cfg.steps} | {cfg.steps})
    ious = {}
    for h in horizons:
        mask = m.t_mask(np.stack([ep.data["image"][h] for ep in episodes]))
        ious[h] = np.array([m.iou(g, s) for g, s in zip(mask, start_mask, strict=True)])
        result[f"iou_{h}"] = float(ious[h].mean())
    result[f"iou_{cfg.steps}_min"] = float(ious[cfg.steps].min())
    start_pose = np.stack([ep.data["task_state"][0] for ep in episodes])
    pose = np.stack([ep.data["task_state"][cfg.steps] for ep in episodes])
    agent = np.stack([ep.data["state"][cfg.steps, :2] for ep in episodes])
    drift = m.position_error(pose[:, :2], start_pose[:, :2])
    result["block_drift_px"] = float(np.median(drift))
    result["block_drift_px_max"] = float(drift.max())
    result["angle_drift_deg"] = float(np.median(m.angle_error_deg(pose[:, 2], start_pose[:, 2])))
    result["agent_drift_px"] = float(np.median(m.position_error(agent, hold)))
    result["where"] = starts.where.tolist()
    return result


def hold_still_episodes(
    model: RolloutModel, starts: PermanenceStarts, *, steps: int, seed: int
) -> list[GeneratedEpisode]:
    """One ``hold_still`` episode per start, in start order, each generated by the engine
    from its context (``starts.frames`` (N, K, H, W, 3) uint8, the last the start frame;
    ``starts.actions`` (N, K-1, A); where known, ``starts.states`` (N, K, S): None starts
    the model from the frames), the agent held at ``starts.agent`` (N, 2).

    Each episode runs ``steps + 1`` steps, so that its recorded frame ``h`` follows ``h``
    held steps for every ``h <= steps``: ``data["image"]`` (steps + 1, H, W, 3) with the
    start frame first, ``data["state"]`` the model's agent state and
    ``data["task_state"]`` its task-state reading per frame (its own reading of the start
    at 0), ``data["image_<cam>"]`` each other camera the model renders. ``seed`` seeds
    the model's noise and the jobs."""
    frames, actions, target, states = starts.frames, starts.actions, starts.agent, starts.states
    n = len(frames)
    jobs = [
        GenJob(
            seed=seed,
            generator="hold_still",
            generator_params={"target": np.asarray(target[i]).tolist()},
            steps=steps + 1,
            context_frames=frames[i],
            context_actions=actions[i],
            context_states=None if states is None else states[i],
            extra={"start": i},
        )
        for i in range(n)
    ]
    engine = RolloutEngine(model, make_generator, batch_size=n, seed=seed)
    try:
        episodes = list(engine.run(jobs))
    finally:
        engine.close()
    return sorted(episodes, key=lambda ep: int(ep.meta.extra["start"]))


def permanence_metrics(
    model: RolloutModel,
    store: EpisodeStore,
    context: int,
    cfg: PermanenceConfig = PermanenceConfig(),
) -> dict[str, Any]:
    """:func:`choose_starts` then :func:`run_permanence`; ``{"starts": 0}`` when the store
    has no qualifying start (logged)."""
    starts = choose_starts(store, context, cfg)
    if starts is None:
        log.warning("permanence: no frame in %s has the agent clear of a block at rest", store.path)
        return {"starts": 0, "steps": cfg.steps}
    return run_permanence(model, starts, cfg)
