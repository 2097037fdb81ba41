"""Consistency-model maths: boundary condition, schedules, sampler, training step."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import pytest
import torch

from factory.model import consistency as cm
from factory.model.config import ConsistencyConfig


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models: one thread avoids OpenMP spin-wait stalls on a shared CPU."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


CFG = ConsistencyConfig(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5, s0=10, s1=1280)


def toy_model(x_in: torch.Tensor, c_noise: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
    """A fixed nonlinear function of its inputs, to check the parametrisation."""
    return torch.tanh(x_in * 1.3 + c_noise.view(-1, 1, 1) + cond)


def test_boundary_condition() -> None:
    s = torch.tensor([CFG.sigma_min], dtype=torch.float64)
    assert cm.c_skip(s, CFG.sigma_data, CFG.sigma_min).item() == 1.0
    assert cm.c_out(s, CFG.sigma_data, CFG.sigma_min).item() == 0.0
    x = torch.randn(3, 4, 5)
    sig = torch.full((3,), CFG.sigma_min)
    out = cm.consistency_fn(toy_model, x, sig, torch.zeros(3, 4, 5), CFG.sigma_data, CFG.sigma_min)
    torch.testing.assert_close(out, x, rtol=0, atol=1e-6)


def test_scalings_are_sane() -> None:
    s = cm.karras_sigmas(50, CFG.sigma_min, CFG.sigma_max)
    skip, out = cm.c_skip(s, 0.5, CFG.sigma_min), cm.c_out(s, 0.5, CFG.sigma_min)
    assert torch.all(skip <= 1) and torch.all(skip > 0)
    assert torch.all(out >= 0) and torch.all(out <= 0.5 + 1e-9)
    assert torch.all(torch.diff(skip) < 0) and torch.all(torch.diff(out) > 0)
    assert torch.all(cm.c_in(s, 0.5) > 0)


def test_karras_sigmas_monotone_and_bounded() -> None:
    s = cm.karras_sigmas(11, 0.002, 80.0, 7.0)
    assert s.shape == (11,)
    assert torch.all(torch.diff(s) > 0)
    assert math.isclose(s[0].item(), 0.002, rel_tol=1e-9)
    assert math.isclose(s[-1].item(), 80.0, rel_tol=1e-9)
    with pytest.raises(ValueError):
        cm.karras_sigmas(1, 0.002, 80.0)


def test_discretisation_curriculum() -> None:
    ns = [cm.discretisation_steps(p / 100, 10, 1280) for p in range(101)]
    assert ns[0] == 11 and ns[-1] == 1281
    assert all(b >= a for a, b in itertools.pairwise(ns))
    assert set(ns) == {10 * 2**i + 1 for i in range(8)}


def test_lognormal_index_probs() -> None:
    s = cm.karras_sigmas(41, 0.002, 80.0)
    p = cm.lognormal_index_probs(s, -1.1, 2.0)
    assert p.shape == (40,)
    assert torch.all(p > 0)
    assert math.isclose(p.sum().item(), 1.0, rel_tol=1e-9)
    # most of the mass is around exp(P_mean) ~ 0.33, not at the extremes
    assert p.argmax().item() not in (0, 39)


def test_pseudo_huber() -> None:
    a = torch.randn(4, 10)
    assert torch.allclose(cm.pseudo_huber(a, a, 0.01), torch.zeros(4))
    big = cm.pseudo_huber(a + 100.0, a, 0.01)
    assert torch.allclose(big, torch.full((4,), 100.0), rtol=1e-3)


def test_sample_one_step_is_deterministic_for_a_seed() -> None:
    cond = torch.randn(2, 3, 3)

    def draw(seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return cm.sample_one_step(
            toy_model, (2, 3, 3), cond, g, sigma_max=80.0, sigma_data=0.5, sigma_min=0.002
        )

    a, b, c = draw(0), draw(0), draw(1)
    assert a.shape == (2, 3, 3)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert torch.isfinite(a).all()


def test_sample_multistep_shape() -> None:
    g = torch.Generator().manual_seed(0)
    out = cm.sample_multistep(
        toy_model,
        (2, 3, 3),
        torch.zeros(2, 3, 3),
        g,
        [80.0, 1.0, 0.1],
        sigma_data=0.5,
        sigma_min=0.002,
    )
    assert out.shape == (2, 3, 3) and torch.isfinite(out).all()


def test_training_step_shapes_and_weights() -> None:
    net = torch.nn.Conv1d(3, 3, 1)

    def model_fn(x_in: torch.Tensor, c_noise: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return net(x_in + cond) + c_noise.view(-1, 1, 1)

    x0 = torch.randn(16, 3, 5)
    g = torch.Generator().manual_seed(0)
    batch = cm.consistency_training_step(
        model_fn, x0, torch.zeros_like(x0), g, progress=0.3, cfg=CFG
    )
    assert batch.predicted.shape == x0.shape == batch.target.shape
    assert batch.predicted.requires_grad and not batch.target.requires_grad
    assert batch.weights.shape == (16,) and torch.all(batch.weights > 0)
    assert torch.isfinite(batch.weights).all()
    assert torch.all(batch.sigma > CFG.sigma_min) and torch.all(batch.sigma <= CFG.sigma_max)
    assert batch.n_steps == cm.discretisation_steps(0.3, CFG.s0, CFG.s1)
    loss = cm.ct_loss(batch, cm.default_huber_c(CFG.sigma_data))
    loss.backward()
    assert net.weight.grad is not None and torch.isfinite(net.weight.grad).all()


def test_sigma_pairs_are_adjacent_levels() -> None:
    g = torch.Generator().manual_seed(0)
    lo, hi = cm.sample_sigma_pairs(
        64, 11, g, sigma_min=0.002, sigma_max=80.0, rho=7.0, p_mean=-1.1, p_std=2.0
    )
    levels = cm.karras_sigmas(11, 0.002, 80.0).float()
    assert torch.all(hi > lo)
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        i = int(torch.argmin((levels - a).abs()))
        assert math.isclose(levels[i + 1].item(), b, rel_tol=1e-5)
