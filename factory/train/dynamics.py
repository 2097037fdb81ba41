"""Stage 2: train the latent dynamics (autoencoder frozen) on the config's objective.

The dataset is encoded once with the frozen autoencoder (cached in the model directory as
``latents.cache.safetensors``, keyed by the autoencoder weights and the data). Each step
samples windows of latents inside one episode (some padded at episode starts, as the
rollout pads) and noises the context (level ~ U(ctx_noise_min, ctx_noise_max),
Diffusion-Forcing style). Then, by ``DynamicsConfig.objective``:

- ``x0`` (the shipped recipe, ``iws_unroll``): one jump from pure noise to the next
  ``chunk`` latents, MSE, over ``grad_unroll`` chained predictions back-propagated through
  the chain (:func:`x0_loss`);
- ``consistency`` (the ``baseline`` recipe, the first shipped model): one improved-CT step
  on the target plus the denoising regulariser (``ConsistencyConfig.denoise_weight``; pure
  CT learnt far too slowly on a CPU budget: held-out one-step error 3x worse than with it
  after 15 minutes) (:func:`dynamics_loss`).

With ``unroll_steps`` > 0, ``unroll_prob`` of the steps late in training first roll the
model forward 1..``unroll_steps`` frames on its own predictions, without gradients, and
train on the next real frame from there (fights compounding error). A state head (and a
task head with ``task_dim``) learns from real latents.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor

from factory.eval.metrics import reader_errors_torch
from factory.model import consistency as cm
from factory.model.autoencoder import Autoencoder
from factory.model.checkpoint import check_parts_fit, load_part
from factory.model.config import WorldModelConfig
from factory.model.dynamics import Dynamics
from factory.train.accel import keep_on_device
from factory.train.data import EpisodeData, WindowSampler
from factory.train.loop import (
    Budget,
    LoopState,
    ProgressFn,
    StageRun,
    TrainConfig,
    apply_threads,
    frames_batch,
    init_part,
    stage_config,
    train_part,
)

log = logging.getLogger(__name__)

CACHE_FILE = "latents.cache.safetensors"
DYNAMICS_TRAIN = TrainConfig(batch_size=16, lr=1e-3, warmup_steps=200)
"""The dynamics stage's default optimiser settings."""


@dataclass(frozen=True)
class DynamicsTrainOptions:
    """Stage-2 knobs beyond the optimiser's. The defaults are the ``baseline`` recipe's;
    the shipped recipe's (``iws_unroll``) are in :data:`factory.train.recipes.RECIPES`."""

    unroll_steps: int = 3
    unroll_start: float = 0.5
    unroll_prob: float = 0.5
    pad_prob: float = 0.05
    state_weight: float = 0.1
    grad_unroll: int = 1
    grad_unroll_start: float = 0.0
    task_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.grad_unroll < 1 or self.unroll_steps < 0:
            raise ValueError("need grad_unroll >= 1 and unroll_steps >= 0")

    def window_length(self, context: int, chunk: int) -> int:
        """Frames a training window needs: the context, then every unrolled chunk."""
        return context + chunk * (self.unroll_steps + self.grad_unroll)


def _cache_key(ae: Autoencoder, data: EpisodeData) -> str:
    """Hash of the encoder weights, the latent statistics and a sample of the data."""
    h = hashlib.sha256()
    tensors = [*ae.encoder.state_dict().values(), ae.latent_mean, ae.latent_std]
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    h.update(np.asarray(data.frames.shape, dtype=np.int64).tobytes())
    h.update(data.episode_ends.tobytes())
    h.update(np.ascontiguousarray(data.frames[:: max(1, len(data.frames) // 64)]).tobytes())
    return h.hexdigest()


@torch.no_grad()
def encode_dataset(
    ae: Autoencoder, frames: np.ndarray, device: str | torch.device, batch: int = 256
) -> Tensor:
    """Normalised latents of every frame: (N, C, h, w) float16 on the CPU."""
    ae.eval()
    out = [
        ae.encode_float(frames_batch(frames, np.arange(i, min(i + batch, len(frames))), device))
        .half()
        .cpu()
        for i in range(0, len(frames), batch)
    ]
    return torch.cat(out).contiguous()


def cached_latents(
    model_dir: str | Path, ae: Autoencoder, data: EpisodeData, device: str | torch.device
) -> Tensor:
    """The dataset's latents (N, C, h, w) float16, from the cache file when it matches
    (on ``device`` when an accelerated stage holds data there, else on the CPU)."""
    d = Path(model_dir)
    key = _cache_key(ae, data)
    path = d / CACHE_FILE
    if path.is_file():
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get("key") == key:
            log.info("using cached latents %s", path)
            return keep_on_device(load_file(str(path))["latents"], device)
    lat = encode_dataset(ae, data.frames, device)
    save_file({"latents": lat}, str(path), {"key": key})
    log.info("encoded %d frames into %s", len(lat), path)
    return keep_on_device(lat, device)


@torch.no_grad()
def set_normalisation(
    dyn: Dynamics, data: EpisodeData, latents: Tensor, sampler: WindowSampler, seed: int
) -> None:
    """Action/state mean-std, the per-channel target scale (std of the target / sigma_data)
    and the per-channel latent range."""
    dyn.action_mean.copy_(torch.from_numpy(data.actions.mean(0)).float())
    dyn.action_std.copy_(torch.from_numpy(data.actions.std(0)).float().clamp_min(1e-6))
    dyn.state_mean.copy_(torch.from_numpy(data.state.mean(0)).float())
    dyn.state_std.copy_(torch.from_numpy(data.state.std(0)).float().clamp_min(1e-6))
    k = dyn.cfg.context
    idx = sampler.sample(2048, np.random.default_rng(seed))
    z_next = latents[idx[:, k]].float()
    residual = dyn.cfg.predict_delta or dyn.cfg.motion != "none"
    base = z_next - latents[idx[:, k - 1]].float() if residual else z_next
    std = base.transpose(0, 1).reshape(base.shape[1], -1).std(dim=1).clamp_min(1e-4)
    dyn.target_scale.copy_(std / dyn.ccfg.sigma_data)
    dyn.latent_low.copy_(latents.amin(dim=(0, 2, 3)).float())
    dyn.latent_high.copy_(latents.amax(dim=(0, 2, 3)).float())
    if dyn.cfg.renorm == "pixel_norm":
        dyn.pixel_norm.copy_(z_next.norm(dim=1).mean())
    if dyn.task_head is not None:
        if data.task_state is None:
            raise ValueError("task_dim > 0 needs data/task_state (the task state) in the store")
        task = data.task_state if not dyn.cfg.task_angle else data.task_state[:, :-1]
        pos = torch.from_numpy(task).float()
        dyn.task_mean.copy_(pos.mean(0))
        dyn.task_std.copy_(pos.std(0).clamp_min(1e-6))


def _batch(
    latents: Tensor, data: EpisodeData, dyn: Dynamics, idx: np.ndarray, device: str | torch.device
) -> tuple[Tensor, Tensor, Tensor]:
    """Window latents (B, L, C, h, w), normalised actions (B, L, A), states (B, L, S)."""
    z = latents[torch.from_numpy(idx)].float().to(device)
    a = dyn.normalise_actions(torch.from_numpy(data.actions[idx]).to(device))
    s = dyn.normalise_state(torch.from_numpy(data.state[idx]).to(device))
    return z, a, s


def task_loss(
    dyn: Dynamics, z: Tensor, data: EpisodeData, idx: np.ndarray, gen: torch.Generator
) -> Tensor:
    """The task head's MSE on every latent of the windows z (B, L, C, h, w), lightly
    noised (0.05) as generated latents are imperfect; task state from data (B, L, P)."""
    assert dyn.task_head is not None and data.task_state is not None
    pose = torch.from_numpy(data.task_state[idx]).to(z.device).flatten(0, 1)
    flat = z.flatten(0, 1)
    flat = flat + 0.05 * torch.randn(flat.shape, generator=gen, device=z.device)
    return (dyn.task_head(flat) - dyn.task_target(pose)).pow(2).mean()


@torch.no_grad()
def unroll_context(
    dyn: Dynamics, z: Tensor, a: Tensor, steps: int, generator: torch.Generator | None
) -> Tensor:
    """Roll ``steps`` frames on the model's own predictions from the real context z[:, :K];
    returns the final window (B, K, C, h, w)."""
    k, f = dyn.cfg.context, dyn.cfg.chunk
    window = z[:, :k]
    for r in range(steps):
        z_pred = dyn.sample_chunk(window, a[:, r * f : r * f + k + f - 1], generator)
        window = torch.cat([window, z_pred], dim=1)[:, -k:]
    return window


def state_loss(dyn: Dynamics, z: Tensor, state: Tensor, gen: torch.Generator) -> Tensor:
    """The state head's MSE on real latents z (B, C, h, w), noised by 0.05 as predicted
    latents are imperfect; ``state`` (B, S) normalised."""
    z_noisy = z + 0.05 * torch.randn(z.shape, generator=gen, device=z.device)
    return (dyn.state_head(z_noisy) - state).pow(2).mean()


def x0_loss(
    dyn: Dynamics,
    z: Tensor,
    a: Tensor,
    s: Tensor,
    state: LoopState,
    unroll: int,
    opts: DynamicsTrainOptions,
) -> dict[str, Tensor]:
    """The ``x0`` objective: MSE of the next ``chunk`` latents (in target-scale units),
    over ``opts.grad_unroll`` chained predictions (one before ``opts.grad_unroll_start`` of
    the budget), back-propagated through the chain, after ``unroll`` no-grad chunks on the
    model's own predictions. z: (B, L, C, h, w)."""
    k, f = dyn.cfg.context, dyn.cfg.chunk
    gen = state.generator
    window = unroll_context(dyn, z, a, unroll, gen) if unroll else z[:, :k]
    pos, losses = unroll * f, []
    scale = dyn.target_scale[None, None, :, None, None]
    chain = opts.grad_unroll if state.progress >= opts.grad_unroll_start else 1
    for _ in range(chain):
        level = dyn.train_levels(z.shape[0], gen, z.device)
        noisy = dyn.noisy_context(window, level, gen)
        pred = dyn.predict_x0(window, noisy, level, a[:, pos : pos + k + f - 1], gen)
        losses.append(((pred - z[:, pos + k : pos + k + f]) / scale).pow(2).mean())
        window = torch.cat([window, dyn.settle(pred)], dim=1)[:, -k:]
        pos += f
    loss = torch.stack(losses).mean()
    loss_state = state_loss(dyn, z[:, k], s[:, k], gen)
    return {
        "x0": loss.detach(),
        "x0_last": losses[-1].detach(),
        "state": loss_state.detach(),
        "loss": loss + opts.state_weight * loss_state,
    }


def dynamics_loss(
    dyn: Dynamics,
    z: Tensor,
    a: Tensor,
    s: Tensor,
    state: LoopState,
    unroll: int,
    opts: DynamicsTrainOptions,
) -> dict[str, Tensor]:
    """Consistency + state-head loss for a batch of windows of length >= K + 1 + unroll."""
    k, ccfg = dyn.cfg.context, dyn.ccfg
    gen = state.generator
    window = unroll_context(dyn, z, a, unroll, gen) if unroll else z[:, :k]
    z_next = z[:, k + unroll]
    level = dyn.train_levels(z.shape[0], gen, z.device)
    noisy = dyn.noisy_context(window, level, gen)
    cond = dyn.make_cond(noisy, level, a[:, unroll : unroll + k])
    x0 = dyn.target_from(z_next, dyn.delta_base(window, noisy))
    ct = cm.consistency_training_step(
        dyn.model_fn,
        x0,
        cond,
        gen,
        progress=state.progress,
        cfg=ccfg,
        compute_target=ccfg.ct_weight > 0,
    )
    huber_c = ccfg.huber_c if ccfg.huber_c > 0 else cm.default_huber_c(ccfg.sigma_data)
    loss = torch.zeros((), device=z.device)
    out: dict[str, Tensor] = {"n_steps": torch.tensor(float(ct.n_steps))}
    if ccfg.ct_weight > 0:
        loss_ct = cm.ct_loss(ct, huber_c)
        loss = loss + ccfg.ct_weight * loss_ct
        out["ct"] = loss_ct.detach()
    if ccfg.denoise_weight > 0:
        den = cm.pseudo_huber(ct.predicted, x0, huber_c).mean()
        loss = loss + ccfg.denoise_weight * den
        out["denoise"] = den.detach()
    loss_state = state_loss(dyn, z_next, s[:, k + unroll], gen)
    out["state"] = loss_state.detach()
    out["loss"] = loss + opts.state_weight * loss_state
    return out


@torch.no_grad()
def evaluate_one_step(
    dyn: Dynamics,
    latents: Tensor,
    data: EpisodeData,
    sampler: WindowSampler,
    device: str | torch.device,
    n: int = 256,
    seed: int = 1,
) -> dict[str, float]:
    """One-step latent MSE on held-out windows, and the copy-last-frame baseline's."""
    was_training = dyn.training
    dyn.eval()
    k = dyn.cfg.context
    idx = sampler.sample(n, np.random.default_rng(seed))
    z, a, s = _batch(latents, data, dyn, idx, device)
    gen = torch.Generator(device=z.device).manual_seed(seed)
    pred = dyn.sample_next(z[:, :k], a[:, : k + dyn.cfg.chunk - 1], gen)
    block, truth = None, None
    if dyn.task_head is not None and data.task_state is not None:
        truth = torch.from_numpy(data.task_state[idx[:, k]]).float().to(z.device)
        block = dyn.read_task(z[:, k])
    errors = reader_errors_torch(
        dyn.read_state(z[:, k]), dyn.denormalise_state(s[:, k]), block, truth
    )
    out = {
        "mse": float((pred - z[:, k]).pow(2).mean()),
        "copy_mse": float((z[:, k - 1] - z[:, k]).pow(2).mean()),
        "state_err": float(errors["agent_err_px"].mean()),
    }
    if "block_err_px" in errors:
        out["task_pos_err"] = float(errors["block_err_px"].mean())
        out["task_angle_err_deg"] = float(errors["angle_err_deg"].mean())
    dyn.train(was_training)
    return out


def train_dynamics(
    data: EpisodeData,
    out_dir: str | Path,
    cfg: WorldModelConfig,
    budget: Budget,
    device: str | torch.device = "cpu",
    resume: bool = False,
    on_progress: ProgressFn | None = None,
    train_cfg: TrainConfig | None = None,
    opts: DynamicsTrainOptions | None = None,
) -> dict[str, float]:
    """Train (or resume) the dynamics part; needs the autoencoder part in ``out_dir``.

    Returns metrics incl. held-out one-step ``val_mse`` against ``val_copy_mse``.
    """
    tc = train_cfg or DYNAMICS_TRAIN
    opts = opts or DynamicsTrainOptions()
    apply_threads(tc)
    config = stage_config(out_dir, cfg, "dynamics", resume)
    ae = load_part(out_dir, "autoencoder", config, device)
    assert isinstance(ae, Autoencoder)
    check_parts_fit(config, ("autoencoder", "dynamics"))
    latents = cached_latents(out_dir, ae, data, device)
    dyn = init_part(out_dir, "dynamics", config, resume, device)
    assert isinstance(dyn, Dynamics)
    k, r, f = config.dynamics.context, opts.unroll_steps, config.dynamics.chunk
    train_eps, val_eps = data.split(tc.val_fraction, tc.seed)
    length = opts.window_length(k, f)
    sampler = WindowSampler(data, length, train_eps, opts.pad_prob, k - 1)
    val_sampler = WindowSampler(data, k + f, val_eps if len(val_eps) else train_eps)
    if not (resume and "dynamics" in config.parts):
        set_normalisation(dyn, data, latents, sampler, tc.seed)
    loss_fn = x0_loss if config.dynamics.objective == "x0" else dynamics_loss

    def step_fn(state: LoopState) -> dict[str, Tensor]:
        idx = sampler.sample(tc.batch_size, state.rng)
        z, a, s = _batch(latents, data, dyn, idx, device)
        unroll = 0
        if r > 0 and state.progress >= opts.unroll_start and state.rng.random() < opts.unroll_prob:
            unroll = int(state.rng.integers(1, r + 1))
        out = loss_fn(dyn, z, a, s, state, unroll, opts)
        if dyn.task_head is not None:
            loss_task = task_loss(dyn, z, data, idx, state.generator)
            out["task"] = loss_task.detach()
            out["loss"] = out["loss"] + opts.task_weight * loss_task
        return out

    run = StageRun(Path(out_dir), tc, budget, resume, on_progress, device)
    metrics = train_part(
        run,
        part="dynamics",
        module=dyn,
        config=config,
        step_fn=step_fn,
        data=data.source,
    )
    val = evaluate_one_step(dyn, latents, data, val_sampler, device)
    metrics.update({f"val_{k}": v for k, v in val.items()})
    return metrics
