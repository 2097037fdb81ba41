"""The ``object_state`` kind's three learned parts on their own: the object-frame
dynamics (agent fit, hard gate, equivariance, wall inputs), the sprite renderer (shapes,
known pixels, gradients) and the reader's refinement."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from factories import pusht_scene, set_sprite, tiny_object_state_config, tiny_object_state_model

from factory.model.object_state.config import ReaderConfig, RendererConfig
from factory.model.object_state.dynamics import ObjectDynamics
from factory.model.object_state.geometry import rotate, wrap_angle
from factory.model.object_state.reader import refine
from factory.model.object_state.renderer import SpriteRenderer

SIZE = 32
PX = 512 / SIZE  # board px per image column
BLOCK_RGB = torch.tensor([0.1, 0.6, 0.9])


# -- dynamics ---------------------------------------------------------------------------
A_VEL = torch.tensor([[0.6, -0.1], [0.1, 0.6]])
A_PREV = torch.tensor([[0.15, 0.0], [0.0, 0.15]])
A_CMD = torch.tensor([[0.3, 0.05], [-0.02, 0.25]])


def _agent_law(
    prev: torch.Tensor, cur: torch.Tensor, pa: torch.Tensor, a: torch.Tensor
) -> torch.Tensor:
    """A known linear agent law, zero at rest (prev = cur = both targets)."""
    return cur + (cur - prev) @ A_VEL.T + (pa - cur) @ A_PREV.T + (a - cur) @ A_CMD.T


def _agent_windows(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows states (n, 3, 5), actions (n, 3, 2) following :func:`_agent_law`."""
    g = torch.Generator().manual_seed(seed)
    cur = torch.rand(n, 2, generator=g) * 400 + 56
    prev = cur - torch.randn(n, 2, generator=g) * 8
    pa = cur + torch.randn(n, 2, generator=g) * 20
    a = cur + torch.randn(n, 2, generator=g) * 20
    states = torch.rand(n, 3, 5, generator=g) * 300  # block entries: anything
    states[:, 0, :2], states[:, 1, :2] = prev, cur
    states[:, 2, :2] = _agent_law(prev, cur, pa, a)
    actions = torch.stack([pa, a, torch.zeros_like(a)], dim=1)
    return states, actions


def _fitted_dynamics() -> ObjectDynamics:
    dyn = ObjectDynamics(tiny_object_state_config().dynamics)
    dyn.fit_agent(*_agent_windows(256, seed=0))
    return dyn


def test_fit_agent_recovers_a_linear_law() -> None:
    dyn = ObjectDynamics(tiny_object_state_config().dynamics)
    residual = dyn.fit_agent(*_agent_windows(256, seed=0))
    assert residual < 1e-3
    torch.testing.assert_close(
        dyn.agent.weight.detach(), torch.cat([A_VEL, A_PREV, A_CMD], 1), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(dyn.agent.bias.detach(), torch.zeros(2), atol=1e-5, rtol=0)
    states, actions = _agent_windows(64, seed=1)  # fresh samples
    with torch.no_grad():
        nxt = dyn.agent_next(states[:, 0, :2], states[:, 1, :2], actions[:, 0], actions[:, 1])
    assert (nxt - states[:, 2, :2]).abs().max() < 1e-3


def test_agent_at_rest_stays_put() -> None:
    """Started from one state with an agent map fitted to a law that is zero at rest, an
    agent commanded to its own position does not move."""
    model = tiny_object_state_model(0)
    model.dynamics = _fitted_dynamics().eval()
    s = pusht_scene(4, seed=12)[1].numpy()
    model.start(states=s[:, None])
    for _ in range(3):
        out = model.step(s[:, :2])
        np.testing.assert_allclose(out.state, s[:, :2], atol=1e-3, rtol=0)


def _const_block_dynamics(bias: list[float]) -> ObjectDynamics:
    """A fitted agent map and a block MLP whose output is the constant ``bias``."""
    dyn = _fitted_dynamics()
    with torch.no_grad():
        dyn.block[-1].weight.zero_()
        dyn.block[-1].bias.copy_(torch.tensor(bias))
    return dyn


def test_hard_gate_keeps_a_still_block_exactly() -> None:
    prev, cur, pa, a = pusht_scene(16, seed=2)
    dyn = ObjectDynamics(tiny_object_state_config().dynamics)
    with torch.no_grad():
        torch.nn.init.normal_(dyn.block[-1].weight, std=0.1)
        dyn.block[-1].bias.copy_(torch.tensor([1.0, -1.0, 1.0, -20.0]))
        nxt, logit = dyn(prev, cur, pa, a)
    assert (torch.sigmoid(logit) < dyn.cfg.gate_threshold).all()
    assert torch.equal(nxt[:, 2:], cur[:, 2:])  # bit for bit
    torch.testing.assert_close(nxt[:, :2], dyn.agent_next(prev[:, :2], cur[:, :2], pa, a))


def test_gate_below_threshold_stops_and_soft_gate_scales() -> None:
    """Block output (1, -0.5, 0.4) with logit -1: the hard gate holds the block; the soft
    gate moves it by sigmoid(-1) of the displacement, rotated into the world frame."""
    prev, cur, pa, a = pusht_scene(8, seed=3)
    dyn = _const_block_dynamics([1.0, -0.5, 0.4, -1.0])
    cfg = dyn.cfg
    with torch.no_grad():
        hard, logit = dyn(prev, cur, pa, a, hard_gate=True)
        soft, _ = dyn(prev, cur, pa, a, hard_gate=False)
        up = _const_block_dynamics([1.0, -0.5, 0.4, 1.0])(prev, cur, pa, a)[0]
    torch.testing.assert_close(logit, torch.full((8,), -1.0))
    assert torch.equal(hard[:, 2:], cur[:, 2:])
    local = torch.tensor([1.0, -0.5]) * cfg.delta_scale
    for p, got in ((torch.sigmoid(torch.tensor(-1.0)), soft), (torch.tensor(1.0), up)):
        want_xy = cur[:, 2:4] + p * rotate(local.expand(8, 2), cur[:, 4])
        want_ang = wrap_angle(cur[:, 4] + p * 0.4 * cfg.angle_scale)
        torch.testing.assert_close(got[:, 2:4], want_xy, atol=1e-4, rtol=0)
        torch.testing.assert_close(got[:, 4], want_ang, atol=1e-6, rtol=0)
    assert (soft[:, 2:4] - cur[:, 2:4]).norm(dim=-1).min() > 1.0  # it does move


def test_block_dynamics_is_rotation_and_translation_equivariant() -> None:
    """Away from the walls (their inputs are zero), rotating the scene about the board's
    centre by phi (block angle + phi) and translating it transforms the next state alike."""
    cfg = tiny_object_state_config().dynamics
    torch.manual_seed(4)
    dyn = ObjectDynamics(cfg)
    j = torch.tensor([[0.0, -1.0], [1.0, 0.0]])
    with torch.no_grad():
        torch.nn.init.normal_(dyn.block[-1].weight, std=0.5)
        torch.nn.init.normal_(dyn.block[-1].bias, std=0.5)
        # an agent map that commutes with rotations: a I + b J per input
        blocks = [0.5 * torch.eye(2) + 0.1 * j, 0.1 * torch.eye(2), 0.3 * torch.eye(2) - 0.05 * j]
        dyn.agent.weight.copy_(torch.cat(blocks, 1))
        dyn.agent.bias.zero_()
    lo, hi = cfg.walls
    centre = torch.full((2,), (lo + hi) / 2)
    prev, cur, pa, a = pusht_scene(32, seed=5)
    g = torch.Generator().manual_seed(55)
    offset = centre + (torch.rand(32, 2, generator=g) * 2 - 1) * 45 - cur[:, 2:4]
    for t in (prev, cur):  # the block within 45 px of the centre on each axis
        t[:, :4] += offset.repeat(1, 2)
    pa, a = pa + offset, a + offset
    phi, shift = 1.1, torch.tensor([-21.0, 13.5])

    def pos(p: torch.Tensor) -> torch.Tensor:
        return rotate(p - centre, torch.tensor(phi)) + centre + shift

    def state(s: torch.Tensor) -> torch.Tensor:
        return torch.cat([pos(s[:, :2]), pos(s[:, 2:4]), wrap_angle(s[:, 4:] + phi)], 1)

    for scene in (cur, state(cur)):  # no wall within range: the test is about the MLP
        dist = torch.cat([scene[:, 2:4] - lo, hi - scene[:, 2:4]], 1)
        assert dist.min() > cfg.wall_range
    with torch.no_grad():
        nxt, logit = dyn(prev, cur, pa, a, hard_gate=False)
        moved, moved_logit = dyn(state(prev), state(cur), pos(pa), pos(a), hard_gate=False)
    assert (nxt[:, 2:4] - cur[:, 2:4]).norm(dim=-1).mean() > 0.1  # the block does move
    want = state(nxt)
    torch.testing.assert_close(moved[:, :4], want[:, :4], atol=1e-3, rtol=0)
    assert wrap_angle(moved[:, 4] - want[:, 4]).abs().max() < 1e-4
    torch.testing.assert_close(moved_logit, logit, atol=1e-4, rtol=0)


def test_wall_inputs_see_only_near_walls() -> None:
    """Each wall's inward normal, in the block's frame, scaled by 1 - distance / range."""
    cfg = tiny_object_state_config().dynamics
    dyn = ObjectDynamics(cfg)
    lo, hi = cfg.walls
    r = cfg.wall_range
    origin = torch.tensor([[lo + r / 2, (lo + hi) / 2], [(lo + hi) / 2, hi - r / 4]])
    angle = torch.tensor([math.pi / 2, 0.0])
    got = dyn.wall_inputs(origin, angle).reshape(2, 4, 2)
    want = torch.zeros(2, 4, 2)
    want[0, 0] = torch.tensor([0.0, -0.5])  # left wall's (1, 0) seen from a block turned 90 deg
    want[1, 3] = torch.tensor([0.0, -0.75])  # the far y wall's (0, -1), unturned
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


# -- renderer ---------------------------------------------------------------------------
def _plain_renderer(agent_visible: bool) -> SpriteRenderer:
    """The tiny model's renderer over a constant background, its block one colour."""
    ren = tiny_object_state_model(0).renderer
    assert ren is not None
    set_sprite(ren.block, BLOCK_RGB, torch.sigmoid(ren.block.alpha[0]) > 0.5)
    if not agent_visible:
        m = ren.agent.alpha.shape[-1]
        set_sprite(ren.agent, BLOCK_RGB, torch.zeros(m, m, dtype=torch.bool))
        with torch.no_grad():
            ren.agent.alpha.fill_(-30.0)
    with torch.no_grad():
        ren.background.fill_(0.25)
    return ren


def test_renderer_shapes_and_known_pixels() -> None:
    ren = _plain_renderer(agent_visible=False)
    state = torch.tensor([[100.0, 100.0, 200.0, 264.0, 0.3], [400.0, 60.0, 300.0, 300.0, -2.0]])
    with torch.no_grad():
        img = ren(state)
    assert img.shape == (2, 3, SIZE, SIZE) and img.dtype == torch.float32
    assert float(img.min()) >= 0.0 and float(img.max()) <= 1.0
    u8 = ren.render_uint8(state)
    assert u8.shape == (2, SIZE, SIZE, 3) and u8.dtype == torch.uint8
    # column 12 and row 16 sample the board at x = 200, y = 264: the block's opaque centre
    opaque = float(torch.sigmoid(torch.tensor(8.0)))
    want = BLOCK_RGB * opaque + 0.25 * (1 - opaque)
    torch.testing.assert_close(img[0, :, 16, 12], want, atol=1e-5, rtol=0)
    # a corner far from both objects is the background
    torch.testing.assert_close(img[0, :, 31, 31], torch.full((3,), 0.25), atol=1e-6, rtol=0)


def test_moving_the_block_moves_its_pixels() -> None:
    ren = _plain_renderer(agent_visible=False)
    state = torch.tensor([[100.0, 100.0, 200.0, 256.0, 0.3]])
    moved = state + torch.tensor([0.0, 0.0, 64.0, 0.0, 0.0])
    with torch.no_grad():
        a, b = ren(state), ren(moved)
    cols = round(64 / PX)
    assert cols == 4
    assert (a - b).abs().max() > 0.5  # the block is visible and did move
    torch.testing.assert_close(b, torch.roll(a, cols, dims=3), atol=1e-5, rtol=0)


def test_renderer_gradient_matches_finite_differences() -> None:
    ren = _plain_renderer(agent_visible=True).double()
    weights = torch.rand(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(6)).double()
    state = torch.tensor([[230.0, 180.0, 250.0, 270.0, 0.4]], dtype=torch.float64)

    def loss(s: torch.Tensor) -> torch.Tensor:
        return (ren(s) * weights).sum()

    s = state.clone().requires_grad_(True)
    loss(s).backward()
    assert s.grad is not None
    grad = s.grad[0]
    h = 1e-4
    for i in range(5):
        e = torch.zeros(1, 5, dtype=torch.float64)
        e[0, i] = h
        with torch.no_grad():
            fd = (loss(state + e) - loss(state - e)) / (2 * h)
        assert abs(float(fd)) > 1e-3, i  # every entry of the state changes the frame
        assert float(grad[i]) == pytest.approx(float(fd), rel=1e-3, abs=1e-6), i


# -- reader -----------------------------------------------------------------------------
def _textured_renderer() -> SpriteRenderer:
    """A coarse-textured renderer (a texel covers 8 board px: a smooth photometric error
    at 32 px) with an asymmetric, colour-graded T-like block and a disc agent."""
    ren = SpriteRenderer(RendererConfig(image_size=(SIZE, SIZE), texels_per_unit=0.125))
    with torch.no_grad():
        ren.background.fill_(0.9)
    for sprite in (ren.block, ren.agent):
        n = sprite.alpha.shape[-1]
        c = (torch.arange(n) + 0.5) / n * 2 - 1
        yy, xx = torch.meshgrid(c, c, indexing="ij")
        if sprite is ren.block:
            bar = (yy.abs() < 0.15) & (xx.abs() < 0.6)
            mask = bar | (((xx - 0.2).abs() < 0.15) & (yy > 0) & (yy < 0.7))
            rgb = torch.stack(
                [0.2 + 0.3 * (xx + 1), torch.full_like(xx, 0.3), 0.8 - 0.3 * (yy + 1)]
            )
            set_sprite(sprite, rgb, mask)
        else:
            set_sprite(sprite, torch.tensor([0.1, 0.7, 0.2]), xx**2 + yy**2 < 0.5)
    return ren


@pytest.mark.parametrize(
    ("steps", "lr"),
    [(ReaderConfig().refine_steps, ReaderConfig().refine_lr), (100, 0.3)],
    ids=["config_defaults", "longer"],
)
def test_refine_recovers_the_state(steps: int, lr: float) -> None:
    """From 3 px / 3 degrees off, fitting the renderer to its own frame finds the state."""
    ren = _textured_renderer()
    true = torch.tensor([[150.0, 380.0, 260.0, 240.0, 0.6], [350.0, 120.0, 230.0, 300.0, -1.2]])
    with torch.no_grad():
        frames = ren(true)
    init = true + torch.tensor([3.0, -3.0, 3.0, -3.0, math.radians(3.0)])
    out = refine(ren, frames, init, steps=steps, lr=lr)
    err_px = (out[:, :4] - true[:, :4]).abs()
    err_deg = torch.rad2deg(wrap_angle(out[:, 4] - true[:, 4])).abs()
    assert err_px.max() < 1.0, err_px  # from 3 px
    assert err_px[:, 2:].max() < 0.3, err_px  # the large block is pinned down better
    assert err_deg.max() < 0.5, err_deg  # from 3 degrees
    assert torch.equal(refine(ren, frames, init, steps=0, lr=lr), init)
