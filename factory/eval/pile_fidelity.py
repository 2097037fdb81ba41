"""Fidelity of a world model on pile episodes (``factory eval fidelity`` on a pile store).

The same open-loop replay as PushT's (:mod:`factory.eval.fidelity`), scored with the pile
metrics of :mod:`factory.eval.pile_metrics` at each horizon: PSNR / SSIM and the agent-mask
IoU of the top view, the disc-mask IoU of each camera the model renders (the top one; the
side one where its steps carry ``views["side"]``) beside the copy-last-frame baseline, the
swept-fraction and matched disc-position errors of the model's own disc state (where it
has one as wide as the store's), and the cross-view consistency of the generated frames
(``count_gap``: |discs the top view shows - discs the side view shows|, counted by whole
silhouettes, which the side view's nearer pucks hide; ``face_count_gap`` the same counted
by top faces, which nothing hides but a soft render inflates; ``centroid_gap_px``: the
distance between the disc centroids the two views imply; see
:func:`~factory.eval.pile_metrics.frame_discs`) beside the same on the real frames
(``real_*``: even the ground truth disagrees a little, so a perfect model matches these,
not zero).

The hold-still permanence check is :mod:`factory.eval.pile_permanence`.

Shapes: ``E`` episodes, ``H, W`` image size, ``D = 2 n`` the disc state (n discs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from factory.envs import recorded_world
from factory.eval import metrics as m
from factory.eval import pile_metrics as pm
from factory.eval.fidelity import Replayed, ReplayPlan, ReplaySet
from factory.eval.pile_layers import side_layer_heights
from factory.model.protocol import RolloutModel
from factory.store import EpisodeStore

Row = dict[str, float | int | None]
Pair = tuple[ReplaySet, Replayed]


def is_pile_store(store: EpisodeStore) -> bool:
    """Whether ``store`` holds pile episodes (recorded in the world or in its model)."""
    return recorded_world(store.attrs) == "pile"


def _mean(x: np.ndarray) -> float | None:
    """Mean of the finite values, None when there is none (JSON has no NaN)."""
    x = np.asarray(x, np.float64)
    return float(x[np.isfinite(x)].mean()) if np.isfinite(x).any() else None


def disc_state_problem(width: int, store_width: int) -> str | None:
    """Why a model's task state of ``width`` numbers cannot be scored against the store's
    disc state of ``store_width`` (None: it can)."""
    if width == store_width:
        return None
    return (
        f"the model's task state has {width} numbers, the store's {store_width} (every disc's x, y)"
    )


def check_pile_model(model: RolloutModel, store: EpisodeStore) -> None:
    """Refuse (:class:`~factory.errors.FactoryError`) a model that starts from world states
    of another width than the pile store's (agent x, y, then every disc's x, y): a model of
    another world, which the replay could not start."""
    from factory.errors import FactoryError

    width = 2 + int(store.schema.keys["task_state"].shape[0])
    dim = getattr(model.config, "state_dim", None)
    if model.starts_from_states and isinstance(dim, int) and dim != width:
        raise FactoryError(
            f"the {model.kind} model's world state has {dim} numbers, the pile store "
            f"{store.path}'s {width} (agent x, y and every disc's x, y): a model of another world"
        )


def pile_skipped(replays: Sequence[Pair]) -> dict[str, str]:
    """metric -> why it is not reported for these replays (none: every metric is)."""
    out: dict[str, str] = {}
    if not all("side" in rep.views for _, rep in replays):
        out["disc_iou_side"] = out["count_gap"] = "the model renders the top camera only"
    if not all("side" in rs.views for rs, _ in replays):
        out["real_count_gap"] = "the store records no side camera"
    rs, rep = replays[0]
    problem = disc_state_problem(rep.task_state.shape[-1], rs.task_state.shape[-1])
    if problem is not None:
        out["disc_err_px"] = out["swept_err"] = problem
    return out


@dataclass(frozen=True)
class AtHorizon:
    """One horizon's arrays pooled over the replays that reach it: generated ``gen``, real
    ``real`` and last-context ``last`` frames (E, H, W, 3) of each camera (camera ->
    frames; the generated ones only for the cameras the model renders), the model's disc
    state ``pred`` (E, D') and the real one ``true`` (E, D)."""

    gen: dict[str, np.ndarray]
    real: dict[str, np.ndarray]
    last: dict[str, np.ndarray]
    pred: np.ndarray
    true: np.ndarray

    @classmethod
    def gather(cls, reached: Sequence[Pair], h: int) -> AtHorizon:
        """The arrays of step ``h`` (1 = the first generated frame) of ``reached``."""

        def pool(
            frames: Sequence[dict[str, np.ndarray]], at: Sequence[int]
        ) -> dict[str, np.ndarray]:
            cams = set.intersection(*(set(f) for f in frames))
            return {
                c: np.concatenate([f[c][:, t] for f, t in zip(frames, at, strict=True)])
                for c in cams
            }

        real = [{"top": rs.frames, **rs.views} for rs, _ in reached]
        gen = [{"top": rep.frames, **rep.views} for _, rep in reached]
        now = [rs.context - 1 + h for rs, _ in reached]
        return cls(
            gen=_pool(gen, [h - 1] * len(reached)),
            real=_pool(real, now),
            last=_pool(real, [rs.context - 1 for rs, _ in reached]),
            pred=np.concatenate([rep.task_state[:, h - 1] for _, rep in reached]),
            true=np.concatenate([rs.task_state[:, rs.context - 1 + h] for rs, _ in reached]),
        )


def _pool(frames: Sequence[dict[str, np.ndarray]], at: Sequence[int]) -> dict[str, np.ndarray]:
    """camera -> the frames (E, H, W, 3) at step ``at[i]`` of every replay i's (E_i, T,
    H, W, 3), for the cameras every replay has."""
    cams = set.intersection(*(set(f) for f in frames))
    return {c: np.concatenate([f[c][:, t] for f, t in zip(frames, at, strict=True)]) for c in cams}


def pile_horizon_metrics(replays: Sequence[Pair], horizons: Sequence[int]) -> dict[str, Row]:
    """Per horizon the pile row (see the module), over every replayed episode that reaches
    it (pooled across the replays); a horizon none reaches is left out."""
    skipped = pile_skipped(replays) if replays else {}
    result: dict[str, Row] = {}
    for h in horizons:
        reached = [(rs, rep) for rs, rep in replays if h <= rep.frames.shape[1]]
        if not reached:
            continue
        at = AtHorizon.gather(reached, h)
        row: Row = {"episodes": len(at.true), **_top_row(at)}
        if "disc_iou_side" not in skipped:
            row.update(_side_row(at))
        if "real_count_gap" not in skipped:
            gap, dist = pm.cross_view(at.real["top"], at.real["side"])
            face, _ = pm.cross_view(at.real["top"], at.real["side"], faces=True)
            row["real_count_gap"] = _mean(gap)
            row["real_face_count_gap"] = _mean(face)
            row["real_centroid_gap_px"] = _mean(dist)
        if "disc_err_px" not in skipped:
            err = pm.disc_position_error(at.pred, at.true)
            row["swept_err"] = _mean(pm.swept_fraction_error(at.pred, at.true))
            row["disc_err_px"] = _mean(err)
            row["disc_err_px_median"] = float(np.median(err))
        result[str(h)] = row
    return result


def _top_row(at: AtHorizon) -> Row:
    """The top camera's frame metrics."""
    gen, real, last = at.gen["top"], at.real["top"], at.last["top"]
    return {
        "psnr": m.psnr(gen, real),
        "ssim": m.ssim(gen, real),
        "agent_iou": _mean(pm.mask_iou(m.agent_mask(gen), m.agent_mask(real))),
        "disc_iou_top": _mean(pm.disc_iou(gen, real, "top")),
        "copy_psnr": m.psnr(last, real),
        "copy_disc_iou_top": _mean(pm.disc_iou(last, real, "top")),
    }


def _side_row(at: AtHorizon) -> Row:
    """The side camera's disc IoU and the generated frames' cross-view consistency."""
    gen, real, last = at.gen["side"], at.real["side"], at.last["side"]
    gap, dist = pm.cross_view(at.gen["top"], gen)
    face, _ = pm.cross_view(at.gen["top"], gen, faces=True)
    return {
        "disc_iou_side": _mean(pm.disc_iou(gen, real, "side")),
        "copy_disc_iou_side": _mean(pm.disc_iou(last, real, "side")),
        "count_gap": _mean(gap),
        "face_count_gap": _mean(face),
        "centroid_gap_px": _mean(dist),
    }


def pile_reconstruction(model: RolloutModel, plan: ReplayPlan) -> dict[str, Any]:
    """PSNR, disc-mask and agent-mask IoU of the model's own re-rendering (top camera) of
    every frame of every replayed window (``recon_of`` names how it re-renders), and, where
    the model renders the side camera from a state, the side camera's disc-mask IoU at the
    true states (``recon_disc_iou_side``) and the top-face counts of both views there
    (:func:`recon_face_counts`); for a state renderer with a side camera, where its
    sprite layers lie in the world's geometry (``side_layers``,
    :func:`~factory.eval.pile_layers.side_layer_heights`)."""
    groups = list(plan.groups.values())
    frames = np.concatenate([rs.frames.reshape(-1, *rs.frames.shape[2:]) for rs in groups])
    states = [rs.world_states() for rs in groups]
    flat = None
    if all(s is not None for s in states):
        flat = np.concatenate([s.reshape(-1, s.shape[-1]) for s in states if s is not None])
    recon = np.concatenate(
        [
            model.reconstruct(frames[i : i + 64], None if flat is None else flat[i : i + 64])
            for i in range(0, len(frames), 64)
        ]
    )
    out: dict[str, Any] = {
        "recon_of": model.reconstructs,
        "recon_psnr": m.psnr(recon, frames),
        "recon_disc_iou": _mean(pm.disc_iou(recon, frames, "top")),
        "recon_agent_iou": _mean(pm.mask_iou(m.agent_mask(recon), m.agent_mask(frames))),
    }
    side = _side_frames(model, groups, flat)
    if side is not None:
        gen, real = side
        out["recon_disc_iou_side"] = _mean(pm.disc_iou(gen, real, "side"))
        out.update(recon_face_counts({"top": recon, "side": gen}, {"top": frames, "side": real}))
    layers = side_layer_heights(model)
    if layers is not None:
        out["side_layers"] = layers
    return out


def _side_frames(
    model: RolloutModel, groups: list[ReplaySet], flat: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray] | None:
    """The side frames (N, H, W, 3) a state kind's renderer draws at the true states
    ``flat`` (N, S) of every frame of ``groups``, and the real ones (None: no states, no
    side camera in the store, or a model that does not render the side camera from a
    state)."""
    render_views = getattr(model, "render_views", None)
    if flat is None or render_views is None or "side" not in getattr(model, "cameras", ()):
        return None
    if not all("side" in rs.views for rs in groups):
        return None
    real = np.concatenate(
        [rs.views["side"].reshape(-1, *rs.views["side"].shape[2:]) for rs in groups]
    )
    gen = np.concatenate([render_views(flat[i : i + 64])["side"] for i in range(0, len(flat), 64)])
    return gen, real


RECON_COUNT_STRIDE = 5
"""The top-face counts at the true states read every this many frames (each read costs
a few ms per frame and camera)."""


def recon_face_counts(
    gen: dict[str, np.ndarray], real: dict[str, np.ndarray], stride: int = RECON_COUNT_STRIDE
) -> dict[str, float | int | None]:
    """The top-face counts (:func:`~factory.eval.pile_metrics.frame_discs` with faces) of
    a renderer's frames at the true states, camera -> (N, H, W, 3), against the real
    frames', on every ``stride``-th frame: per camera the mean signed difference of the
    unrounded counts (``recon_face_bias_<cam>``, discs: where a soft render reads as more
    face), and the two views' count gap on the rendered and on the real frames
    (``recon_face_count_gap``, ``recon_real_face_count_gap``): the renderer's own share of
    the rollouts' ``face_count_gap``, before any dynamics error."""
    est = {
        (cam, which): pm.face_estimates(frames[cam][::stride], cam)
        for which, frames in (("gen", gen), ("real", real))
        for cam in ("top", "side")
    }
    out: dict[str, float | int | None] = {"recon_count_frames": len(est["top", "gen"])}
    for cam in ("top", "side"):
        out[f"recon_face_bias_{cam}"] = _mean(est[cam, "gen"] - est[cam, "real"])
    for which, key in (("gen", "recon_face_count_gap"), ("real", "recon_real_face_count_gap")):
        gap = np.abs(np.round(est["top", which]) - np.round(est["side", which]))
        out[key] = _mean(gap)
    return out


def pile_reader_metrics(
    model: RolloutModel, store: EpisodeStore, stride: int = 5
) -> dict[str, Any]:
    """The errors of the model's frame reader (``model.read_frames``) on every
    ``stride``-th real top frame of every episode: agent position error (px, mean and
    p95), matched disc position error (px, mean, median and p95) and swept-fraction error
    (mean); ``skipped`` with the reason when its disc reading is not the store's width."""
    frames, agents, discs = [], [], []
    for i in range(store.n_episodes):
        ep = store.episode(i)
        frames.append(ep["image"][::stride])
        agents.append(ep["state"][::stride, :2])
        discs.append(ep["task_state"][::stride])
    real = np.concatenate(frames)
    reads = [model.read_frames(real[i : i + 256]) for i in range(0, len(real), 256)]
    agent = np.concatenate([np.asarray(a) for a, _ in reads])
    read = np.concatenate([np.asarray(d) for _, d in reads])
    true_agent, true = np.concatenate(agents), np.concatenate(discs)
    result: dict[str, Any] = {"reader": model.frame_reader, "frames": len(real)}
    agent_err = m.position_error(agent[:, :2], true_agent)
    result.update(agent_err_px=float(agent_err.mean()), agent_err_px_p95=_p95(agent_err))
    problem = disc_state_problem(read.shape[-1], true.shape[-1])
    if problem is not None:
        return {**result, "skipped": problem}
    err = pm.disc_position_error(read, true)
    return {
        **result,
        "disc_err_px": float(err.mean()),
        "disc_err_px_median": float(np.median(err)),
        "disc_err_px_p95": _p95(err),
        "swept_err": float(pm.swept_fraction_error(read, true).mean()),
    }


def _p95(x: np.ndarray) -> float:
    return float(np.percentile(x, 95))
