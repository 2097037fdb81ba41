"""Frame and task-state fidelity of a world model against ground-truth episodes (DESIGN §4).

Open-loop replay: each held-out episode's first ``context`` real frames (and their world
states, which a state kind starts from exactly) start the model, its real actions drive
it, and the generated frame at horizon ``h`` is compared with the real frame ``h`` steps
after the last context frame, beside the copy-last-frame baseline. The block error at
each horizon is the model's own task state at that step (a state kind's state, the latent
kind's task head or probe) against the real block.

Episodes may be shorter than ``context`` plus the longest horizon (real robot datasets
often are): :func:`plan_replay` replays each chosen episode to the longest requested
horizon it holds, and :func:`horizon_metrics` scores each horizon on the episodes long
enough for it; a horizon that no episode holds is skipped, with the reason.

This replay calls the rollout directly rather than through the episode runner
(:class:`factory.record.EpisodeRunner`): it feeds recorded actions open loop
(``step_many``), so it needs no policy, reset, scoring or stop rule, and it batches
fixed-length windows of real episodes, not closed-loop episodes.

Shapes: ``E`` episodes, ``K`` context frames, ``T`` horizon, ``H, W`` image size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from factory.eval import metrics as m
from factory.eval.task_state import real_block_pose
from factory.model.protocol import RolloutModel
from factory.store import EpisodeStore

log = logging.getLogger(__name__)
HORIZONS = (1, 10, 50, 100)


@dataclass(frozen=True)
class ReplaySet:
    """Real windows to replay: frames (E, K+T, H, W, 3) uint8, actions (E, K+T, A) float32,
    task_state (E, K+T, D) float32 (PushT: the block x, y, angle; pile: every disc's x, y),
    state (E, K+T, 2) the agent, views: camera -> (E, K+T, H, W, 3) uint8 for every camera
    after the main one the store records (``image_<camera>``)."""

    frames: np.ndarray
    actions: np.ndarray
    task_state: np.ndarray
    context: int
    state: np.ndarray | None = None
    views: dict[str, np.ndarray] = field(default_factory=dict)

    def world_states(self) -> np.ndarray | None:
        """(E, K+T, S) agent + block states, or None without the agent state."""
        if self.state is None:
            return None
        return np.concatenate([self.state[..., :2], self.task_state], axis=-1).astype(np.float32)


def parse_horizons(text: str) -> tuple[int, ...]:
    """``"1,10,50"`` -> (1, 10, 50): positive step counts, sorted, each once; a
    :class:`~factory.errors.FactoryError` for anything else."""
    from factory.errors import FactoryError

    items = [t.strip() for t in text.split(",")]
    if not all(t.isascii() and t.isdigit() and int(t) > 0 for t in items):
        raise FactoryError(
            f"--horizons takes positive whole step counts separated by commas "
            f"(e.g. 1,10,50), got {text!r}"
        )
    return tuple(sorted({int(t) for t in items}))


def replay_set(
    store: EpisodeStore, episodes: int | Sequence[int], context: int, horizon: int
) -> ReplaySet:
    """The first ``context + horizon`` steps of up to ``episodes`` long-enough episodes (a
    count), or of the given episode indices (each at least that long)."""
    need = context + horizon
    if isinstance(episodes, int):
        chosen = [i for i, n in enumerate(store.episode_lengths) if n >= need][:episodes]
    else:
        chosen = list(episodes)
    if not chosen:
        from factory.errors import FactoryError

        raise FactoryError(
            f"{store.path} has no episode of at least {need} steps for horizon {horizon}"
        )
    eps = [store.episode(i) for i in chosen]
    has_state = "state" in store.schema.keys
    cameras = [k for k in store.schema.keys if k.startswith("image_")]
    rs = ReplaySet(
        frames=np.stack([e["image"][:need] for e in eps]),
        actions=np.stack([e["action"][:need] for e in eps]).astype(np.float32),
        task_state=np.stack([e["task_state"][:need] for e in eps]).astype(np.float32),
        context=context,
        state=np.stack([e["state"][:need] for e in eps]).astype(np.float32) if has_state else None,
        views={k.removeprefix("image_"): np.stack([e[k][:need] for e in eps]) for k in cameras},
    )
    for key, arr in {"action": rs.actions, "task_state": rs.task_state, "state": rs.state}.items():
        if arr is not None:
            _refuse_non_finite(store, key, arr, chosen)
    return rs


def _refuse_non_finite(store: EpisodeStore, key: str, arr: np.ndarray, chosen: list[int]) -> None:
    """Refuse (one line) replay windows ``arr`` (E, T, ...) of the store episodes
    ``chosen`` that hold a NaN or inf in ``key``: a replay would carry it into every
    metric."""
    bad = [i for i, window in zip(chosen, arr, strict=True) if not np.isfinite(window).all()]
    if bad:
        from factory.errors import FactoryError

        raise FactoryError(
            f"{store.path} episode(s) {bad} hold non-finite {key} values (NaN or inf) in "
            f"their first {arr.shape[1]} steps; they cannot be replayed"
        )


@dataclass(frozen=True)
class ReplayPlan:
    """The windows to replay, grouped by how far each episode is replayed.

    ``groups[h]``: the chosen episodes whose longest requested horizon that fits is ``h``,
    their first ``context + h`` steps (longest group first); ``episodes[h]``: how many
    chosen episodes reach each evaluated horizon; ``skipped[h]``: why a requested horizon
    is not evaluated (no episode holds it).
    """

    groups: dict[int, ReplaySet]
    episodes: dict[int, int]
    skipped: dict[int, str]

    @property
    def n_episodes(self) -> int:
        return sum(len(rs.frames) for rs in self.groups.values())


def plan_replay(
    store: EpisodeStore, episodes: int, context: int, horizons: Sequence[int] = HORIZONS
) -> ReplayPlan:
    """Up to ``episodes`` episodes to replay, each to the longest of ``horizons`` it holds
    (``context + h`` steps). The longest-reaching episodes are taken first (in store
    order within a tier), so every horizon gets as many episodes as the store has for it,
    up to ``episodes``. Refuses (:class:`~factory.errors.FactoryError`) when no episode
    holds even the shortest horizon."""
    from factory.errors import FactoryError

    wanted = sorted({int(h) for h in horizons})
    if not wanted or wanted[0] <= 0:
        raise FactoryError(f"horizons must be positive step counts, got {list(horizons)}")
    lengths = [int(n) for n in store.episode_lengths]
    reach = {
        i: max((h for h in wanted if context + h <= n), default=0) for i, n in enumerate(lengths)
    }
    chosen = sorted(sorted((i for i in reach if reach[i]), key=lambda i: -reach[i])[:episodes])
    longest = max(lengths, default=0)
    if not chosen:
        raise FactoryError(
            f"{store.path} has no episode of at least {context + wanted[0]} steps (context "
            f"{context} + horizon {wanted[0]}, the shortest asked for); the longest has "
            f"{longest}: give --horizons that fit"
        )
    groups = {
        h: replay_set(store, [i for i in chosen if reach[i] == h], context, h)
        for h in sorted({reach[i] for i in chosen}, reverse=True)
    }
    counts = {h: sum(reach[i] >= h for i in chosen) for h in wanted}
    skipped = {
        h: f"no episode of at least {context + h} steps (context {context} + {h}); "
        f"the longest has {longest}"
        for h, n in counts.items()
        if n == 0
    }
    return ReplayPlan(groups, {h: n for h, n in counts.items() if n}, skipped)


@dataclass(frozen=True)
class Replayed:
    """A replay's output: frames (E, T, H, W, 3) uint8, task_state (E, T, D) float32 (the
    model's own task state at every step: PushT's block pose), views: camera -> (E, T, H,
    W, 3) uint8 for the cameras after the main one that the model renders (its steps'
    ``views``; none for a kind that renders the main camera only)."""

    frames: np.ndarray
    task_state: np.ndarray
    views: dict[str, np.ndarray] = field(default_factory=dict)


def rollout_replay(
    model: RolloutModel, rs: ReplaySet, seed: int = 0, from_frames: bool = False
) -> Replayed:
    """Replay real actions from real context (and its states, unless ``from_frames``)."""
    k = rs.context
    states = None if from_frames else rs.world_states()
    model.start(
        rs.frames[:, :k], rs.actions[:, : k - 1], seed=seed,
        states=None if states is None else states[:, :k],
    )  # fmt: skip
    steps = model.step_many(rs.actions[:, k - 1 : rs.frames.shape[1] - 1])
    frames = np.stack([s.frames for s in steps], axis=1)
    if all(s.task_state is not None for s in steps):
        task = np.stack([np.asarray(s.task_state) for s in steps], axis=1)
    else:
        flat = frames.reshape(-1, *frames.shape[2:])
        task = real_block_pose(model, flat).reshape(*frames.shape[:2], -1)
    return Replayed(frames=frames, task_state=task.astype(np.float32), views=_step_views(steps))


def _step_views(steps: Sequence[Any]) -> dict[str, np.ndarray]:
    """The other cameras' frames (E, T, H, W, 3) that every step renders (a step's
    ``views``, camera -> (E, H, W, 3), where its kind has them)."""
    per_step = [s.views for s in steps]
    shared = set.intersection(*(set(v) for v in per_step)) if per_step else set()
    return {cam: np.stack([v[cam] for v in per_step], axis=1) for cam in sorted(shared)}


def horizon_metrics(
    replays: Sequence[tuple[ReplaySet, Replayed]], horizons: Sequence[int] = HORIZONS
) -> dict[str, dict[str, float]]:
    """Per-horizon {episodes, psnr, ssim, iou, agent_iou, block_err_px (mean),
    block_err_px_median, angle_err_deg (mean), angle_err_deg_median, copy_*}, each over
    every replayed episode that reaches the horizon (pooled across the replays); a horizon
    none reaches is left out."""
    result: dict[str, dict[str, float]] = {}
    for h in horizons:
        reached = [(rs, rep) for rs, rep in replays if h <= rep.frames.shape[1]]
        if not reached:
            continue
        gen = np.concatenate([rep.frames[:, h - 1] for _, rep in reached])
        real = np.concatenate([rs.frames[:, rs.context - 1 + h] for rs, _ in reached])
        last = np.concatenate([rs.frames[:, rs.context - 1] for rs, _ in reached])
        block = np.concatenate([rep.task_state[:, h - 1] for _, rep in reached])
        truth = np.concatenate([rs.task_state[:, rs.context - 1 + h] for rs, _ in reached])
        result[str(h)] = {"episodes": len(gen), **_horizon_row(gen, real, last, block, truth)}
    return result


def _horizon_row(
    gen: np.ndarray, real: np.ndarray, last: np.ndarray, block: np.ndarray, truth: np.ndarray
) -> dict[str, float]:
    """One horizon's metrics: generated, real and last-context frames (E, H, W, 3) uint8,
    the model's block poses and the real ones (E, 3)."""
    pos, ang = m.block_pose_errors(block, truth)
    return {
        "psnr": m.psnr(gen, real),
        "ssim": m.ssim(gen, real),
        "iou": _mean_iou(m.t_mask(gen), m.t_mask(real)),
        "agent_iou": _mean_iou(m.agent_mask(gen), m.agent_mask(real)),
        "block_err_px": float(pos.mean()),
        "block_err_px_median": float(np.median(pos)),
        "angle_err_deg": float(ang.mean()),
        "angle_err_deg_median": float(np.median(ang)),
        "copy_psnr": m.psnr(last, real),
        "copy_iou": _mean_iou(m.t_mask(last), m.t_mask(real)),
        "copy_agent_iou": _mean_iou(m.agent_mask(last), m.agent_mask(real)),
    }


def _mean_iou(pred: np.ndarray, true: np.ndarray) -> float:
    """Mean per-frame IoU of (E, H, W) masks."""
    return float(np.mean([m.iou(p, t) for p, t in zip(pred, true, strict=True)]))


def reconstruction_metrics(
    model: RolloutModel, frames: np.ndarray, states: np.ndarray | None
) -> dict[str, float | str]:
    """PSNR and T/agent IoU of the model's own re-rendering of real frames (N, H, W, 3)
    uint8 (``recon_of``: the latent kind's autoencoder; a state kind's renderer at the
    true states (N, S))."""
    recon = np.concatenate(
        [
            model.reconstruct(frames[i : i + 64], None if states is None else states[i : i + 64])
            for i in range(0, len(frames), 64)
        ]
    )
    return {
        "recon_of": model.reconstructs,
        "recon_psnr": m.psnr(recon, frames),
        "recon_iou": _mean_iou(m.t_mask(recon), m.t_mask(frames)),
        "recon_agent_iou": _mean_iou(m.agent_mask(recon), m.agent_mask(frames)),
    }


@dataclass
class StabilityStats:
    """Running statistics of a long rollout, fed one frame at a time."""

    real_t_fraction: float
    real_mean: float
    window: int = 300
    frames: int = 0
    nan: bool = False
    found: int = 0
    _t_sum: float = 0.0
    _mean_sum: float = 0.0
    _n_in_window: int = 0
    worst_t_ratio_low: float = float("inf")
    worst_t_ratio_high: float = 0.0
    worst_mean_drift: float = 0.0

    def add(self, frame: np.ndarray, block_pose: np.ndarray, finite: bool) -> None:
        """frame: (H, W, 3) uint8; block_pose: (3,) the model's reading of the block."""
        self.frames += 1
        self.nan = self.nan or not finite
        mask = m.t_mask(frame)
        self.found += int(block_found(mask, block_pose))
        self._t_sum += float(mask.mean())
        self._mean_sum += float(frame.mean())
        self._n_in_window += 1
        if self._n_in_window == self.window:
            self._close_window()

    def _close_window(self) -> None:
        ratio = self._t_sum / self._n_in_window / max(self.real_t_fraction, 1e-9)
        drift = abs(self._mean_sum / self._n_in_window / self.real_mean - 1.0)
        self.worst_t_ratio_low = min(self.worst_t_ratio_low, ratio)
        self.worst_t_ratio_high = max(self.worst_t_ratio_high, ratio)
        self.worst_mean_drift = max(self.worst_mean_drift, drift)
        self._t_sum = self._mean_sum = 0.0
        self._n_in_window = 0

    def summary(self) -> dict[str, float | int | bool]:
        """JSON-able: frames, nan, t_fraction_ratio (worst window), block_found_frac, ..."""
        if self._n_in_window:
            self._close_window()
        low, high = self.worst_t_ratio_low, self.worst_t_ratio_high
        worst = low if abs(low - 1.0) >= abs(high - 1.0) else high
        return {
            "frames": self.frames,
            "nan": self.nan,
            "t_fraction_ratio": float(worst),
            "t_fraction_ratio_min": float(low),
            "t_fraction_ratio_max": float(high),
            "mean_intensity_drift": float(self.worst_mean_drift),
            "block_found_frac": self.found / max(self.frames, 1),
            "window": self.window,
        }


def block_found(t_mask: np.ndarray, block_pose: np.ndarray, tol_px: float = 40.0) -> bool:
    """Whether the model's reading of the block agrees with a visible T in the frame.

    True when the frame shows at least a quarter of a T's pixels and their centroid lies
    within ``tol_px`` board pixels of the centroid of the T at the read pose.
    """
    from factory.envs.pusht_geometry import BOARD_SIZE, t_polygon

    h, w = t_mask.shape
    expected_pixels = 0.027 * h * w  # a whole T covers about 2.7% of the frame
    if t_mask.sum() < 0.25 * expected_pixels:
        return False
    ys, xs = np.nonzero(t_mask)
    seen = np.array([(xs.mean() + 0.5) * BOARD_SIZE / w, (ys.mean() + 0.5) * BOARD_SIZE / h])
    centroid = t_polygon(np.asarray(block_pose, np.float64)).centroid
    return bool(np.hypot(seen[0] - centroid.x, seen[1] - centroid.y) <= tol_px)


ProgressFn = Callable[[int, int], None]


def reader_metrics(model: RolloutModel, store: EpisodeStore, stride: int = 5) -> dict[str, float]:
    """The errors of the model's frame reader (``model.frame_reader``: a task head, the
    probe or the object-state reader) on real frames: every ``stride``-th frame of every
    episode, by :func:`factory.eval.metrics.reader_errors`.

    Returns mean/median/p95 agent and block position error (board px), mean/median angle
    error (deg) and the number of frames.
    """
    frames, state, gt = [], [], []
    for i in range(store.n_episodes):
        ep = store.episode(i)
        frames.append(ep["image"][::stride])
        state.append(ep["state"][::stride])
        gt.append(ep["task_state"][::stride])
    real = np.concatenate(frames)
    reads = [model.read_frames(real[i : i + 256]) for i in range(0, len(real), 256)]
    agent_all = np.concatenate([a for a, _ in reads])
    block_all = np.concatenate([b for _, b in reads])
    true_agent, true_block = np.concatenate(state)[:, :2], np.concatenate(gt)
    err = m.reader_errors(agent_all, true_agent, block_all, true_block)
    agent_err, block_err, angle_err = err["agent_err_px"], err["block_err_px"], err["angle_err_deg"]
    return {
        "frames": len(real),
        "agent_err_px": float(agent_err.mean()),
        "agent_err_px_p95": float(np.percentile(agent_err, 95)),
        "block_err_px": float(block_err.mean()),
        "block_err_px_median": float(np.median(block_err)),
        "block_err_px_p95": float(np.percentile(block_err, 95)),
        "angle_err_deg": float(angle_err.mean()),
        "angle_err_deg_median": float(np.median(angle_err)),
        "agent_err_px_median": float(np.median(agent_err)),
    }
