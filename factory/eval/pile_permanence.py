"""Hold-still permanence on pile episodes: do discs that nothing touches stay put?

From ``starts`` real windows where the pusher is clear of every disc and the discs are at
rest, the model rolls ``steps`` steps with the agent commanded to stay where it is (the
action is its position at the start frame): ``hold_still`` episodes generated from the
windows by the generation engine (:class:`factory.gen.RolloutEngine`, so through the one
episode runner), with the PushT permanence check's
:func:`factory.eval.permanence.hold_still_episodes`. The ground truth leaves every disc
exactly where it was: an unpushed disc is stopped (:mod:`factory.envs.pile_sim`). The
report compares the generated frames with the start frame (disc-mask IoU per camera the
model renders) and the model's own disc reading at every step (the episodes'
``task_state``) with its reading at the start: the largest displacement of any disc and
whether any moved more than ``tol_px`` (:func:`factory.eval.pile_metrics.hold_still_drift`).

Shapes: ``N`` starts, ``K`` context frames, ``T`` steps, ``H, W`` image size, ``D = 2 n``
the disc state (n discs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from factory.eval import metrics as m
from factory.eval import pile_metrics as pm
from factory.eval.permanence import PermanenceStarts, hold_still_episodes
from factory.eval.pile_fidelity import disc_state_problem
from factory.model.protocol import RolloutModel
from factory.store import EpisodeStore


@dataclass(frozen=True)
class HoldStillConfig:
    """The hold-still check: ``starts`` windows where the pusher is at least ``margin_px``
    clear of every disc in every context frame and no disc moves more than ``still_px``
    over them; ``steps`` held steps; IoU against the start frame at ``horizons``; a disc
    counts as moved when it ends up more than ``tol_px`` from its start."""

    starts: int = 8
    steps: int = 100
    horizons: tuple[int, ...] = (10, 40, 100)
    margin_px: float = 30.0
    still_px: float = 0.5
    tol_px: float = 1.0
    seed: int = 0


def still_windows(
    agent: np.ndarray, task_state: np.ndarray, context: int, cfg: HoldStillConfig
) -> np.ndarray:
    """Frame indices t (ascending) of one episode, agent (T, 2) and discs (T, D), whose
    window ``t-K+1 .. t`` has the pusher clear of every disc and the discs at rest."""
    clear = pm.pusher_clear(agent, task_state, cfg.margin_px)
    ok = []
    for t in range(context - 1, len(agent)):
        lo = t - context + 1
        moved = np.abs(task_state[lo : t + 1] - task_state[lo]).max(initial=0.0)
        if clear[lo : t + 1].all() and moved <= cfg.still_px:
            ok.append(t)
    return np.asarray(ok, np.int64)


@dataclass(frozen=True)
class HoldStarts(PermanenceStarts):
    """Chosen starts, :class:`~factory.eval.permanence.PermanenceStarts` (frames
    (N, K, H, W, 3) uint8, the last the start frame; actions (N, K-1, A); agent (N, 2) the
    agent at the start frame, the held target; where (N, 2)) with the world states always
    known and the side camera's start frame where the store has it."""

    states: np.ndarray
    """(N, K, 2 + D) the context frames' world states (agent xy, then every disc's xy)."""
    side: np.ndarray | None = None
    """(N, H, W, 3) uint8 the start's side frame, or None."""


def choose_hold_starts(
    store: EpisodeStore, context: int, cfg: HoldStillConfig
) -> HoldStarts | None:
    """Up to ``cfg.starts`` qualifying windows, evenly spaced over all of the store's in
    (episode, frame) order; None if there is none."""
    pool = []
    for i in range(store.n_episodes):
        ep = store.episode(i)
        pool += [(i, int(t)) for t in still_windows(ep["state"], ep["task_state"], context, cfg)]
    if not pool:
        return None
    picks = np.unique(np.linspace(0, len(pool) - 1, min(cfg.starts, len(pool))).astype(np.int64))
    chosen = [pool[j] for j in picks]
    eps = [(store.episode(i), t - context + 1, t) for i, t in chosen]
    has_side = "image_side" in store.schema.keys
    return HoldStarts(
        frames=np.stack([ep["image"][lo : t + 1] for ep, lo, t in eps]),
        side=np.stack([ep["image_side"][t] for ep, _, t in eps]) if has_side else None,
        actions=np.stack([ep["action"][lo:t] for ep, lo, t in eps]).astype(np.float32),
        agent=np.stack([ep["state"][t, :2] for ep, _, t in eps]).astype(np.float32),
        states=np.stack(
            [np.concatenate([ep["state"][lo : t + 1, :2], ep["task_state"][lo : t + 1]], 1)
             for ep, lo, t in eps]
        ).astype(np.float32),
        where=np.asarray(chosen, np.int64),
    )  # fmt: skip


def run_hold_still(model: RolloutModel, starts: HoldStarts, cfg: HoldStillConfig) -> dict[str, Any]:
    """Roll every start ``cfg.steps`` steps with the agent held at its start position
    (:func:`~factory.eval.permanence.hold_still_episodes`: the recorded frame ``h``
    follows ``h`` held steps).

    Keys: ``starts``, ``steps``, ``tol_px``, ``disc_iou_top_<h>`` (mean disc-mask IoU of
    step h against the start frame; ``_min`` at the last step), ``disc_iou_side_<h>``
    where the model renders the side camera, and from the model's own disc reading
    against its reading at the start: ``disc_drift_px`` (median over starts of the largest
    displacement of any disc at any step), ``disc_drift_px_max``, ``moved_frac`` (starts in
    which a disc moved more than ``tol_px``), ``moved`` (any did), ``agent_drift_px``
    (median distance of the model's agent from the held target at the last step) and
    ``where`` ([episode, frame] of each start); ``drift_skipped`` instead of the drift
    keys when the model's disc state is not the store's width.
    """
    episodes = hold_still_episodes(model, starts, steps=cfg.steps, seed=cfg.seed)
    data = [ep.data for ep in episodes]
    result: dict[str, Any] = {"starts": len(data), "steps": cfg.steps, "tol_px": cfg.tol_px}
    result.update(_hold_ious(data, starts, cfg))
    path = np.stack([d["task_state"][: cfg.steps + 1] for d in data])  # (N, T+1, D)
    problem = disc_state_problem(path.shape[-1], starts.states.shape[-1] - 2)
    if problem is not None:
        result["drift_skipped"] = problem
    else:
        result.update(_hold_drift(path, cfg.tol_px))
    agent = np.stack([d["state"][cfg.steps, :2] for d in data])
    result["agent_drift_px"] = float(np.median(m.position_error(agent, starts.agent)))
    result["where"] = starts.where.tolist()
    return result


def _hold_drift(path: np.ndarray, tol_px: float) -> dict[str, Any]:
    """The drift keys of :func:`run_hold_still` from the model's disc readings (N, T+1, D),
    the start's first."""
    drift = [pm.hold_still_drift(p, tol_px) for p in path]
    largest = np.array([d for d, _ in drift])
    return {
        "disc_drift_px": float(np.median(largest)),
        "disc_drift_px_max": float(largest.max()),
        "moved_frac": float(np.mean([mv for _, mv in drift])),
        "moved": bool(any(mv for _, mv in drift)),
    }


def _hold_ious(
    data: Sequence[dict[str, np.ndarray]], starts: HoldStarts, cfg: HoldStillConfig
) -> dict[str, float]:
    """Disc-mask IoU of the episodes' frames after h held steps (``data[...][h]``) against
    the start frame, per camera (the side one where every episode has it)."""
    out: dict[str, float] = {}
    horizons = sorted({h for h in cfg.horizons if 1 <= h <= cfg.steps} | {cfg.steps})
    cams = [("top", starts.frames[:, -1], "image")]
    if starts.side is not None and all("image_side" in d for d in data):
        cams.append(("side", starts.side, "image_side"))
    for cam, start, key in cams:
        for h in horizons:
            iou = pm.disc_iou(np.stack([d[key][h] for d in data]), start, cam)
            out[f"disc_iou_{cam}_{h}"] = float(iou.mean())
            if h == cfg.steps:
                out[f"disc_iou_{cam}_{h}_min"] = float(iou.min())
    return out


def hold_still_metrics(
    model: RolloutModel, store: EpisodeStore, context: int, cfg: HoldStillConfig
) -> dict[str, Any]:
    """:func:`choose_hold_starts` then :func:`run_hold_still`; ``starts`` 0 and why it was
    ``skipped`` when the store has no qualifying window."""
    starts = choose_hold_starts(store, context, cfg)
    if starts is None:
        why = (
            f"no window of {context} frames with the pusher {cfg.margin_px:g} px clear of "
            "every disc and the discs at rest"
        )
        return {"starts": 0, "steps": cfg.steps, "skipped": why}
    return run_hold_still(model, starts, cfg)
