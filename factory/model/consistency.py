"""Consistency-model maths: schedules, parametrisation, training step and sampler.

Pure functions over tensors (Karras et al. 2022; Song et al. 2023; improved consistency
training, Song & Dhariwal 2023). A *network function* ``model_fn(x_in, c_noise, cond)``
returns the raw output ``F``; the consistency function is

    f(x, sigma) = c_skip(sigma) * x + c_out(sigma) * F(c_in(sigma) * x, c_noise(sigma), cond)

with the boundary condition ``f(x, sigma_min) = x`` (``c_skip = 1``, ``c_out = 0``).
The caller owns the loss reduction and the optimiser.

Shapes: ``x``: (B, ...) float; ``sigma``: (B,) float; ``cond``: anything ``model_fn``
understands (passed through untouched).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

ModelFn = Callable[[Tensor, Tensor, Any], Tensor]


def karras_sigmas(n: int, sigma_min: float, sigma_max: float, rho: float = 7.0) -> Tensor:
    """Karras noise levels, increasing: (n,) float64 from sigma_min to sigma_max."""
    if n < 2:
        raise ValueError("need at least 2 noise levels")
    ramp = torch.linspace(0.0, 1.0, n, dtype=torch.float64)
    lo, hi = sigma_min ** (1.0 / rho), sigma_max ** (1.0 / rho)
    return (lo + ramp * (hi - lo)) ** rho


def c_skip(sigma: Tensor, sigma_data: float, sigma_min: float) -> Tensor:
    """Skip scaling: sigma_data^2 / ((sigma - sigma_min)^2 + sigma_data^2); 1 at sigma_min."""
    return sigma_data**2 / ((sigma - sigma_min) ** 2 + sigma_data**2)


def c_out(sigma: Tensor, sigma_data: float, sigma_min: float) -> Tensor:
    """Output scaling: (sigma - sigma_min) * sigma_data / sqrt(sigma^2 + sigma_data^2)."""
    return (sigma - sigma_min) * sigma_data / torch.sqrt(sigma**2 + sigma_data**2)


def c_in(sigma: Tensor, sigma_data: float) -> Tensor:
    """Input scaling: 1 / sqrt(sigma^2 + sigma_data^2)."""
    return 1.0 / torch.sqrt(sigma**2 + sigma_data**2)


def c_noise(sigma: Tensor) -> Tensor:
    """Noise-level input to the network: 0.25 * log(sigma)."""
    return 0.25 * torch.log(sigma)


def discretisation_steps(progress: float, s0: int, s1: int) -> int:
    """Improved-CT curriculum N(k) as a function of training progress k/K in [0, 1].

    N = min(s0 * 2^floor(progress * (log2(s1/s0) + 1)), s1) + 1: the number of steps
    doubles in equal stages from s0 to s1.
    """
    stages = math.floor(math.log2(s1 / s0)) + 1
    stage = math.floor(min(max(progress, 0.0), 1.0) * stages)
    return int(min(s0 * 2**stage, s1) + 1)


def lognormal_index_probs(sigmas: Tensor, p_mean: float, p_std: float) -> Tensor:
    """Probability of each interval [sigma_i, sigma_{i+1}]: (n-1,) float64, sums to 1.

    p(i) is proportional to erf((log sigma_{i+1} - P_mean) / (sqrt2 P_std)) -
    erf((log sigma_i - P_mean) / (sqrt2 P_std)) (improved CT).
    """
    z = (torch.log(sigmas) - p_mean) / (math.sqrt(2.0) * p_std)
    p = torch.erf(z[1:]) - torch.erf(z[:-1])
    p = p.clamp_min(1e-12)
    return p / p.sum()


def pseudo_huber(pred: Tensor, target: Tensor, c: float) -> Tensor:
    """Per-sample pseudo-Huber loss sqrt(||d||^2 / dim + c^2) - c: (B,)."""
    d = (pred - target).flatten(1).float()
    return torch.sqrt(d.pow(2).mean(dim=1) + c * c) - c


def default_huber_c(sigma_data: float = 0.5) -> float:
    """Improved-CT's c = 0.00054 * sqrt(dim), rewritten for :func:`pseudo_huber`'s mean.

    Averaging over ``dim`` elements divides c by sqrt(dim), leaving 0.00054 for data of
    scale sigma_data = 0.5; scale it with sigma_data.
    """
    return 0.00054 * sigma_data / 0.5


def _expand(v: Tensor, like: Tensor) -> Tensor:
    return v.reshape(-1, *([1] * (like.dim() - 1))).to(like.dtype)


def consistency_fn(
    model_fn: ModelFn,
    x: Tensor,
    sigma: Tensor,
    cond: Any,
    sigma_data: float,
    sigma_min: float,
) -> Tensor:
    """f(x, sigma): the parametrised consistency function. x: (B, ...); sigma: (B,)."""
    s = _expand(sigma, x)
    raw = model_fn(x * c_in(s, sigma_data), c_noise(sigma.float()), cond)
    return c_skip(s, sigma_data, sigma_min) * x + c_out(s, sigma_data, sigma_min) * raw


@dataclass(frozen=True)
class CTBatch:
    """One consistency-training batch: the caller's loss is ``weights * d(predicted, target)``.

    predicted: (B, ...) with grad; target: (B, ...) detached; weights: (B,);
    sigma: (B,) the student's (larger) noise level; n_steps: the curriculum's N.
    """

    predicted: Tensor
    target: Tensor
    weights: Tensor
    sigma: Tensor
    n_steps: int


def sample_sigma_pairs(
    batch: int,
    n_steps: int,
    generator: torch.Generator | None,
    *,
    sigma_min: float,
    sigma_max: float,
    rho: float,
    p_mean: float,
    p_std: float,
    device: torch.device | str = "cpu",
) -> tuple[Tensor, Tensor]:
    """Draw (sigma_i, sigma_{i+1}) pairs, each (B,) float32, by lognormal interval index."""
    sigmas = karras_sigmas(n_steps, sigma_min, sigma_max, rho)
    probs = lognormal_index_probs(sigmas, p_mean, p_std)
    gen_device = generator.device if generator is not None else torch.device("cpu")
    idx = torch.multinomial(probs.to(gen_device), batch, replacement=True, generator=generator)
    idx = idx.cpu()
    lo = sigmas[idx].float().to(device)
    hi = sigmas[idx + 1].float().to(device)
    return lo, hi


def consistency_training_step(
    model_fn: ModelFn,
    x0: Tensor,
    cond: Any,
    generator: torch.Generator | None,
    *,
    progress: float,
    cfg: Any,
    target_fn: ModelFn | None = None,
    compute_target: bool = True,
) -> CTBatch:
    """One improved-CT step (no optimiser, no reduction).

    x0: (B, ...) clean data; ``cfg`` is a :class:`~factory.model.config.ConsistencyConfig`.
    The same Gaussian noise is added at sigma_{i+1} (student, with grad) and at sigma_i
    (target, no grad, ``target_fn`` or ``model_fn``). Weights are 1/(sigma_{i+1}-sigma_i).
    ``compute_target=False`` skips the target evaluation and returns ``x0`` as the target
    (for a denoising-only loss).
    """
    n = discretisation_steps(progress, cfg.s0, cfg.s1)
    lo, hi = sample_sigma_pairs(
        x0.shape[0],
        n,
        generator,
        sigma_min=cfg.sigma_min,
        sigma_max=cfg.sigma_max,
        rho=cfg.rho,
        p_mean=cfg.p_mean,
        p_std=cfg.p_std,
        device=x0.device,
    )
    noise = torch.randn(x0.shape, generator=generator, device=x0.device, dtype=x0.dtype)
    pred = consistency_fn(
        model_fn, x0 + _expand(hi, x0) * noise, hi, cond, cfg.sigma_data, cfg.sigma_min
    )
    if not compute_target:
        return CTBatch(predicted=pred, target=x0, weights=1.0 / (hi - lo), sigma=hi, n_steps=n)
    with torch.no_grad():
        tgt = consistency_fn(
            target_fn or model_fn,
            x0 + _expand(lo, x0) * noise,
            lo,
            cond,
            cfg.sigma_data,
            cfg.sigma_min,
        ).detach()
    weights = 1.0 / (hi - lo)
    return CTBatch(predicted=pred, target=tgt, weights=weights, sigma=hi, n_steps=n)


def ct_loss(batch: CTBatch, huber_c: float) -> Tensor:
    """Scalar improved-CT loss: mean(weights * pseudo_huber), weights normalised to mean 1."""
    w = batch.weights / batch.weights.mean()
    return (w * pseudo_huber(batch.predicted, batch.target, huber_c)).mean()


def sample_one_step(
    model_fn: ModelFn,
    shape: tuple[int, ...],
    cond: Any,
    generator: torch.Generator | None,
    *,
    sigma_max: float,
    sigma_data: float,
    sigma_min: float,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """One-step consistency sample: f(sigma_max * eps, sigma_max). Returns (shape) tensor."""
    x = torch.randn(shape, generator=generator, device=device, dtype=dtype) * sigma_max
    sigma = torch.full((shape[0],), sigma_max, device=device, dtype=torch.float32)
    return consistency_fn(model_fn, x, sigma, cond, sigma_data, sigma_min)


def sample_multistep(
    model_fn: ModelFn,
    shape: tuple[int, ...],
    cond: Any,
    generator: torch.Generator | None,
    sigmas: list[float],
    *,
    sigma_data: float,
    sigma_min: float,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Multistep consistency sampling over decreasing ``sigmas`` (the first is sigma_max)."""
    x = sample_one_step(
        model_fn,
        shape,
        cond,
        generator,
        sigma_max=sigmas[0],
        sigma_data=sigma_data,
        sigma_min=sigma_min,
        device=device,
        dtype=dtype,
    )
    for s in sigmas[1:]:
        eps = torch.randn(shape, generator=generator, device=device, dtype=dtype)
        noisy = x + math.sqrt(max(s**2 - sigma_min**2, 0.0)) * eps
        sig = torch.full((shape[0],), s, device=device)
        x = consistency_fn(model_fn, noisy, sig, cond, sigma_data, sigma_min)
    return x
