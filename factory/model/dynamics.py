"""Action-conditioned latent dynamics: a 2D U-Net over the latent grid that predicts the
next latent(s) by the config's objective (``x0``: one jump from pure noise, the shipped
recipe; ``consistency``: a consistency model, sampled in one or a few evaluations).

The network sees the K context latents z_{t-K+1..t} stacked on channels (with a small
Gaussian noise of level ``ctx_level`` on them), the noisy target, coordinate channels,
and an embedding of (noise level, context-noise level, the K actions applied at the
window's frames: a_{t-K+1..t}) that modulates every residual block (AdaGN). With
``action_xy_range`` the actions' xy are also drawn as Gaussian bumps on input channels.

The target ``x0`` is z_{t+1} (default) or the delta z_{t+1} - z_t
(``predict_delta``), divided by the per-channel ``target_scale`` buffer so that it has
std sigma_data. A small keypoint head reads the robot state (e.g. agent xy) off a latent.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from factory.model import consistency as cm
from factory.model.config import ConsistencyConfig, DynamicsConfig
from factory.model.heads import KeypointHead, pose_to_target, target_to_pose
from factory.model.layers import ResBlock, coord_grid, group_count, sinusoidal_embedding
from factory.model.motion import bounded_flow, warp


@dataclass
class DynamicsCond:
    """Conditioning of one prediction.

    context: (B, K, C, h, w) latents, already noised; ctx_level: (B,) their noise level;
    actions: (B, K, A) normalised actions applied at the K window frames;
    action_maps: (B, K, h, w) Gaussian bumps at the actions' xy, or None.
    """

    context: Tensor
    ctx_level: Tensor
    actions: Tensor
    action_maps: Tensor | None = None


class DynamicsNet(nn.Module):
    """The raw network F(x_in, c_noise, cond) -> (B, C, h, w)."""

    def __init__(self, cfg: DynamicsConfig) -> None:
        super().__init__()
        c, k, e = cfg.latent_channels, cfg.context, cfg.emb_dim
        ch = cfg.channels
        self.noise_emb = nn.Sequential(nn.Linear(64, e), nn.SiLU(), nn.Linear(e, e))
        self.ctx_emb = nn.Sequential(nn.Linear(32, e), nn.SiLU(), nn.Linear(e, e))
        n_act = k + cfg.chunk - 1  # the window's actions, then the chunk's later ones
        self.act_emb = nn.Sequential(
            nn.Linear(n_act * cfg.action_dim, e),
            nn.SiLU(),
            nn.Linear(e, e),
            nn.SiLU(),
            nn.Linear(e, e),
        )
        n_maps = n_act if cfg.action_xy_range is not None else 0
        self.stem = nn.Conv2d(out_channels(cfg) + c * k + 2 + n_maps, ch[0], 3, padding=1)
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        for i, width in enumerate(ch):
            c_prev = ch[0] if i == 0 else ch[i - 1]
            blocks = [
                ResBlock(c_prev if j == 0 else width, width, cfg.groups, e)
                for j in range(cfg.blocks_per_level)
            ]
            self.down.append(nn.ModuleList(blocks))
            if i + 1 < len(ch):
                self.downsample.append(nn.Conv2d(width, width, 3, stride=2, padding=1))
        self.mid = ResBlock(ch[-1], ch[-1], cfg.groups, e)
        self.up = nn.ModuleList()
        self.upsample = nn.ModuleList()
        for i in reversed(range(len(ch))):
            c_out = ch[i - 1] if i > 0 else ch[0]
            self.up.append(ResBlock(ch[i] * 2, c_out, cfg.groups, e))
            if i > 0:
                self.upsample.append(nn.Conv2d(c_out, c_out, 3, padding=1))
        self.norm = nn.GroupNorm(group_count(ch[0], cfg.groups), ch[0])
        self.out = nn.Conv2d(ch[0], out_channels(cfg), 3, padding=1)
        nn.init.zeros_(self.out.weight)
        assert self.out.bias is not None
        nn.init.zeros_(self.out.bias)

    def embed(self, c_noise: Tensor, cond: DynamicsCond) -> Tensor:
        """(B, emb_dim) conditioning vector."""
        emb = self.noise_emb(sinusoidal_embedding(c_noise, 64))
        emb = emb + self.ctx_emb(sinusoidal_embedding(cond.ctx_level * 4.0, 32))
        emb = emb + self.act_emb(cond.actions.flatten(1))
        return nn.functional.silu(emb)

    def forward(self, x_in: Tensor, c_noise: Tensor, cond: DynamicsCond) -> Tensor:
        """x_in: (B, C', h, w); c_noise: (B,) -> (B, C', h, w), C' = :func:`out_channels`."""
        b, _, h, w = x_in.shape
        emb = self.embed(c_noise, cond)
        ctx = cond.context.flatten(1, 2)
        parts = [x_in, ctx, coord_grid(b, h, w, x_in.device, x_in.dtype)]
        if cond.action_maps is not None:
            parts.append(cond.action_maps.to(x_in.dtype))
        feats = torch.cat(parts, dim=1)
        x = self.stem(feats)
        skips: list[Tensor] = []
        for i, blocks in enumerate(self.down):
            for block in blocks:  # type: ignore[attr-defined]
                x = block(x, emb)
            skips.append(x)
            if i < len(self.downsample):
                x = self.downsample[i](x)
        x = self.mid(x, emb)
        for j, block in enumerate(self.up):
            x = block(torch.cat([x, skips.pop()], dim=1), emb)
            if j < len(self.upsample):
                up = nn.functional.interpolate(x, size=skips[-1].shape[-2:], mode="nearest")
                x = self.upsample[j](up)
        return self.out(nn.functional.silu(self.norm(x)))


def out_channels(cfg: DynamicsConfig) -> int:
    """Channels of the network's output: ``chunk`` latents, plus ``chunk`` flows."""
    flow = 2 if cfg.motion == "flow" else 0
    return cfg.chunk * (cfg.latent_channels + flow)


def make_state_head(cfg: DynamicsConfig) -> KeypointHead:
    """The robot-state head: (B, C, h, w) -> (B, S) normalised state."""
    return KeypointHead(
        cfg.latent_channels, cfg.state_head_channels, cfg.state_head_keypoints, cfg.state_dim
    )


class Dynamics(nn.Module):
    """Network + read-out heads + normalisation buffers; sampling of the next latent(s)."""

    action_mean: Tensor
    action_std: Tensor
    state_mean: Tensor
    state_std: Tensor
    target_scale: Tensor
    latent_low: Tensor
    latent_high: Tensor
    task_mean: Tensor  # only with task_dim > 0
    task_std: Tensor
    pixel_norm: Tensor  # only with renorm "pixel_norm"

    def __init__(self, cfg: DynamicsConfig, consistency: ConsistencyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.ccfg = consistency
        self.net = DynamicsNet(cfg)
        self.state_head = make_state_head(cfg)
        self.task_head: KeypointHead | None = None
        self.register_buffer("action_mean", torch.zeros(cfg.action_dim))
        self.register_buffer("action_std", torch.ones(cfg.action_dim))
        self.register_buffer("state_mean", torch.zeros(cfg.state_dim))
        self.register_buffer("state_std", torch.ones(cfg.state_dim))
        self.register_buffer("target_scale", torch.ones(cfg.latent_channels))
        self.register_buffer("latent_low", torch.full((cfg.latent_channels,), -1e4))
        self.register_buffer("latent_high", torch.full((cfg.latent_channels,), 1e4))
        if cfg.task_dim > 0:
            c, n = cfg.task_head_channels, cfg.task_head_keypoints
            self.task_head = KeypointHead(cfg.latent_channels, c, n, cfg.task_dim)
            positions = cfg.task_dim - 2 if cfg.task_angle else cfg.task_dim
            self.register_buffer("task_mean", torch.zeros(positions))
            self.register_buffer("task_std", torch.ones(positions))
        if cfg.renorm == "pixel_norm":
            self.register_buffer("pixel_norm", torch.ones(()))

    def normalise_actions(self, actions: Tensor) -> Tensor:
        """(..., A) raw -> normalised."""
        return (actions.float() - self.action_mean) / self.action_std

    def normalise_state(self, state: Tensor) -> Tensor:
        return (state.float() - self.state_mean) / self.state_std

    def denormalise_state(self, state: Tensor) -> Tensor:
        """(..., S) normalised -> raw units (e.g. board px)."""
        return state.float() * self.state_std + self.state_mean

    def task_target(self, pose: Tensor) -> Tensor:
        """Task pose (..., task_dim - 1), angle last (``task_angle`` False: (...,
        task_dim), positions only) -> the task head's target."""
        return pose_to_target(pose, self.task_mean, self.task_std, self.cfg.task_angle)

    def read_task(self, z: Tensor) -> Tensor:
        """Task pose in raw units (B, task_dim - 1) (PushT: block x, y, angle) from latents
        (B, C, h, w); needs ``task_dim`` > 0."""
        if self.task_head is None:
            raise ValueError("this dynamics model has no task head (task_dim 0)")
        return target_to_pose(self.task_head(z), self.task_mean, self.task_std, self.cfg.task_angle)

    def _scale(self) -> Tensor:
        return self.target_scale[None, :, None, None]

    def target_from(self, z_next: Tensor, z_last: Tensor) -> Tensor:
        """Consistency target x0 (B, C, h, w) from z_{t+1} and z_t."""
        base = z_next - z_last if self.cfg.predict_delta else z_next
        return base / self._scale()

    def next_from(self, x0: Tensor, z_last: Tensor) -> Tensor:
        """Inverse of :meth:`target_from`: z_{t+1} (B, C, h, w)."""
        base = x0 * self._scale()
        return z_last + base if self.cfg.predict_delta else base

    def noisy_context(
        self, window: Tensor, level: Tensor, generator: torch.Generator | None
    ) -> Tensor:
        """window: (B, K, C, h, w) + level (B,) * Gaussian noise."""
        noise = torch.randn(
            window.shape, generator=generator, device=window.device, dtype=window.dtype
        )
        return window + level.to(window.dtype).view(-1, 1, 1, 1, 1) * noise

    def train_levels(
        self, batch: int, generator: torch.Generator | None, device: torch.device
    ) -> Tensor:
        """(B,) training context-noise levels ~ U(ctx_noise_min, ctx_noise_max)."""
        lo, hi = self.cfg.ctx_noise_min, self.cfg.ctx_noise_max
        return lo + torch.rand(batch, generator=generator, device=device) * (hi - lo)

    def action_maps(self, actions: Tensor) -> Tensor | None:
        """Gaussian bumps at each action's xy: normalised actions (B, K, A) -> (B, K, h, w)."""
        rng = self.cfg.action_xy_range
        if rng is None:
            return None
        h, w = self.cfg.latent_size
        raw = actions[..., :2] * self.action_std[:2] + self.action_mean[:2]
        pos = (raw - rng[0]) / (rng[1] - rng[0])  # (B, K, 2) in [0, 1]
        xs = (torch.arange(w, device=actions.device, dtype=actions.dtype) + 0.5) / w
        ys = (torch.arange(h, device=actions.device, dtype=actions.dtype) + 0.5) / h
        dx = (xs[None, None, :] - pos[..., 0:1]) * w  # (B, K, w) in cells
        dy = (ys[None, None, :] - pos[..., 1:2]) * h  # (B, K, h)
        s2 = 2.0 * self.cfg.action_map_sigma**2
        return torch.exp(-(dy[..., :, None] ** 2) / s2) * torch.exp(-(dx[..., None, :] ** 2) / s2)

    def make_cond(self, noisy_window: Tensor, level: Tensor, actions: Tensor) -> DynamicsCond:
        """Conditioning from a noised window (B, K, C, h, w), its level (B,) and normalised
        actions (B, K + chunk - 1, A)."""
        return DynamicsCond(noisy_window, level, actions, self.action_maps(actions))

    def model_fn(self, x_in: Tensor, c_noise: Tensor, cond: DynamicsCond) -> Tensor:
        return self.net(x_in, c_noise, cond)

    def chunk_actions(self, actions: Tensor) -> Tensor:
        """Window actions (B, K, A) -> (B, K + chunk - 1, A), holding a_t for the later
        frames of the chunk (what a closed-loop caller knows); longer inputs pass."""
        missing = self.cfg.context + self.cfg.chunk - 1 - actions.shape[1]
        if missing <= 0:
            return actions
        return torch.cat([actions, actions[:, -1:].expand(-1, missing, -1)], dim=1)

    def predict_x0(
        self,
        window: Tensor,
        noisy: Tensor,
        level: Tensor,
        actions: Tensor,
        generator: torch.Generator | None,
    ) -> Tensor:
        """The ``x0`` objective's prediction, differentiable: the next ``chunk`` latents
        (B, chunk, C, h, w) from the clean window (B, K, C, h, w) (the motion base), its
        noised copy, the level (B,) and actions (B, K + chunk - 1, A). One evaluation from
        pure noise at sigma_max (IWS's terminal-only jump)."""
        cfg, c = self.cfg, self.ccfg
        b, _, ch, h, w = window.shape
        n_out = out_channels(cfg)
        sigma = torch.full((b,), c.sigma_max, device=window.device, dtype=window.dtype)
        x_t = c.sigma_max * torch.randn(
            (b, n_out, h, w), generator=generator, device=window.device, dtype=window.dtype
        )
        raw = self.model_fn(
            x_t * cm.c_in(sigma, c.sigma_data)[:, None, None, None],
            cm.c_noise(sigma),
            self.make_cond(noisy, level, actions),
        )
        res = raw[:, : cfg.chunk * ch].unflatten(1, (cfg.chunk, ch)) * self._scale()[:, None]
        if cfg.motion != "flow":
            if not cfg.predict_delta:
                return res
            return window[:, -1:] + torch.cumsum(res, dim=1)
        flows = bounded_flow(raw[:, cfg.chunk * ch :], cfg.flow_max).unflatten(1, (cfg.chunk, 2))
        out, prev = [], window[:, -1]
        for j in range(cfg.chunk):
            prev = warp(prev, flows[:, j]) + res[:, j]
            out.append(prev)
        return torch.stack(out, dim=1)

    def settle(self, z: Tensor) -> Tensor:
        """Put predicted latents (..., C, h, w) back in range: ``pixel_norm`` renorm, then
        the clamp to the training latents' per-channel range (a guard against blow-ups)."""
        if self.cfg.renorm == "pixel_norm":
            norm = z.norm(dim=-3, keepdim=True).clamp_min(1e-6)
            z = z * (self.pixel_norm / norm)
        low, high = self.latent_low[:, None, None], self.latent_high[:, None, None]
        return torch.maximum(torch.minimum(z, high), low)

    def sample_chunk(
        self,
        window: Tensor,
        actions: Tensor,
        generator: torch.Generator | None,
        ctx_noise: float | None = None,
    ) -> Tensor:
        """The next ``chunk`` latents (B, chunk, C, h, w) from the clean window
        (B, K, C, h, w) and normalised actions (B, K + chunk - 1, A) (or (B, K, A): later
        actions held); context noise ``ctx_noise`` (default cfg). One network evaluation
        (plus one per consistency ``cfg.sample_sigmas``), then :meth:`settle`."""
        level_value = self.cfg.ctx_noise if ctx_noise is None else ctx_noise
        level = torch.full((window.shape[0],), level_value, device=window.device)
        noisy = self.noisy_context(window, level, generator)
        actions = self.chunk_actions(actions)
        if self.cfg.objective == "x0":
            return self.settle(self.predict_x0(window, noisy, level, actions, generator))
        cond = self.make_cond(noisy, level, actions)
        c = self.ccfg
        x0 = cm.sample_multistep(
            self.model_fn,
            tuple(window[:, -1].shape),
            cond,
            generator,
            [c.sigma_max, *self.cfg.sample_sigmas],
            sigma_data=c.sigma_data,
            sigma_min=c.sigma_min,
            device=window.device,
            dtype=window.dtype,
        )
        return self.settle(self.next_from(x0, self.delta_base(window, noisy)))[:, None]

    def sample_next(
        self,
        window: Tensor,
        actions: Tensor,
        generator: torch.Generator | None,
        ctx_noise: float | None = None,
    ) -> Tensor:
        """z_{t+1} (B, C, h, w): the first latent of :meth:`sample_chunk`."""
        return self.sample_chunk(window, actions, generator, ctx_noise)[:, 0]

    def delta_base(self, window: Tensor, noisy: Tensor) -> Tensor:
        """The latent the delta is added to: the last clean or noised context latent."""
        return noisy[:, -1] if self.cfg.delta_from_noisy else window[:, -1]

    def read_state(self, z: Tensor) -> Tensor:
        """Robot state in raw units (B, S) from latents (B, C, h, w)."""
        return self.denormalise_state(self.state_head(z))
