"""Frame and task-state fidelity of a world model against ground-truth episodes (DESIGN §4).

Open-loop replay: each held-out episode's first ``context`` real frames start the model,
its real actions drive it, and the generated frame at horizon ``h`` is compared with the
real frame ``h`` steps after the last context frame, beside the copy-last-frame baseline.

Shapes: ``E`` episodes, ``K`` context frames, ``T`` horizon, ``H, W`` image size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from factory.eval import metrics as m
from factory.model import WorldModel
from factory.store import EpisodeStore

log = logging.getLogger(__name__)
HORIZONS = (1, 10, 50, 100)


@dataclass(frozen=True)
class ReplaySet:
    """Real windows to replay: frames (E, K+T, H, W, 3) uint8, actions (E, K+T, A) float32,
    gt_state (E, K+T, 3) float32 (PushT block x, y, angle)."""

    frames: np.ndarray
    actions: np.ndarray
    gt_state: np.ndarray
    context: int


def replay_set(store: EpisodeStore, episodes: int, context: int, horizon: int) -> ReplaySet:
    """The first ``context + horizon`` steps of up to ``episodes`` long-enough episodes."""
    need = context + horizon
    chosen = [i for i, n in enumerate(store.episode_lengths) if n >= need][:episodes]
    if not chosen:
        from factory.errors import FactoryError

        raise FactoryError(
            f"{store.path} has no episode of at least {need} steps for horizon {horizon}"
        )
    eps = [store.episode(i) for i in chosen]
    return ReplaySet(
        frames=np.stack([e["image"][:need] for e in eps]),
        actions=np.stack([e["action"][:need] for e in eps]).astype(np.float32),
        gt_state=np.stack([e["gt_state"][:need] for e in eps]).astype(np.float32),
        context=context,
    )


def rollout_replay(model: WorldModel, rs: ReplaySet, seed: int = 0) -> np.ndarray:
    """Generated frames (E, T, H, W, 3) uint8 for real actions from real context."""
    k = rs.context
    model.start(rs.frames[:, :k], rs.actions[:, : k - 1], seed=seed)
    steps = model.step_many(rs.actions[:, k - 1 : rs.frames.shape[1] - 1])
    return np.stack([s.frames for s in steps], axis=1)


def horizon_metrics(
    model: WorldModel, rs: ReplaySet, generated: np.ndarray, horizons: Sequence[int] = HORIZONS
) -> dict[str, dict[str, float]]:
    """Per-horizon {psnr, ssim, iou, agent_iou, block_err_px, angle_err_deg, copy_*}."""
    k = rs.context
    last_context = rs.frames[:, k - 1]
    result: dict[str, dict[str, float]] = {}
    for h in horizons:
        if h > generated.shape[1]:
            continue
        gen, real = generated[:, h - 1], rs.frames[:, k - 1 + h]
        _, block = model.probe_frames(gen)
        truth = rs.gt_state[:, k - 1 + h]
        result[str(h)] = {
            "psnr": m.psnr(gen, real),
            "ssim": m.ssim(gen, real),
            "iou": _mean_iou(m.t_mask(gen), m.t_mask(real)),
            "agent_iou": _mean_iou(m.agent_mask(gen), m.agent_mask(real)),
            "block_err_px": float(m.position_error(block[:, :2], truth[:, :2]).mean()),
            "angle_err_deg": float(m.angle_error_deg(block[:, 2], truth[:, 2]).mean()),
            "copy_psnr": m.psnr(last_context, real),
            "copy_iou": _mean_iou(m.t_mask(last_context), m.t_mask(real)),
            "copy_agent_iou": _mean_iou(m.agent_mask(last_context), m.agent_mask(real)),
        }
    return result


def _mean_iou(pred: np.ndarray, true: np.ndarray) -> float:
    """Mean per-frame IoU of (E, H, W) masks."""
    return float(np.mean([m.iou(p, t) for p, t in zip(pred, true, strict=True)]))


def autoencoder_metrics(model: WorldModel, frames: np.ndarray) -> dict[str, float]:
    """Reconstruction PSNR and T/agent IoU of frames (N, H, W, 3) uint8."""
    recon = np.concatenate(
        [model.decode(model.encode(frames[i : i + 64])) for i in range(0, len(frames), 64)]
    )
    return {
        "ae_psnr": m.psnr(recon, frames),
        "ae_iou": _mean_iou(m.t_mask(recon), m.t_mask(frames)),
        "ae_agent_iou": _mean_iou(m.agent_mask(recon), m.agent_mask(frames)),
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
        """frame: (H, W, 3) uint8; block_pose: (3,) the probe's estimate."""
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
    """Whether the probe's block estimate agrees with a visible T in the frame.

    True when the frame shows at least a quarter of a T's pixels and their centroid lies
    within ``tol_px`` board pixels of the centroid of the T at the probe's pose.
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


def probe_metrics(model: WorldModel, store: EpisodeStore, stride: int = 5) -> dict[str, float]:
    """The probe's errors on real frames: every ``stride``-th frame of every episode.

    Returns mean/p95 agent and block position error (board px), mean angle error (deg)
    and the number of frames.
    """
    frames, state, gt = [], [], []
    for i in range(store.n_episodes):
        ep = store.episode(i)
        frames.append(ep["image"][::stride])
        state.append(ep["state"][::stride])
        gt.append(ep["gt_state"][::stride])
    real = np.concatenate(frames)
    reads = [model.probe_frames(real[i : i + 256]) for i in range(0, len(real), 256)]
    agent_all = np.concatenate([a for a, _ in reads])
    block_all = np.concatenate([b for _, b in reads])
    true_agent, true_block = np.concatenate(state)[:, :2], np.concatenate(gt)
    agent_err = m.position_error(agent_all, true_agent)
    block_err = m.position_error(block_all[:, :2], true_block[:, :2])
    return {
        "frames": len(real),
        "agent_err_px": float(agent_err.mean()),
        "agent_err_px_p95": float(np.percentile(agent_err, 95)),
        "block_err_px": float(block_err.mean()),
        "block_err_px_p95": float(np.percentile(block_err, 95)),
        "angle_err_deg": float(m.angle_error_deg(block_all[:, 2], true_block[:, 2]).mean()),
    }
