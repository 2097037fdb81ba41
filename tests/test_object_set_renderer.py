"""The object-set renderer's supersampling and layered sprites (``renderer.supersample``,
``renderer.layers``): a supersampled frame is the box filter of a sharper one, a puck's
layers stack with its top nearest and lean as the learned lift says, a fresh lift starts
where the pile's side camera moves a raised point (``renderer.lift_start``), the loss can
weigh the foreground (``renderer.fg_weight``), and a flat renderer keeps the version-1
parameters."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from factories import set_sprite, tiny_object_set_config

from factory.envs import pile_geometry as geo
from factory.envs import pile_render as pr
from factory.model.object_set.config import SetRendererConfig
from factory.model.object_set.homography import fit_homography, vertical_lift
from factory.model.object_set.renderer import (
    HEIGHT_STEP,
    CameraRenderer,
    SetRenderer,
    _reach,
    foreground_weights,
)

SIZE = 32
RED, BLUE = [0.9, 0.1, 0.1], [0.1, 0.1, 0.9]


def _camera(size: int = SIZE, **changes: float) -> CameraRenderer:
    """A top camera (identity homography) over a grey background, every layer of its
    sprites an opaque disc of the true radius: the disc's bottom red, any upper layer
    blue."""
    cfg = dataclasses.replace(tiny_object_set_config(size).renderer, **changes)
    cam = CameraRenderer(cfg)
    with torch.no_grad():
        cam.background.fill_(0.5)
    for which, radius in (("disc", geo.DISC_RADIUS), ("agent", geo.AGENT_RADIUS)):
        for k, (_, sprite) in enumerate(cam.sprites(which)):
            n = sprite.alpha.shape[-1]
            c = ((torch.arange(n) + 0.5) / n * 2 - 1) * sprite.extent
            disc = c[:, None] ** 2 + c[None, :] ** 2 < radius**2
            set_sprite(sprite, torch.tensor(BLUE if k else RED), disc)
    return cam


STATE = torch.tensor([[40.0, 40.0, 213.3, 341.7, 300.0, 120.0]])  # agent, two discs


def test_supersampled_frame_is_the_box_filter_of_a_sharper_one() -> None:
    fine = _camera(3 * SIZE)
    coarse = _camera(SIZE, supersample=3)
    with torch.no_grad():
        want = F.avg_pool2d(fine(STATE), 3)
        got = coarse(STATE)
        flat = _camera(SIZE)(STATE)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    red = got[0, 0]  # the disc colour's channel: 0.5 off the discs, 0.9 on them
    partial = ((red > 0.52) & (red < 0.88)).sum()
    assert partial > ((flat[0, 0] > 0.52) & (flat[0, 0] < 0.88)).sum()  # edges get coverage


def test_layers_stack_a_puck_with_its_top_nearest_and_lean_with_the_lift() -> None:
    cam = _camera(layers=2)
    disc_px = (STATE[0, 2:4] * SIZE / geo.BOARD_SIZE).long()  # (col, row) of the first disc
    col, row = int(disc_px[0]), int(disc_px[1])
    with torch.no_grad():
        img = cam(STATE)[0]
        assert img[2, row, col] > 0.85 and img[0, row, col] < 0.15  # the top layer, blue
        assert (img[0] > 0.6).sum() == 0  # no lift: the top hides the bottom wholly
        shift = 4.0 / SIZE * 2  # 4 px up, in unit coordinates
        cam.lift_raw.copy_(torch.tensor([0.0, -shift, 0.0]) / cam.cfg.homography_step)
        img = cam(STATE)[0]
    assert img[2, row - 4, col] > 0.85  # the top, 4 px up
    assert img[0, row, col] > 0.85 and img[2, row, col] < 0.15  # the bottom, where it was


def test_a_flat_renderer_keeps_the_version_1_parameters() -> None:
    names = set(CameraRenderer(SetRendererConfig()).state_dict())
    assert names == {"background", "h_raw", "h_base", "disc.rgb", "disc.alpha",
                     "agent.rgb", "agent.alpha"}  # fmt: skip
    layered = set(CameraRenderer(SetRendererConfig(layers=3)).state_dict())
    assert layered - names == {"lift_raw", *(f"{w}_upper.{i}.{p}" for w in ("disc", "agent")
                               for i in range(2) for p in ("rgb", "alpha"))}  # fmt: skip


@pytest.mark.parametrize("field", ["supersample", "layers"])
def test_the_renderer_config_refuses_fewer_than_one(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SetRendererConfig(**{field: 0})


@pytest.mark.parametrize("field", ["lift_start", "fg_weight"])
@pytest.mark.parametrize("value", [-1.0, float("nan"), "8"])
def test_the_renderer_config_refuses_a_bad_lift_or_weight(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        SetRendererConfig(**{field: value})  # type: ignore[arg-type]


def _side_homography(res: int = 96) -> tuple[np.ndarray, pr.Camera]:
    """The pile side camera's pixel -> board homography (unit coordinates), fitted to 36
    board points it projects, and the camera."""
    cam = pr.side_camera(res)
    xs = np.linspace(40.0, 470.0, 6)
    board = np.array([[x, y, 0.0] for x in xs for y in xs])
    px, _ = cam.project(board)
    return fit_homography(px / res * 2 - 1, board[:, :2] / (geo.BOARD_SIZE / 2) - 1), cam


POINTS = ([128.0, 128.0], [256.0, 256.0], [384.0, 400.0])


def test_vertical_lift_moves_a_point_as_the_side_camera_does() -> None:
    """The pile's side camera, whose principal point is not the image centre: a point
    8 board px up moves 0.77 to 0.83 px up the image; the lift found from the homography
    alone moves it within 0.05 px of that. A homography without perspective has none."""
    g, cam = _side_homography()
    lift = vertical_lift(g) * pr.DISC_HEIGHT / (geo.BOARD_SIZE / 2)
    to_pixel = np.linalg.inv(g)
    for xy in POINTS:
        px, _ = cam.project(np.array([[*xy, 0.0], [*xy, pr.DISC_HEIGHT]]))
        u = np.array([xy[0], xy[1], geo.BOARD_SIZE / 2]) / (geo.BOARD_SIZE / 2) - [1, 1, 0]
        a, b = to_pixel @ u, (to_pixel + np.outer(lift, [0, 0, 1])) @ u
        moved = (b[:2] / b[2] - a[:2] / a[2]) / 2 * 96
        assert px[1, 1] - px[0, 1] < -0.7  # up the image
        np.testing.assert_allclose(moved, px[1] - px[0], atol=0.05)
    assert np.all(vertical_lift(np.eye(3)) == 0)
    assert np.all(vertical_lift(np.diag([2.0, 2.0, 1.0]) + np.eye(3, k=2) * 0.3) == 0)


def test_a_fresh_lift_starts_the_top_layer_up_the_image() -> None:
    """``start_lift`` with ``lift_start`` 8 on the side camera's homography: the top
    layer's plane shows a board point where the camera shows it 8 px up; ``lift_start`` 0
    keeps one plane, and a flat sprite has no lift."""
    g, cam = _side_homography(SIZE)
    ren = _camera(layers=2, lift_start=pr.DISC_HEIGHT)
    ren.set_homography(g)
    ren.start_lift()
    _, to_pixel = ren.plane(1.0)
    for xy in POINTS:
        want, _ = cam.project(np.array([[*xy, pr.DISC_HEIGHT]]))
        got = to_pixel.detach().double().numpy() @ np.array([*(np.array(xy) / 256 - 1), 1.0])
        np.testing.assert_allclose((got[:2] / got[2] + 1) / 2 * SIZE, want[0], atol=0.05)
    level = _camera(layers=2)
    level.set_homography(g)
    level.start_lift()
    assert torch.all(level.lift_raw == 0)
    _camera().start_lift()  # a flat sprite: nothing to start


def test_foreground_weights_mark_what_differs_from_the_background_and_its_rim() -> None:
    background = torch.full((3, 8, 8), 0.5)
    target = background.expand(2, -1, -1, -1).clone()
    target[0, 1, 4, 4] = 0.7  # one pixel of one frame differs in one channel
    w = foreground_weights(target, background, 9.0)
    assert w.shape == (2, 8, 8)
    assert torch.all(w[0, 3:6, 3:6] == 10.0) and w[0].sum() == 9 * 10 + 55
    assert torch.all(w[1] == 1.0)
    assert torch.all(foreground_weights(target, background, 0.0) == 1.0)


def test_a_weighed_loss_counts_a_foreground_error_more_and_logs_the_plain_psnr() -> None:
    """An error under the foreground threshold, at a disc's pixel or on the bare board:
    plain MSE counts them alike, ``fg_weight`` 9 the disc's several times more."""
    cfg = dataclasses.replace(tiny_object_set_config(SIZE).renderer, binary_weight=0.0)
    plain = _camera()
    renderers = {w: SetRenderer(dataclasses.replace(cfg, cameras=("top",), fg_weight=w))
                 for w in (0.0, 9.0)}  # fmt: skip
    for r in renderers.values():
        r.camera("top").load_state_dict(plain.state_dict())
    with torch.no_grad():
        frame = plain(STATE)
    on_disc, off = frame.clone(), frame.clone()
    disc_px = (STATE[0, 2:4] * SIZE / geo.BOARD_SIZE).long()
    on_disc[0, :, int(disc_px[1]), int(disc_px[0])] -= 0.05  # an error where a disc is
    off[0, :, 28, 5] += 0.05  # the same error on the bare board (still background)
    with torch.no_grad():
        losses = {w: [float(r.loss(STATE, {"top": t})[0]) for t in (on_disc, off)]
                  for w, r in renderers.items()}  # fmt: skip
        logs = [r.loss(STATE, {"top": on_disc})[1]["psnr_top"] for r in renderers.values()]
    assert losses[0.0][0] == pytest.approx(losses[0.0][1])  # plain MSE: the same error
    assert losses[9.0][0] > 3 * losses[9.0][1]  # weighed: the disc's counts more
    torch.testing.assert_close(logs[0], logs[1])  # the PSNR is the plain MSE's


def test_inference_draws_what_training_draws_from_a_smaller_patch() -> None:
    """Without gradients the patch holds only the texels that can show and faint entries
    are dropped; the frames are those of the gradient path (which samples every texel of
    the sprite's extent), from patches at most as large."""
    cam = _camera(3 * SIZE, layers=2)
    with torch.no_grad():
        cam.lift_raw.copy_(torch.tensor([0.0, -0.05, 0.0]) / cam.cfg.homography_step)
    trained = cam(STATE)
    with torch.no_grad():
        fast = cam(STATE)
        _, to_pixel = cam.plane(0.0)
        full = cam._patch_size(cam.disc.extent, to_pixel)
        small = cam._patch_size(_reach(cam.disc), to_pixel)
    torch.testing.assert_close(fast, trained.detach(), atol=1e-3, rtol=0)
    assert small < full  # the disc fills under half its sprite's extent


def test_the_rise_is_the_top_layers_height_in_the_image() -> None:
    """The side camera's top layer started 8 board px up shows the board's centre 0.80 px
    higher (the camera's own: 0.803 px); the loss logs it per camera."""
    g, _ = _side_homography(SIZE)
    cam = _camera(layers=2, lift_start=pr.DISC_HEIGHT)
    cam.set_homography(g)
    cam.start_lift()
    assert float(cam.rise()) * 96 / SIZE == pytest.approx(0.803, abs=0.02)
    ren = SetRenderer(dataclasses.replace(cam.cfg, cameras=("side",)))
    ren.camera("side").load_state_dict(cam.state_dict())
    with torch.no_grad():
        _, logs = ren.loss(STATE, {"side": ren(STATE)})
    assert float(logs["rise_side"]) == pytest.approx(float(cam.rise()))


def test_learned_heights_move_each_kinds_layers_apart() -> None:
    """``learn_heights``: the disc's and the agent's layers start at 0 .. 1 (the frames of
    the renderer without it) and each kind's move alone: raising the disc's top layer
    moves the disc's top in the image and leaves the agent's."""
    plain, learned = _camera(layers=2), _camera(layers=2, learn_heights=True)
    learned.load_state_dict(plain.state_dict(), strict=False)
    shift = torch.tensor([0.0, -4.0 / SIZE * 2, 0.0]) / plain.cfg.homography_step
    with torch.no_grad():
        for cam in (plain, learned):
            cam.lift_raw.copy_(shift)  # a unit of height: 4 px up
        torch.testing.assert_close(learned(STATE), plain(STATE))
        learned.heights_raw[0, 1] = -0.5 / HEIGHT_STEP  # the disc's top: half as high
        img = learned(STATE)[0]
    assert float(learned.rise()) == pytest.approx(2.0, abs=1e-3)
    disc_px = (STATE[0, 2:4] * SIZE / geo.BOARD_SIZE).long()
    col, row = int(disc_px[0]), int(disc_px[1])
    assert img[2, row - 2, col] > 0.85 and img[2, row - 4, col] < 0.6  # the top, 2 px up
    torch.testing.assert_close(img[:, :8, :8], plain(STATE)[0, :, :8, :8])  # the agent
    assert "heights_raw" not in plain.state_dict()


def test_layers_ordered_by_rise_draw_a_lower_layer_under() -> None:
    """``order_by_rise``: a lift that shows the upper layer 2 px *down* the image (discs
    2.5 px in radius) puts it under the bottom layer: the disc's centre stays the bottom's
    red and the blue peeks out below; by index it is drawn over (blue). Lifted up, both
    orders agree."""
    size = 128
    down = torch.tensor([0.0, 2.0 / size * 2, 0.0]) / 0.01  # homography_step 0.01
    col, row = (int(v) for v in STATE[0, 2:4] * size / geo.BOARD_SIZE)
    imgs, ups = {}, {}
    for flag in (False, True):
        cam = _camera(size, layers=2, order_by_rise=flag)
        assert cam.cfg.homography_step == 0.01
        with torch.no_grad():
            cam.lift_raw.copy_(down)
            imgs[flag] = cam(STATE)[0]
            assert cam.layer_nearness("disc") == ([0, 1] if flag else [1, 0])
            cam.lift_raw.copy_(-down)
            assert cam.layer_nearness("disc") == [1, 0]
            ups[flag] = cam(STATE)
    torch.testing.assert_close(ups[True], ups[False])
    assert imgs[False][2, row, col] > 0.85  # blue over red
    assert imgs[True][0, row, col] > 0.85 and imgs[True][2, row + 3, col] > 0.85


def test_layer_heights_find_the_world_planes() -> None:
    """A side camera started on the world's floor homography with its top layer 8 board
    px up: :func:`layer_heights` finds its layers at the floor and 8 px up (within 0.5 px,
    the lift being a pinhole's fit), each within 0.1 px of the world's plane; a flipped
    lift puts the top layer 8 px under the floor."""
    from factory.eval.pile_layers import layer_heights

    g, _ = _side_homography(96)
    cam = _camera(96, layers=2, lift_start=pr.DISC_HEIGHT)
    cam.set_homography(g)
    cam.start_lift()
    bottom, top = layer_heights(cam)
    assert abs(bottom["z"]) <= 0.2 and bottom["fit_px"] < 0.1
    assert top["z"] == pytest.approx(pr.DISC_HEIGHT, abs=0.5) and top["fit_px"] < 0.1
    with torch.no_grad():
        cam.lift_raw.neg_()
    assert layer_heights(cam)[1]["z"] == pytest.approx(-pr.DISC_HEIGHT, abs=0.5)
