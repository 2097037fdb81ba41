"""The object-set renderer's supersampling and layered sprites (``renderer.supersample``,
``renderer.layers``): a supersampled frame is the box filter of a sharper one, a puck's
layers stack with its top nearest and lean as the learned lift says, and a flat renderer
keeps the version-1 parameters."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F
from factories import set_sprite, tiny_object_set_config

from factory.envs import pile_geometry as geo
from factory.model.object_set.config import SetRendererConfig
from factory.model.object_set.renderer import CameraRenderer, _reach

SIZE = 32
RED, BLUE = [0.9, 0.1, 0.1], [0.1, 0.1, 0.9]


def _camera(size: int = SIZE, **changes: int) -> CameraRenderer:
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
