"""Metric functions: known values on hand-made inputs and real PushT frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from factory.eval import metrics as m


def test_psnr_known_value() -> None:
    a = np.zeros((4, 4, 3), np.uint8)
    b = np.full((4, 4, 3), 255, np.uint8)
    assert m.psnr(a, b) == pytest.approx(0.0)
    c = a.copy()
    c[0, 0, 0] = 255  # mse = 255^2 / 48
    assert m.psnr(a, c) == pytest.approx(10 * np.log10(48))


def test_ssim_identity_and_degradation() -> None:
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    assert m.ssim(img, img) == pytest.approx(1.0)
    noisy = np.clip(img + rng.normal(0, 40, img.shape), 0, 255).astype(np.uint8)
    assert m.ssim(noisy, img) < 0.9


def test_masks_on_pusht_colours() -> None:
    frame = np.full((8, 8, 3), 255, np.uint8)
    frame[0, :2] = (143, 163, 184)  # T fill
    frame[0, 2] = (119, 136, 153)  # T outline
    frame[1, :3] = (65, 105, 225)  # agent
    frame[2, :4] = (144, 238, 144)  # goal
    assert m.t_mask(frame).sum() == 3 and m.t_mask(frame)[0, :3].all()
    assert m.agent_mask(frame).sum() == 3 and m.agent_mask(frame)[1, :3].all()
    assert m.goal_mask(frame).sum() == 4


def test_masks_on_rendered_frame() -> None:
    from factory.envs import make_world

    world = make_world("pusht", batch_size=1, resolution=96)
    frame = world.reset(seeds=np.array([3])).frames[0]
    world.close()
    assert 0.015 < m.mask_fraction(m.t_mask(frame)) < 0.05
    assert 10 < m.agent_mask(frame).sum() < 60
    assert m.goal_mask(frame).sum() > 50


def test_iou() -> None:
    a = np.array([1, 1, 0, 0], bool)
    b = np.array([1, 0, 1, 0], bool)
    assert m.iou(a, b) == pytest.approx(1 / 3)
    assert m.iou(np.zeros(3, bool), np.zeros(3, bool)) == 1.0


def test_angle_error_wraps() -> None:
    assert m.angle_error_deg(np.pi - 0.01, -np.pi + 0.01) == pytest.approx(np.degrees(0.02))
    assert m.angle_error_deg(0.0, np.pi) == pytest.approx(180.0)


def test_rank_metrics() -> None:
    real = np.array([0.1, 0.5, 0.9, 0.3])
    assert m.pearson(real, real) == pytest.approx(1.0)
    assert m.spearman(real, real**3) == pytest.approx(1.0)
    assert m.mmrv(real, real) == 0.0
    # Swap the order of the two best: rows 1 and 2 each violate by |0.9 - 0.5|.
    sim = np.array([0.1, 0.9, 0.5, 0.3])
    assert m.mmrv(sim, real) == pytest.approx((0.4 + 0.4) / 4)
    assert m.spearman(-real, real) == pytest.approx(-1.0)


def test_reader_metrics_measures_against_the_store(tmp_path: Path) -> None:
    """A reader that reads every frame as the board's origin errs by the true distances."""
    from factory.envs import make_world
    from factory.eval.fidelity import reader_metrics
    from factory.generators import make_generator
    from factory.record import open_output
    from factory.record.runner import run_episode
    from factory.store import EpisodeStore

    world = make_world("pusht", batch_size=1, resolution=32)
    store = open_output(tmp_path / "s.zarr", world.spec, 32, append=False)
    result = run_episode(world, make_generator("play"), seed=3, steps=12, source="real")
    store.append_episode(result.data, result.meta)
    assert isinstance(store, EpisodeStore)

    class Origin:
        def read_frames(self, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            n = len(frames)
            return np.zeros((n, 2), np.float32), np.zeros((n, 3), np.float32)

    out = reader_metrics(Origin(), store, stride=1)  # type: ignore[arg-type]
    ep = store.episode(0)
    assert out["frames"] == 12
    assert out["agent_err_px"] == pytest.approx(np.linalg.norm(ep["state"][:, :2], axis=1).mean())
    block = np.linalg.norm(ep["task_state"][:, :2], axis=1).mean()
    assert out["block_err_px"] == pytest.approx(block, rel=1e-5)


def test_reader_errors_known_answers_numpy_and_torch_agree() -> None:
    """A 3-4-5 offset is 5 px; 179 deg against -179 deg is 2 deg (wrapped), not 358."""
    import torch

    agent, true_agent = np.array([[3.0, 4.0], [0.0, 0.0]]), np.zeros((2, 2))
    block = np.array([[10.0, 10.0, np.radians(179.0)], [0.0, 6.0, 0.5]])
    truth = np.array([[10.0, 10.0, np.radians(-179.0)], [8.0, 0.0, 0.5 + np.pi]])
    out = m.reader_errors(agent, true_agent, block, truth)
    np.testing.assert_allclose(out["agent_err_px"], [5.0, 0.0])
    np.testing.assert_allclose(out["block_err_px"], [0.0, 10.0])
    np.testing.assert_allclose(out["angle_err_deg"], [2.0, 180.0], atol=1e-9)
    tensors = [torch.from_numpy(x) for x in (agent, true_agent, block, truth)]
    on_torch = m.reader_errors_torch(*tensors)
    assert set(on_torch) == set(out)
    for key, value in out.items():
        np.testing.assert_allclose(on_torch[key].numpy(), value, atol=1e-9)
    assert set(m.reader_errors(agent, true_agent)) == {"agent_err_px"}
