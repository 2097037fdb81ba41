"""Typed configurations of the world model's parts.

Every config is a frozen dataclass of JSON-friendly fields. ``WorldModelConfig`` groups
the per-part configs and round-trips through :meth:`WorldModelConfig.to_json` /
:meth:`WorldModelConfig.from_json` exactly (floats are written with ``repr`` precision).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

FORMAT = "demofactory.world_model"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class AutoencoderConfig:
    """Conv autoencoder: RGB (H, W, 3) uint8 -> latent (latent_channels, H/f, W/f).

    ``channels`` lists the width of each resolution level and ``blocks`` its number of
    residual blocks. The encoder starts with a ``patch`` x ``patch`` space-to-depth
    (pixel unshuffle) and the decoder ends with the matching pixel shuffle, so the
    downsampling factor is ``f = patch * 2 ** (len(channels) - 1)``. ``background`` is
    the RGB colour that the foreground-weighted loss treats as "nothing there".
    Foreground pixels also weigh more when their colour is rare in the batch: x
    (mean count / count of its colour bin) ** ``rarity_power``, clipped to [0.5, 4], so
    a small object (the agent) is not drowned out by the large ones (0: off).
    """

    image_size: tuple[int, int] = (96, 96)
    latent_channels: int = 4
    patch: int = 2
    channels: tuple[int, ...] = (32, 64)
    blocks: tuple[int, ...] = (1, 2)
    groups: int = 8
    background: tuple[int, int, int] = (255, 255, 255)
    fg_threshold: float = 0.05
    fg_weight: float = 10.0
    rarity_power: float = 0.5
    edge_weight: float = 1.0
    mse_weight: float = 1.0
    latent_noise: float = 0.02
    latent_l2: float = 1e-3

    @property
    def factor(self) -> int:
        return int(self.patch * 2 ** (len(self.channels) - 1))

    @property
    def latent_size(self) -> tuple[int, int]:
        h, w = self.image_size
        return (h // self.factor, w // self.factor)

    def __post_init__(self) -> None:
        h, w = self.image_size
        if len(self.blocks) != len(self.channels):
            raise ValueError("blocks and channels need one entry per level")
        if h % self.factor or w % self.factor:
            raise ValueError(f"image size {h}x{w} is not divisible by factor {self.factor}")


@dataclass(frozen=True)
class ConsistencyConfig:
    """Improved consistency training (Song & Dhariwal 2023) and its sampler: the dynamics'
    ``consistency`` objective. The ``x0`` objective uses only ``sigma_max`` (its one noise
    level) and ``sigma_data`` (the target's scale).

    The discretisation curriculum doubles the number of steps from ``s0`` to ``s1`` over
    training; ``huber_c`` <= 0 means the paper's ``0.00054 * sqrt(dim)``. The training
    loss is ``ct_weight`` x the consistency loss + ``denoise_weight`` x a pseudo-Huber
    loss between f(x0 + sigma eps, sigma) and x0 itself (a denoising regulariser that
    speeds up learning a lot on a small compute budget; 0 gives plain improved CT).
    """

    sigma_min: float = 0.002
    sigma_max: float = 10.0
    sigma_data: float = 0.5
    rho: float = 7.0
    s0: int = 10
    s1: int = 320
    p_mean: float = -1.1
    p_std: float = 2.0
    huber_c: float = 0.0
    ct_weight: float = 1.0
    denoise_weight: float = 1.0


@dataclass(frozen=True)
class DynamicsConfig:
    """Latent dynamics: a 2D U-Net over the latent grid, conditioned on actions.

    Predicts z_{t+1} (or the delta z_{t+1} - z_t when ``predict_delta``) from the
    ``context`` latents z_{t-K+1..t} and the actions applied at those frames (the last one
    is a_t). Context latents get Gaussian noise of level ``U(ctx_noise_min,
    ctx_noise_max)`` in training and ``ctx_noise`` at inference (Diffusion-Forcing style).

    Predicting z_{t+1} itself is the default: in first-session PushT experiments (one-off
    scripts) the delta was worse and, accumulating errors with no restoring force, blew
    up in long rollouts.

    ``action_xy_range`` (low, high): the first two action dims are absolute x, y positions
    in that range (PushT: the 512 px board, x right, y down); each window action is then
    also drawn as a Gaussian bump (std ``action_map_sigma`` latent cells) on an input
    channel, so the convolutions see where the action points. None: no maps.

    ``delta_from_noisy``: the delta is taken from the *noised* last context latent, so the
    network also removes the context noise (measured: the T faded; kept as an option).

    ``sample_sigmas``: extra, decreasing noise levels for multistep consistency sampling
    (one more network evaluation each); empty: 1-step sampling.

    Fidelity options (issue 10's ablations; the defaults are the shipped model's recipe,
    ``iws_unroll`` in :mod:`factory.train.recipes`, whose ``baseline`` recipe is the first
    shipped model's consistency training):

    - ``objective``: ``x0``, the recipe IWS's code actually trains: one jump from pure
      noise to the clean next latent, trained with MSE (uniform weighting), sampled in one
      evaluation; or ``consistency`` (improved CT + denoising regulariser, sampled in one
      evaluation plus one per ``sample_sigmas``).
    - ``ctx_noise_min``: the context-noise level is drawn from U(ctx_noise_min,
      ctx_noise_max) in training (IWS: about 0.025 to 0.2, 0.07 at inference).

    A config written before a field existed meant :data:`DYNAMICS_BEFORE` for it, not the
    current default: :meth:`WorldModelConfig.from_dict` fills those in.
    - ``renorm``: how each predicted latent is put back on the autoencoder's manifold:
      ``none``; ``pixel_norm`` rescales every latent pixel's vector to the L2 norm the
      training latents have on average (IWS re-normalises to unit L2 per pixel, which
      only fits an autoencoder trained with unit-norm latents); ``reencode`` decodes and
      re-encodes the latent (one decoder and encoder pass per step).
    - ``motion``: ``flow`` predicts, per frame, a 2-D flow field (latent cells, at most
      ``flow_max``) that warps the last latent, plus a residual; both start at zero, so
      "nothing moves" is the untrained default. Needs ``objective`` ``x0``.
    - ``chunk``: frames predicted per network call (the next ``chunk`` latents, from the
      context and the ``chunk`` actions applied at t .. t+chunk-1). Needs ``x0``.
    - ``task_dim``: a second keypoint head on the latent reads the task state (PushT: 4 =
      block x, y, sin, cos of the angle), trained on real latents; 0: none (the image
      probe reads it).
    - ``task_angle``: the task state's last number is an angle (read as its sin and cos,
      PushT's block); False: every number is a position (pile: each disc's x, y; then
      ``task_dim`` is the task state's width).
    """

    latent_channels: int = 4
    latent_size: tuple[int, int] = (24, 24)
    context: int = 8
    action_dim: int = 2
    state_dim: int = 2
    channels: tuple[int, ...] = (64, 96, 128)
    blocks_per_level: int = 1
    emb_dim: int = 128
    groups: int = 8
    predict_delta: bool = False
    delta_from_noisy: bool = False
    ctx_noise_max: float = 0.2
    ctx_noise: float = 0.07
    sample_sigmas: tuple[float, ...] = ()
    state_head_channels: int = 32
    state_head_keypoints: int = 8
    action_xy_range: tuple[float, float] | None = (0.0, 512.0)
    action_map_sigma: float = 1.0
    objective: str = "x0"
    ctx_noise_min: float = 0.025
    renorm: str = "none"
    motion: str = "none"
    flow_max: float = 3.0
    chunk: int = 1
    task_dim: int = 0
    task_angle: bool = True
    task_head_channels: int = 48
    task_head_keypoints: int = 16

    def __post_init__(self) -> None:
        choices = {
            "objective": ("consistency", "x0"),
            "renorm": ("none", "pixel_norm", "reencode"),
            "motion": ("none", "flow"),
        }
        for name, valid in choices.items():
            if getattr(self, name) not in valid:
                raise ValueError(f"dynamics {name} must be one of {valid}")
        if self.chunk < 1:
            raise ValueError("dynamics chunk must be >= 1")
        if (self.motion != "none" or self.chunk > 1) and self.objective != "x0":
            raise ValueError("dynamics motion and chunk > 1 need objective 'x0'")
        if not 0.0 <= self.ctx_noise_min <= self.ctx_noise_max:
            raise ValueError("need 0 <= ctx_noise_min <= ctx_noise_max")


DYNAMICS_BEFORE: dict[str, Any] = {
    "objective": "consistency",
    "ctx_noise_min": 0.0,
    "ctx_noise": 0.05,
}
"""What a stored dynamics config without these fields meant: the values before issue 10
added ``objective`` and ``ctx_noise_min`` and the defaults became the shipped recipe's."""


@dataclass(frozen=True)
class ProbeConfig:
    """State probe: frame -> (agent x, y, block x, y, sin angle, cos angle).

    Positions are learnt normalised by ``position_scale`` (PushT: the 512 px board).
    Convs of ``channels`` (the first ``downsample`` of stride 2) make ``keypoints``
    heatmaps whose soft-argmax coordinates, with pooled features, feed an MLP of width
    ``hidden``. ``downsample`` 2 (heatmaps at H/4) is the default: at 1 (H/2) a step costs
    about 4x more, and 12 loaded CPU minutes (1,334 steps) had not begun to learn the angle.
    """

    image_size: tuple[int, int] = (96, 96)
    channels: tuple[int, ...] = (16, 32, 48)
    downsample: int = 2
    keypoints: int = 16
    hidden: int = 128
    position_scale: float = 512.0


MAIN_CAMERA = "top"
"""The name a latent_grid config gives the store's main camera (``data/image``: PushT's
only camera, pile's top one)."""


@dataclass(frozen=True)
class WorldModelConfig:
    """The whole model: per-part configs and which parts a model directory holds.

    ``camera``: the store camera whose frames the model was trained on and renders:
    :data:`MAIN_CAMERA` (``data/image``; what every config written before the field
    meant) or another one (``side``: ``data/image_side``). ``world``: the ground-truth
    world of its training data (the store's ``env``; every config written before the field
    was PushT's)."""

    autoencoder: AutoencoderConfig = field(default_factory=AutoencoderConfig)
    dynamics: DynamicsConfig = field(default_factory=DynamicsConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    consistency: ConsistencyConfig = field(default_factory=ConsistencyConfig)
    parts: tuple[str, ...] = ()
    fps: float = 10.0
    name: str = ""
    kind: str = "latent_grid"
    camera: str = MAIN_CAMERA
    world: str = "pusht"

    @property
    def cameras(self) -> tuple[str, ...]:
        """``()`` for a model of the store's main camera (it names none); ``(camera,)``
        for one trained on another camera (e.g. pile's ``side``): its frames are that view."""
        return () if self.camera == MAIN_CAMERA else (self.camera,)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        h, w = self.autoencoder.image_size
        return (h, w, 3)

    @property
    def action_dim(self) -> int:
        return self.dynamics.action_dim

    def with_parts(self, *parts: str) -> WorldModelConfig:
        """A copy whose ``parts`` also lists ``parts`` (sorted, unique)."""
        return dataclasses.replace(self, parts=tuple(sorted(set(self.parts) | set(parts))))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION}
        out.update(to_jsonable(dataclasses.asdict(self)))
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorldModelConfig:
        """Parse a dict written by :meth:`to_dict`; unknown keys raise ``ValueError``.

        Stored values are kept; a dynamics field the dict lacks (a config written before
        the field existed) takes :data:`DYNAMICS_BEFORE`'s value, else its default."""
        if data.get("format") != FORMAT:
            raise ValueError(f"format is {data.get('format')!r}, expected {FORMAT!r}")
        if int(data.get("version", -1)) > FORMAT_VERSION:
            raise ValueError(f"format version {data.get('version')} is newer than supported")
        body = {k: v for k, v in data.items() if k not in ("format", "version")}
        return _from_dict(cls, body)

    @classmethod
    def from_json(cls, text: str) -> WorldModelConfig:
        return cls.from_dict(json.loads(text))


_NESTED: dict[str, type] = {
    "autoencoder": AutoencoderConfig,
    "dynamics": DynamicsConfig,
    "probe": ProbeConfig,
    "consistency": ConsistencyConfig,
}


def to_jsonable(obj: Any) -> Any:
    """Tuples to lists, all the way down (what JSON holds)."""
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    return obj


def _from_dict[T](cls: type[T], data: dict[str, Any]) -> T:
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if cls is DynamicsConfig:
        data = {**DYNAMICS_BEFORE, **data}
    unknown = set(data) - set(fields)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys: {sorted(unknown)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name in _NESTED and cls is WorldModelConfig:
            kwargs[name] = _from_dict(_NESTED[name], value)
        elif isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)
