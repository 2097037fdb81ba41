"""Training stages of the ``object_set`` kind: renderer, dynamics, reader.

Each part's module returns ``(loss, logs)`` and every stage runs through the one loop
(:func:`factory.train.loop.train_part`): budgets, checkpoints and resume as for any part.

- ``renderer``: every camera's frames (the store's ``image`` and ``image_<cam>``) against
  their true states. A fresh renderer starts each camera's background at the per-pixel
  median of its frames and its homography at a least-squares fit to where the agent is
  seen when it alone moves (:func:`fit_camera`), its layers' lift at ``lift_start``
  (:meth:`CameraRenderer.start_lift`).
- ``dynamics``: the agent's linear map is fitted by least squares on up to 50,000
  transitions (then frozen), then the interaction network trains on self-unrolled windows
  (the unroll grows over the budget); ``motion_frac`` of the windows are drawn from those
  where some disc moves, a tenth start at an episode start with a rollout's padding.
- ``reader``: the heatmap net on top frames against their states.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from factory.errors import FactoryError
from factory.model.object_set.config import ObjectSetConfig
from factory.model.object_set.dynamics import SetDynamics
from factory.model.object_set.homography import moved_blob_centres, robust_homography
from factory.model.object_set.reader import SetReader
from factory.model.object_set.renderer import CameraRenderer, SetRenderer
from factory.record.output import view_key
from factory.store import EpisodeStore
from factory.train.accel import gather_frames
from factory.train.data import EpisodeData, WindowSampler, sample_frames
from factory.train.loop import (
    Budget,
    LoopState,
    ProgressFn,
    TrainConfig,
)
from factory.train.state_parts import PartData, StepFn, train_state_part, windows

log = logging.getLogger(__name__)

STAGES = ("renderer", "dynamics", "reader")
SHARES = {"renderer": 0.25, "dynamics": 0.5, "reader": 0.25}
STAGE_TRAIN = {
    "renderer": TrainConfig(batch_size=16, lr=1e-1, warmup_steps=50),
    "dynamics": TrainConfig(batch_size=128, lr=2e-3, warmup_steps=200),
    "reader": TrainConfig(batch_size=32, lr=2e-3, warmup_steps=100),
}
MIN_PAIRS = 8  # correspondences a camera's homography fit needs


@dataclass(frozen=True)
class SetSchedule:
    """Unroll lengths over the budget (``unrolls[i]`` from progress ``at[i]`` on) and the
    window mix: ``motion_frac`` with moving discs, ``pad_prob`` at an episode start."""

    unrolls: tuple[int, ...] = (2, 4, 8)
    at: tuple[float, ...] = (0.0, 0.25, 0.5)
    motion_frac: float = 0.5
    pad_prob: float = 0.1

    def unroll(self, progress: float) -> int:
        return [u for u, a in zip(self.unrolls, self.at, strict=True) if progress >= a][-1]


def set_states(data: EpisodeData) -> np.ndarray:
    """(N, 2 + 2 K) float32 agent xy + every disc's xy; FactoryError without them."""
    if data.task_state is None:
        raise FactoryError(
            f"{data.source} has no disc positions (data/task_state); the object_set kind "
            "trains on them. For pixels only, use --kind latent_grid"
        )
    return np.concatenate([data.state[:, :2], data.task_state], axis=1).astype(np.float32)


def load_views(data: EpisodeData, cameras: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Each camera's frames (N, H, W, 3) uint8: the data's frames for the main one, the
    store's ``image_<cam>`` for the others; FactoryError where the store lacks one."""
    views = {cameras[0]: data.frames}
    if len(cameras) == 1:
        return views
    if data.source is None:
        raise FactoryError("the data has no store to read the other cameras from")
    with EpisodeStore.open(Path(data.source), mode="r") as store:
        missing = [c for c in cameras[1:] if view_key(c) not in store.schema.keys]
        if missing:
            raise FactoryError(f"{data.source} has no data/{view_key(missing[0])} key")
        arrays = store.load([view_key(c) for c in cameras[1:]])
    views.update({c: arrays[view_key(c)] for c in cameras[1:]})
    return views


def check_set_store(path: Path) -> None:
    """Refuse a store the object_set kind cannot learn from: its task state must be the
    x, y of a set of discs (an even width)."""
    with EpisodeStore.open(path, mode="r") as store:
        spec = store.schema.keys.get("task_state")
        width = int(np.prod(spec.shape)) if spec is not None else 0
        env = store.attrs.get("env")
    if width == 0 or width % 2:
        raise FactoryError(
            f"{path} (env {env}) has a task state of {width} values, not the x, y of a set of "
            "discs; the object_set kind is for disc worlds (pile), object_state for PushT"
        )


FRESH_RENDERER: dict[str, Any] = {
    "layers": 2,
    "supersample": 1,
    "binary_weight": 0.0,
    "lift_start": 0.0,
    "learn_heights": True,
    "order_by_rise": True,
}
"""A fresh model's renderer, version 7's (the config's defaults are the version-1 renderer
that older model directories hold): two sprite layers per object kind at learned heights,
sampled once per pixel with their opacity free (so a sprite's soft edge can be the
world's own anti-aliasing), the lift starting at zero and free to put the second layer
above or below the first, each object's layers composited by where the learned geometry
shows them. docs/MODEL_CARD_pile.md has the ablations (version 2 for the layers, version
6 for sampling, opacity and heights, version 7 for the order)."""

FRESH_DYNAMICS: dict[str, Any] = {"edge_frames": True, "message_steps": 3}
"""A fresh model's dynamics, version 9's (the config's defaults are the board-axes network
with two rounds of messages that older model directories hold): every edge reads its
inputs in its own pair's frame (version 8: at an equal 12 minutes it beat the board-axes
network on every IoU cell and disc error of both held-out stores), and messages pass
three times per step, so a push reaches a disc three contacts away (version 9: at an
equal 90 CPU-minutes it beat two rounds on mean IoU over four held-out stores and on the
one-step error of discs hit by another disc). docs/MODEL_CARD_pile.md has both."""

SET_WORLDS = ("pile",)
"""Worlds whose stores train the ``object_set`` kind by default (a set of discs)."""


def store_env(path: Path) -> str | None:
    """The world a store was recorded in (its ``env`` attribute), or None."""
    with EpisodeStore.open(path, mode="r") as store:
        env = store.attrs.get("env")
    return None if env is None else str(env)


def store_set_config(path: Path, data: EpisodeData) -> ObjectSetConfig:
    """A fresh config for a store: its frame size, disc count (task state / 2), world
    (``env``), :data:`FRESH_RENDERER`, :data:`FRESH_DYNAMICS` and cameras (the main one, then every
    ``image_<cam>`` the store holds, in its ``cameras`` order)."""
    with EpisodeStore.open(path, mode="r") as store:
        attrs, keys = store.attrs, store.schema.keys
    named = [str(c) for c in attrs.get("cameras", [])]
    main = named[0] if named else "top"
    cameras = (main, *(c for c in named[1:] if view_key(c) in keys))
    assert data.task_state is not None
    base = ObjectSetConfig()
    size = data.image_shape[:2]
    return dataclasses.replace(
        base,
        dynamics=dataclasses.replace(base.dynamics, **FRESH_DYNAMICS),
        renderer=dataclasses.replace(
            base.renderer, image_size=size, cameras=cameras, **FRESH_RENDERER
        ),
        reader=dataclasses.replace(base.reader, image_size=size),
        n_discs=data.task_state.shape[1] // 2,
        world=str(attrs.get("env", base.world)),
    )


def still_pairs(data: EpisodeData, states: np.ndarray, min_move: float) -> np.ndarray:
    """Frame indices t (M,) where t + 1 is in the same episode, no disc moved and the
    agent moved at least ``min_move`` px: the agent alone changed the frame."""
    last = np.zeros(len(states), dtype=bool)
    last[data.episode_ends - 1] = True
    t = np.nonzero(~last)[0]
    discs_still = np.all(states[t + 1, 2:] == states[t, 2:], axis=1)
    moved = np.linalg.norm(states[t + 1, :2] - states[t, :2], axis=1) >= min_move
    return t[discs_still & moved]


def fit_camera(
    cam: CameraRenderer, frames: np.ndarray, states: np.ndarray, pairs: np.ndarray, board: float
) -> int:
    """Start ``cam``'s homography at the least-squares fit of the agent's board position
    to where frames (N, H, W, 3) show it arrive, over frame pairs ``pairs`` (M,) (t, t+1:
    the agent alone moved), and its layers' lift from that homography
    (:meth:`CameraRenderer.start_lift`); keeps the identity with fewer than
    :data:`MIN_PAIRS` usable pairs. Returns the number of pairs used."""
    background = np.median(frames[:: max(1, len(frames) // 512)], axis=0).astype(np.uint8)
    centres, ok = moved_blob_centres(frames[pairs], frames[pairs + 1], background)
    n = int(ok.sum())
    if n < MIN_PAIRS:
        log.warning("only %d usable agent moves: the camera starts at the identity", n)
        return n
    target = states[pairs + 1, :2][ok] / (board / 2) - 1
    cam.set_homography(robust_homography(centres[ok].astype(np.float64), target))
    cam.start_lift()
    return n


def _to_float(frames: np.ndarray, idx: np.ndarray, device: str) -> Tensor:
    """uint8 frames[idx] -> (B, 3, H, W) float in [0, 1] on ``device`` (gathered there
    when the frames have a copy on it: :func:`factory.train.accel.hold_frames`)."""
    return gather_frames(frames, idx, device).permute(0, 3, 1, 2).float() / 255.0


def _renderer_step(module: SetRenderer, st: PartData) -> StepFn:
    views = load_views(st.data, module.cfg.cameras)
    if st.fresh:
        pairs = still_pairs(st.data, st.states, min_move=30.0)
        pairs = pairs[np.isin(pairs, st.frames_idx)]
        pairs = st.rng.permutation(pairs)[:2000]
        for name, frames in views.items():
            cam = module.camera(name)
            sample = st.rng.choice(st.frames_idx, min(512, len(st.frames_idx)))
            with torch.no_grad():
                cam.background.copy_(_to_float(frames, sample, "cpu").median(dim=0).values)
            used = fit_camera(cam, frames, st.states, pairs, module.cfg.board)
            log.info("camera %s: homography fitted on %d agent moves", name, used)

    def step_fn(ls: LoopState) -> dict[str, Tensor]:
        idx = sample_frames(st.frames_idx, st.batch, ls.rng)
        s = torch.from_numpy(st.states[idx]).to(st.device)
        target = {name: _to_float(f, idx, st.device) for name, f in views.items()}
        loss, logs = module.loss(s, target, ls.progress)
        return {"loss": loss, **logs}

    return step_fn


def _reader_step(module: SetReader, st: PartData) -> StepFn:
    def step_fn(ls: LoopState) -> dict[str, Tensor]:
        idx = sample_frames(st.frames_idx, st.batch, ls.rng)
        s = torch.from_numpy(st.states[idx]).to(st.device)
        loss, logs = module.loss(_to_float(st.data.frames, idx, st.device), s)
        return {"loss": loss, **logs}

    return step_fn


def moving_starts(sampler: WindowSampler, states: np.ndarray) -> np.ndarray:
    """The sampler's window starts whose first predicted transition (frame s+1 -> s+2)
    moves some disc."""
    s = sampler.valid
    return s[np.any(states[s + 2, 2:] != states[s + 1, 2:], axis=1)]


def _dynamics_step(module: SetDynamics, st: PartData, sched: SetSchedule) -> StepFn:
    samplers: dict[int, tuple[WindowSampler, np.ndarray]] = {}
    actions = st.data.actions
    if st.fresh:
        n = min(50_000, len(st.states))
        fit = WindowSampler(st.data, 3, st.train_eps).sample(n, st.rng)
        s, a = windows(st.states, actions, fit, st.device)
        log.info("agent map fitted by least squares: %.4f px", module.agent.fit(s[..., :2], a))
        if module.coast is not None:
            log.info("coasting factor fitted by least squares: %.4f", module.fit_coast(s))
    module.agent.requires_grad_(False)  # solved exactly; Adam's steps would only jitter it

    def step_fn(ls: LoopState) -> dict[str, Tensor]:
        u = sched.unroll(ls.progress)
        if u not in samplers:
            sampler = WindowSampler(st.data, u + 2, st.train_eps, sched.pad_prob, 1)
            samplers[u] = (sampler, moving_starts(sampler, st.states))
        sampler, moving = samplers[u]
        idx = sampler.sample(st.batch, ls.rng)
        k = round(sched.motion_frac * st.batch) if len(moving) else 0
        idx[:k] = ls.rng.choice(moving, k)[:, None] + np.arange(u + 2)[None]
        s, a = windows(st.states, actions, idx, st.device)
        loss, logs = module.loss(s, a, u, ls.generator)
        return {"loss": loss, "unroll": torch.tensor(float(u)), **logs}

    return step_fn


def train_set_part(
    stage: str,
    data: EpisodeData,
    out_dir: Path,
    config: ObjectSetConfig,
    budget: Budget,
    *,
    device: str = "cpu",
    resume: bool = False,
    on_progress: ProgressFn | None = None,
    train_cfg: TrainConfig | None = None,
    schedule: SetSchedule | None = None,
) -> dict[str, float]:
    """Train part ``stage`` (renderer, dynamics or reader) of an object_set model."""
    if stage not in STAGES:
        raise FactoryError(f"unknown object_set stage {stage!r}; expected {', '.join(STAGES)}")
    states = set_states(data)
    if states.shape[1] != config.state_dim:
        raise FactoryError(
            f"{data.source} holds {(states.shape[1] - 2) // 2} discs, the model {config.n_discs}"
        )
    sched = schedule or SetSchedule()

    def step_for(module: nn.Module, st: PartData) -> StepFn:
        if isinstance(module, SetRenderer):
            return _renderer_step(module, st)
        if isinstance(module, SetReader):
            return _reader_step(module, st)
        assert isinstance(module, SetDynamics)
        return _dynamics_step(module, st, sched)

    tc = train_cfg or STAGE_TRAIN[stage]
    return train_state_part(stage, data, states, out_dir, config, budget, tc, step_for,
                            device=device, resume=resume, on_progress=on_progress)  # fmt: skip
