"""The ``object_set`` kind (pile): config and directories, the interaction-network dynamics
(set and shift symmetry, exact stillness), the per-camera homography renderer, the
heatmap reader and the rollout protocol (training: ``test_object_set_train.py``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import (
    set_sprite,
    tiny_object_set_config,
    tiny_object_set_model,
    write_tiny_object_set_dir,
)

from factory.envs import pile_geometry as geo
from factory.envs.model_world import ModelWorld
from factory.envs.pile_render import side_camera
from factory.model import load_model_dir, read_config
from factory.model.object_set.composite import composite
from factory.model.object_set.config import ObjectSetConfig
from factory.model.object_set.dynamics import SetDynamics
from factory.model.object_set.graph import active_discs
from factory.model.object_set.homography import apply, fit_homography
from factory.model.object_set.model import ObjectSetModel
from factory.model.object_set.reader import SetReader, chamfer_px
from factory.model.object_set.renderer import CameraRenderer
from factory.model.registry import kind_names

SIZE = 32


# -- config and model directories -------------------------------------------------------
def test_config_and_model_dir_round_trip(tmp_path: Path) -> None:
    cfg = tiny_object_set_config().with_parts("renderer")
    assert ObjectSetConfig.from_dict(json.loads(cfg.to_json())) == cfg
    assert cfg.state_dim == 62 and cfg.cameras == ("top", "side") and cfg.world == "pile"
    with pytest.raises(ValueError, match="bogus"):
        ObjectSetConfig.from_dict({**cfg.to_dict(), "bogus": 1})
    assert "object_set" in kind_names()
    d = write_tiny_object_set_dir(tmp_path / "m")
    loaded = read_config(d)
    assert isinstance(loaded, ObjectSetConfig) and loaded.parts == (
        "dynamics",
        "reader",
        "renderer",
    )
    model = load_model_dir(d)
    fresh = tiny_object_set_model(0)
    assert isinstance(model, ObjectSetModel) and model.kind == "object_set"
    for part in ("dynamics", "renderer", "reader"):
        got, want = getattr(model, part).state_dict(), getattr(fresh, part).state_dict()
        assert got.keys() == want.keys()
        for k, v in want.items():
            torch.testing.assert_close(got[k], v, rtol=0, atol=0)


# -- dynamics ---------------------------------------------------------------------------
def _random_dynamics(seed: int, logit_bias: float = 0.0) -> SetDynamics:
    """Tiny dynamics with a random output layer (its logits shifted by ``logit_bias``)."""
    torch.manual_seed(seed)
    dyn = SetDynamics(tiny_object_set_config().dynamics)
    with torch.no_grad():
        for p in dyn.out[-1].parameters():
            torch.nn.init.normal_(p, std=0.5)
        dyn.out[-1].bias[2] += logit_bias
    return dyn.eval()


def _cluster(n: int, seed: int, centre: tuple[float, float] = (256.0, 256.0)) -> torch.Tensor:
    """(n, 2) disc centres on a jittered grid 22 px apart (touching, not overlapping)."""
    g = torch.Generator().manual_seed(seed)
    side = int(np.ceil(np.sqrt(n)))
    grid = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="xy"), -1)
    pts = grid.reshape(-1, 2)[:n].float() * 22.0
    pts = pts - pts.mean(0) + torch.tensor(centre)
    return pts + torch.rand(n, 2, generator=g)


def _scene(b: int, n: int, seed: int) -> tuple[torch.Tensor, ...]:
    """prev, cur (b, 2 + 2n) and prev_action, action (b, 2): an agent pushing into a
    cluster at the board's centre, some discs already moving."""
    g = torch.Generator().manual_seed(seed)
    cur = torch.empty(b, 2 + 2 * n)
    for i in range(b):
        discs = _cluster(n, seed + i)
        cur[i, 2:] = discs.flatten()
        cur[i, :2] = discs[0] + torch.tensor([-30.0, 0.0])
    prev = cur.clone()
    prev[:, :2] -= torch.tensor([8.0, 0.0])
    moving = torch.rand(b, n, generator=g) < 0.3
    prev[:, 2:] -= (torch.randn(b, n, 2, generator=g) * moving[..., None]).flatten(1)
    pa = cur[:, :2] + torch.tensor([6.0, 0.0])
    a = cur[:, :2] + torch.randn(b, 2, generator=g) * 10 + torch.tensor([12.0, 0.0])
    return prev, cur, pa, a


def _permute(s: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    discs = s[:, 2:].unflatten(1, (-1, 2))[:, perm]
    return torch.cat([s[:, :2], discs.flatten(1)], 1)


def test_dynamics_is_permutation_equivariant() -> None:
    dyn = _random_dynamics(1)
    prev, cur, pa, a = _scene(4, 12, seed=2)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        nxt, logit, act = dyn(prev, cur, pa, a)
        p_nxt, p_logit, p_act = dyn(_permute(prev, perm), _permute(cur, perm), pa, a)
    assert act.sum() > 4 and (nxt != cur).any()  # discs are active and some do move
    torch.testing.assert_close(p_nxt, _permute(nxt, perm), atol=1e-4, rtol=0)
    torch.testing.assert_close(p_logit, logit[:, perm], atol=1e-4, rtol=0)
    assert torch.equal(p_act, act[:, perm])


def test_dynamics_is_translation_invariant_away_from_walls() -> None:
    dyn = _random_dynamics(4)
    prev, cur, pa, a = _scene(4, 9, seed=5)
    shift = torch.tensor([-41.5, 57.25])
    lo, hi = dyn.cfg.walls
    for s in (cur, cur + shift.repeat(10)):  # no wall within range: the test is the network
        discs = s[:, 2:].unflatten(1, (-1, 2))
        assert torch.cat([discs - lo, hi - discs]).min() > dyn.cfg.wall_range

    def moved(s: torch.Tensor) -> torch.Tensor:
        return s + shift.repeat(s.shape[1] // 2)

    with torch.no_grad():
        nxt, logit, act = dyn(prev, cur, pa, a)
        s_nxt, s_logit, s_act = dyn(moved(prev), moved(cur), pa + shift, a + shift)
    assert (nxt[:, 2:] - cur[:, 2:]).abs().max() > 0.1  # the discs do move
    torch.testing.assert_close(s_nxt, moved(nxt), atol=1e-3, rtol=0)
    torch.testing.assert_close(s_logit, logit, atol=1e-4, rtol=0)
    assert torch.equal(s_act, act)


def test_the_gate_moves_a_disc_wholly_or_not_and_learns_by_straight_through() -> None:
    """A moving disc moves by its whole displacement (not scaled by the gate's
    probability); the loss's gradient still reaches every active disc's logit."""
    dyn = _random_dynamics(11)
    prev, cur, pa, a = _scene(2, 9, seed=12)
    with torch.no_grad():  # centre the logits of the active discs: about half move
        logit, act = dyn(prev, cur, pa, a)[1:]
        dyn.out[-1].bias[2] -= logit[act].median() + 1e-4
    nxt, logit, act = dyn(prev, cur, pa, a)
    out = dyn.disc_outputs(prev, cur, dyn.agent(prev[:, :2], cur[:, :2], pa, a), act)
    on = act & (torch.sigmoid(logit) > dyn.cfg.gate_threshold)
    assert on.any() and (act & ~on).any()
    step = (nxt - cur)[:, 2:].unflatten(1, (-1, 2))
    torch.testing.assert_close(step[on], out[..., :2][on] * dyn.cfg.delta_scale)
    assert torch.equal(step[~on], torch.zeros_like(step[~on]))
    logit.retain_grad()
    (nxt[:, 2:] ** 2).sum().backward()
    assert logit.grad is not None
    assert (logit.grad[act] != 0).all() and (logit.grad[~act] == 0).all()


def test_untouched_discs_stay_exactly_still() -> None:
    """With every gate wide open (logits + 20), discs at rest that the agent's path does
    not reach, nor any active disc, keep their positions bit for bit; the pile it pushes
    does move."""
    dyn = _random_dynamics(6, logit_bias=20.0)
    near, far = _cluster(6, 0, (150.0, 150.0)), _cluster(9, 1, (380.0, 360.0))
    cur = torch.cat([near[0] - torch.tensor([27.0, 0.0]), near.flatten(), far.flatten()])[None]
    prev = cur.clone()
    prev[0, :2] -= torch.tensor([10.0, 0.0])
    act_target = cur[:, :2] + torch.tensor([[20.0, 0.0]])
    with torch.no_grad():
        nxt, _, act = dyn(prev, cur, act_target, act_target)
    assert act[0, :6].any() and not act[0, 6:].any()
    assert torch.equal(nxt[0, 14:], cur[0, 14:])  # the far pile, bit for bit
    assert (nxt[0, 2:14] != cur[0, 2:14]).any()


def test_discs_out_of_reach_change_nothing_and_are_not_computed() -> None:
    """A far pile (neither active nor sending to an active disc) leaves the pushed pile's
    outputs as they are without it, and gets outputs 0: its nodes are not computed."""
    dyn = _random_dynamics(8)
    near, far = _cluster(6, 2, (150.0, 150.0)), _cluster(9, 3, (380.0, 360.0))
    agent = near[0] - torch.tensor([27.0, 0.0])

    def outputs(*piles: torch.Tensor) -> torch.Tensor:
        cur = torch.cat([agent, *(p.flatten() for p in piles)])[None]
        prev = cur.clone()
        prev[0, :2] -= torch.tensor([10.0, 0.0])
        target = cur[:, :2] + torch.tensor([[20.0, 0.0]])
        with torch.no_grad():
            nxt_agent = dyn.agent(prev[:, :2], cur[:, :2], target, target)
            return dyn.disc_outputs(prev, cur, nxt_agent, dyn.active(prev, cur, nxt_agent))

    both, alone = outputs(near, far), outputs(near)
    assert alone.abs().amax() > 0.01
    torch.testing.assert_close(both[:, :6], alone, atol=1e-5, rtol=0)
    assert torch.equal(both[:, 6:], torch.zeros_like(both[:, 6:]))


def test_a_held_agent_leaves_the_pile_exactly_still_for_100_steps() -> None:
    model = tiny_object_set_model(0)
    assert model.dynamics is not None
    with torch.no_grad():
        model.dynamics.out[-1].bias[2] += 20.0  # every active disc would move
    discs = _cluster(30, 7, (300.0, 300.0)).flatten()
    state = torch.cat([torch.tensor([100.0, 100.0]), discs])[None].numpy()
    model.start(states=state[:, None])
    for _ in range(100):
        out = model.step(state[:, :2])
    np.testing.assert_array_equal(out.task_state, state[:, 2:])


def test_coasting_factor_is_fitted_on_sliding_discs_and_carries_them_on() -> None:
    """``fit_coast`` finds the factor of discs sliding on far from the agent, ignoring the
    discs it pushes at constant speed; with the network's step 0 and every gate open, a
    sliding disc then moves by that factor times its last step. Without ``coast`` there is
    no such parameter, so older model directories load as they were."""
    base = tiny_object_set_config().dynamics
    assert not base.coast and SetDynamics(base).coast is None
    assert SetDynamics(base).fit_coast(torch.zeros(1, 3, 62)) == 0.0
    dyn = SetDynamics(dataclasses.replace(base, coast=True, agent_radius=150.0))
    g = torch.Generator().manual_seed(0)
    b, n = 16, 30
    first = torch.rand(b, n, 2, generator=g) * 300 + 100
    vel = torch.randn(b, n, 2, generator=g) * 3
    agent = torch.full((b, 1, 2), 60.0)
    pushed = (first + vel - agent).norm(dim=-1) < 150  # near the agent: pushed steadily
    assert pushed.any() and (~pushed).any()
    factor = torch.where(pushed, 1.0, 0.54)[..., None]
    discs = torch.stack([first, first + vel, first + vel + factor * vel], 1)  # (B, 3, N, 2)
    states = torch.cat([agent.expand(b, 3, 2), discs.flatten(2)], -1)
    assert dyn.fit_coast(states) == pytest.approx(0.54, abs=1e-5)
    with torch.no_grad():
        dyn.out[-1].bias[2] = 20.0  # the network's step is 0, every gate open
        prev, cur = states[:, 0], states[:, 1]
        nxt, _, act = dyn(prev, cur, cur[:, :2], cur[:, :2])
    assert act.all()  # every disc moved in the last step
    torch.testing.assert_close(nxt[:, 2:] - cur[:, 2:], 0.54 * vel.flatten(1), atol=1e-4, rtol=0)


def test_activity_spreads_through_touching_discs_for_hops() -> None:
    """A row of discs 22 px apart (within ``reach_disc``): the agent's push reaches the
    first, and ``hops`` more along the row; the rest stay inactive."""
    cfg = tiny_object_set_config().dynamics
    row = torch.stack([torch.arange(12.0) * 22 + 100, torch.full((12,), 200.0)], -1)[None]
    agent = torch.tensor([[100.0 - 40, 200.0]])
    act = active_discs(row, row, agent, agent + torch.tensor([[15.0, 0.0]]),
                       cfg.reach_agent, cfg.reach_disc, cfg.hops)  # fmt: skip
    assert act[0].tolist() == [True] * (1 + cfg.hops) + [False] * (11 - cfg.hops)


# -- renderer ---------------------------------------------------------------------------
def test_composite_matches_sequential_over() -> None:
    """Sparse entries composited by depth equal full-frame layers drawn far to near."""
    g = torch.Generator().manual_seed(8)
    b, m, h, w = 2, 4, 6, 5
    bg = torch.rand(3, h, w, generator=g)
    rgb = torch.rand(b, m, 3, h * w, generator=g)
    alpha = torch.rand(b, m, h * w, generator=g) * (torch.rand(b, m, h * w, generator=g) < 0.5)
    near = torch.stack([torch.randperm(m, generator=g) for _ in range(b)])  # (B, M)
    want = bg.flatten(1)[None].repeat(b, 1, 1)
    for r in reversed(range(m)):  # far to near
        k = (near == r).float().argmax(1)
        a_k = alpha[torch.arange(b), k][:, None]
        want = want * (1 - a_k) + rgb[torch.arange(b), k] * a_k
    keep = alpha > 0
    bi, mi, pi = keep.nonzero(as_tuple=True)
    got = composite(bg, b, bi * h * w + pi, near[bi, mi], rgb[bi, mi, :, pi], alpha[bi, mi, pi])
    torch.testing.assert_close(got, want.unflatten(2, (h, w)), atol=1e-5, rtol=0)


def test_supersampled_composite_is_the_box_filter_of_the_fine_one() -> None:
    """Entries on a 3 x finer grid composite to the 3 x 3 mean of the fine frame drawn
    over the background repeated to that grid (and the gradients agree too)."""
    g = torch.Generator().manual_seed(9)
    b, h, w, ss, e = 2, 4, 5, 3, 150
    bg = torch.rand(3, h, w, generator=g)
    pixel = torch.randperm(b * h * w * ss * ss, generator=g)[:e].repeat(2)  # two layers
    near = torch.arange(2).repeat_interleave(e)  # of e samples each, one nearer
    rgb = torch.rand(len(pixel), 3, generator=g)
    alpha = torch.rand(len(pixel), generator=g).requires_grad_()
    got = composite(bg, b, pixel, near, rgb, alpha, ss)
    fine_bg = bg.repeat_interleave(ss, 1).repeat_interleave(ss, 2)
    want = torch.nn.functional.avg_pool2d(composite(fine_bg, b, pixel, near, rgb, alpha), ss)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    (grad_got,) = torch.autograd.grad(got.square().sum(), alpha)
    (grad_want,) = torch.autograd.grad(want.square().sum(), alpha)
    torch.testing.assert_close(grad_got, grad_want, atol=1e-5, rtol=1e-4)


def _plain_camera(
    disc_rgb: list[float], agent_rgb: list[float], size: int = SIZE
) -> CameraRenderer:
    """A camera over a grey background with opaque round sprites of one colour each."""
    cam = CameraRenderer(tiny_object_set_config(size).renderer)
    with torch.no_grad():
        cam.background.fill_(0.5)
    for sprite, rgb, r in ((cam.disc, disc_rgb, geo.DISC_RADIUS),
                           (cam.agent, agent_rgb, geo.AGENT_RADIUS)):  # fmt: skip
        n = sprite.alpha.shape[-1]
        c = ((torch.arange(n) + 0.5) / n * 2 - 1) * sprite.extent
        set_sprite(sprite, torch.tensor(rgb), c[:, None] ** 2 + c[None, :] ** 2 < r**2)
    return cam


def test_top_camera_draws_a_disc_where_it_is() -> None:
    cam = _plain_camera([0.9, 0.1, 0.1], [0.1, 0.1, 0.9])
    state = torch.tensor([[60.0, 60.0, 216.0, 344.0]])  # agent, one disc
    with torch.no_grad():
        img = cam(state)
    assert img.shape == (1, 3, SIZE, SIZE)
    opaque = float(torch.sigmoid(torch.tensor(8.0)))
    want = torch.tensor([0.9, 0.1, 0.1]) * opaque + 0.5 * (1 - opaque)
    torch.testing.assert_close(img[0, :, 21, 13], want, atol=1e-5, rtol=0)  # its centre
    torch.testing.assert_close(img[0, :, 3, 30], torch.full((3,), 0.5), atol=1e-6, rtol=0)


def _side_homography(size: int) -> np.ndarray:
    """The pile's side camera at ``size`` px as a pixel -> board homography (unit
    coordinates), fitted exactly to its projection of the floor."""
    cam = side_camera(size)
    board = np.stack(np.meshgrid(np.linspace(20, 490, 5), np.linspace(20, 490, 5)), -1)
    board = board.reshape(-1, 2)
    pix, _ = cam.project(np.c_[board, np.zeros(len(board))])
    return fit_homography(pix / size * 2 - 1, board / 256 - 1)


def test_side_camera_draws_the_nearer_object_over_the_farther() -> None:
    """Through the side camera's homography the agent just behind a disc (smaller y,
    farther from the camera) is hidden where they overlap; just in front, it hides it."""
    size = 96  # a pixel spans about 7 board px: both objects cover the probed one
    cam = _plain_camera([0.9, 0.1, 0.1], [0.1, 0.1, 0.9], size)
    cam.set_homography(_side_homography(size))
    disc = torch.tensor([256.0, 300.0])
    colours = []
    for dy in (-12.0, 12.0):
        state = torch.cat([disc + torch.tensor([0.0, dy]), disc])[None]
        between = (disc + torch.tensor([0, dy / 2])) / 256 - 1
        pix, _ = apply(torch.linalg.inv(cam.homography()), between)
        col, row = ((pix + 1) / 2 * size).long().tolist()
        with torch.no_grad():
            colours.append(cam(state)[0, :, row, col])
    assert colours[0][0] > 0.8 and colours[0][2] < 0.2  # agent behind: the disc shows
    assert colours[1][2] > 0.8 and colours[1][0] < 0.2  # agent in front: the agent shows


def test_both_views_come_from_one_state() -> None:
    model = tiny_object_set_model(0)
    prev, cur, pa, a = _scene(2, 30, seed=9)
    model.start(states=torch.stack([prev, cur], 1).numpy(), context_actions=pa[:, None].numpy())
    out = model.step(a.numpy())
    assert out.frames.shape == (2, SIZE, SIZE, 3) and out.frames.dtype == np.uint8
    assert list(out.views) == ["side"] and out.views["side"].shape == out.frames.shape
    assert out.task_state is not None and out.task_state.shape == (2, 60)
    state = np.concatenate([out.state, out.task_state], 1)
    views = model.render_views(state)
    np.testing.assert_array_equal(out.frames, views["top"])
    np.testing.assert_array_equal(out.views["side"], views["side"])
    moved = state.copy()
    moved[:, 2:4] += 90.0  # one disc elsewhere: both views change
    again = model.render_views(moved)
    assert all((again[c] != views[c]).any() for c in ("top", "side"))


# -- reader -----------------------------------------------------------------------------
def test_reader_reads_peaks_as_a_set_and_its_loss_ignores_order() -> None:
    reader = SetReader(tiny_object_set_config().reader, n_discs=3)
    maps = torch.full((1, 6, SIZE, SIZE), -10.0)
    maps[:, 2:] = 0.0
    cells = [(5, 7), (20, 12), (9, 27)]  # (col, row)
    for k, (c, r) in enumerate(cells):
        maps[0, 0, r, c] = 5.0 - k
        maps[0, 2:4, r, c] = torch.tensor([0.25, -0.25])
    maps[0, 1, 30, 2] = 3.0  # the agent
    state = reader.read(maps)[0]
    torch.testing.assert_close(state[:2], torch.tensor([2.5, 30.5]) * 16)
    want = (torch.tensor(cells, dtype=torch.float32) + 0.5 + torch.tensor([0.25, -0.25])) * 16
    torch.testing.assert_close(state[2:].reshape(3, 2), want)
    frames = torch.rand(2, 3, SIZE, SIZE)
    states = torch.rand(2, 8) * 500
    perm = torch.tensor([0, 1, 6, 7, 2, 3, 4, 5])  # the discs in another order
    with torch.no_grad():
        base, _ = reader.loss(frames, states)
        shuffled, _ = reader.loss(frames, states[:, perm])
    torch.testing.assert_close(shuffled, base, atol=1e-6, rtol=1e-6)
    assert float(chamfer_px(want[None], want[None, [2, 0, 1]])[0]) == 0.0


# -- the rollout protocol ---------------------------------------------------------------
def test_model_world_on_the_pile() -> None:
    world = ModelWorld(tiny_object_set_model(0), batch_size=2, seed=0)
    try:
        assert world.spec.name == "pile-model" and world.spec.cameras == ("top", "side")
        first = world.reset(seeds=np.array([1, 2]))
        real = world.renderer.reset(seeds=np.array([1, 2]))
        np.testing.assert_array_equal(first.task_state, real.task_state)
        np.testing.assert_array_equal(first.views["side"], real.views["side"])
        out = world.step(np.full((2, 2), 256.0, np.float32))
        assert out.views["side"].shape == (2, SIZE, SIZE, 3)
        state = np.concatenate([out.state, out.task_state], 1)[:1, None]
        obs = world.start_slots([1], first.frames[:1, None], None, states=state)
        model = world.model
        assert isinstance(model, ObjectSetModel)
        np.testing.assert_array_equal(obs.views["side"], model.render_views(state[:, 0])["side"])
        world.keep_slots([1])
        assert world.step(np.full((1, 2), 256.0, np.float32)).frames.shape == (1, SIZE, SIZE, 3)
    finally:
        world.close()


def test_start_from_frames_reads_the_agent_twice_and_the_discs_once() -> None:
    model = tiny_object_set_model(0)
    _, cur, _, _ = _scene(2, 30, seed=10)
    frames = np.stack([model.render(cur.numpy() - 10.0), model.render(cur.numpy())], 1)
    model.start(context_frames=frames, context_actions=cur[:, None, :2].numpy())
    read = model.read_states(frames[:, 1]).numpy()
    agent, discs = model.last_reading()
    np.testing.assert_allclose(agent, read[:, :2], atol=1e-4)
    np.testing.assert_allclose(discs, read[:, 2:], atol=1e-4)
    assert model._states is not None  # the previous state's discs: the same (at rest)
    torch.testing.assert_close(model._states[:, 0, 2:], model._states[:, 1, 2:])
