"""Model parts and the WorldModel rollout (tiny sizes, random weights)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from factories import tiny_config, tiny_world_model

from factory.errors import ModelError
from factory.model import (
    Autoencoder,
    AutoencoderConfig,
    Dynamics,
    DynamicsConfig,
    ProbeConfig,
    StateProbe,
    WorldModel,
)
from factory.model.dynamics import DynamicsCond


def random_frames(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*shape, 32, 32, 3), dtype=np.uint8)


def test_autoencoder_shapes_and_stats() -> None:
    cfg = AutoencoderConfig(image_size=(32, 32), channels=(8, 16), blocks=(1, 1))
    assert cfg.factor == 4 and cfg.latent_size == (8, 8)
    ae = Autoencoder(cfg)
    frames = random_frames(6)
    z = ae.encode(frames)
    assert z.shape == (6, 4, 8, 8) and z.dtype == torch.float32
    out = ae.decode(z)
    assert out.shape == (6, 32, 32, 3) and out.dtype == torch.uint8
    with torch.no_grad():
        ae.set_latent_stats(ae.encoder(ae.decode_float(z)) * 3.0 + 1.0)
        raw = ae.encoder(torch.rand(64, 3, 32, 32) * 2 - 1)
        ae.set_latent_stats(raw)
        zn = ae.normalise(raw)
    assert torch.allclose(zn.mean(dim=(0, 2, 3)), torch.zeros(4), atol=1e-4)
    assert torch.allclose(zn.std(dim=(0, 2, 3)), torch.ones(4), atol=1e-3)


def test_fresh_decoder_outputs_background() -> None:
    ae = Autoencoder(AutoencoderConfig(image_size=(32, 32), channels=(8, 16), blocks=(1, 1)))
    out = ae.decode(torch.randn(2, 4, 8, 8))
    assert int(out.min()) == 255


def test_bad_autoencoder_config() -> None:
    with pytest.raises(ValueError):
        AutoencoderConfig(image_size=(30, 32), channels=(8, 16), blocks=(1, 1))
    with pytest.raises(ValueError):
        AutoencoderConfig(channels=(8, 16), blocks=(1,))


def test_dynamics_shapes_and_delta_target() -> None:
    cfg = tiny_config()
    z_last, z_next = torch.randn(2, 4, 8, 8), torch.randn(2, 4, 8, 8)
    delta_cfg = dataclasses.replace(cfg.dynamics, predict_delta=True)
    delta = Dynamics(delta_cfg, cfg.consistency)
    delta.target_scale.fill_(0.5)
    x0 = delta.target_from(z_next, z_last)
    torch.testing.assert_close(x0, (z_next - z_last) / 0.5)
    torch.testing.assert_close(delta.next_from(x0, z_last), z_next)
    dyn = Dynamics(cfg.dynamics, cfg.consistency)  # default: the target is z_{t+1} itself
    dyn.target_scale.fill_(0.5)
    x0 = dyn.target_from(z_next, z_last)
    torch.testing.assert_close(x0, z_next / 0.5)
    torch.testing.assert_close(dyn.next_from(x0, z_last), z_next)
    cond = dyn.make_cond(torch.randn(2, 3, 4, 8, 8), torch.rand(2), torch.randn(2, 3, 2))
    assert cond.action_maps is not None and cond.action_maps.shape == (2, 3, 8, 8)
    assert dyn.net(torch.randn(2, 4, 8, 8), torch.randn(2), cond).shape == (2, 4, 8, 8)
    raw = torch.tensor([[[0.0, 512.0], [200.0, 300.0], [400.0, 80.0]]])  # board px
    maps = dyn.action_maps(dyn.normalise_actions(raw))
    assert maps is not None
    peaks = [divmod(int(m.argmax()), 8) for m in maps[0]]  # (row, col)
    assert peaks == [(7, 0), (4, 3), (1, 6)]
    plain = Dynamics(
        DynamicsConfig(
            latent_size=(8, 8), context=3, channels=(16, 24), emb_dim=32, action_xy_range=None
        ),
        cfg.consistency,
    )
    no_maps = DynamicsCond(torch.randn(2, 3, 4, 8, 8), torch.rand(2), torch.randn(2, 3, 2))
    assert plain.net(torch.randn(2, 4, 8, 8), torch.randn(2), no_maps).shape == (2, 4, 8, 8)
    g = torch.Generator().manual_seed(0)
    nxt = dyn.sample_next(torch.randn(2, 3, 4, 8, 8), torch.randn(2, 3, 2), g)
    assert nxt.shape == (2, 4, 8, 8)
    assert dyn.read_state(nxt).shape == (2, 2)


def test_probe_predict() -> None:
    probe = StateProbe(ProbeConfig(image_size=(32, 32), channels=(8, 16), keypoints=4, hidden=32))
    agent, block = probe.predict(random_frames(5))
    assert agent.shape == (5, 2) and block.shape == (5, 3)
    assert torch.all(block[:, 2] > -torch.pi) and torch.all(block[:, 2] <= torch.pi)
    t = probe.targets(torch.tensor([[256.0, 128.0]]), torch.tensor([[512.0, 0.0, 0.5]]))
    torch.testing.assert_close(
        t, torch.tensor([[0.5, 0.25, 1.0, 0.0, np.sin(0.5), np.cos(0.5)]], dtype=torch.float32)
    )


def _rollout(wm: WorldModel, seed: int, steps: int = 4) -> list[np.ndarray]:
    wm.start(random_frames(2, 3), np.zeros((2, 2, 2), np.float32), seed=seed)
    acts = np.linspace(0, 512, 2 * steps * 2, dtype=np.float32).reshape(steps, 2, 2)
    return [wm.step(a).frames for a in acts]


def test_rollout_shapes_and_determinism() -> None:
    wm = tiny_world_model()
    wm.start(random_frames(2, 3), np.zeros((2, 2, 2), np.float32), seed=0)
    out = wm.step(np.ones((2, 2), np.float32))
    assert out.frames.shape == (2, 32, 32, 3) and out.frames.dtype == np.uint8
    assert out.state.shape == (2, 2) and out.state.dtype == np.float32
    assert out.task_state is not None and out.task_state.shape == (2, 3)
    assert out.latents.shape == (2, 4, 8, 8)
    a, b, c = _rollout(wm, 7), _rollout(wm, 7), _rollout(wm, 8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert any(not np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_rollout_padding_and_long_context() -> None:
    wm = tiny_world_model(context=4)
    wm.start(random_frames(2, 1), None, seed=0)  # one frame: padded to K
    assert wm._window is not None and wm._window.shape[1] == 4
    assert torch.equal(wm._window[:, 0], wm._window[:, 3])
    wm.step(np.full((2, 2), 100.0, np.float32))
    assert wm._actions is not None
    first = wm.dynamics.normalise_actions(torch.full((2,), 100.0))  # type: ignore[union-attr]
    assert torch.allclose(wm._actions[:, 0], first)
    wm.start(random_frames(2, 6), np.zeros((2, 5, 2), np.float32), seed=0)  # K' > K
    assert wm._window.shape[1] == 4 and wm._actions.shape[1] == 3
    with pytest.raises(ValueError):
        wm.start(random_frames(2, 3), np.zeros((2, 3, 2), np.float32))
    with pytest.raises(ValueError):
        wm.step(np.zeros((3, 2), np.float32))


def test_check_compatible() -> None:
    wm = tiny_world_model()
    wm.check_compatible(action_dim=2, image_shape=(32, 32, 3))
    with pytest.raises(ModelError, match="action_dim"):
        wm.check_compatible(action_dim=7)
    with pytest.raises(ModelError, match="shape"):
        wm.check_compatible(image_shape=(96, 96, 3))
    with pytest.raises(ModelError):
        wm.start(np.zeros((1, 1, 96, 96, 3), np.uint8))


def test_rollout_needs_parts() -> None:
    wm = WorldModel(tiny_config())
    with pytest.raises(ModelError):
        wm.start(random_frames(1, 1))
    with pytest.raises(ModelError):
        wm.read_frames(random_frames(1))
