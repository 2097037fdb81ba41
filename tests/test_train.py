"""Training stages on tiny synthetic "push the square" data: losses fall, resume works."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from factory.eval.metrics import reader_errors
from factory.model import (
    AutoencoderConfig,
    ConsistencyConfig,
    DynamicsConfig,
    ProbeConfig,
    WorldModelConfig,
    load_model_dir,
)
from factory.train import (
    Budget,
    DecoderTrainOptions,
    DynamicsTrainOptions,
    EpisodeData,
    TrainConfig,
    WindowSampler,
    finetune_decoder,
    train_autoencoder,
    train_dynamics,
    train_probe,
)

SIZE = 32


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """Tiny models: one thread avoids OpenMP spin-wait stalls on a shared CPU; seeded."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    yield
    torch.set_num_threads(n)


def _draw(agent: np.ndarray, block: np.ndarray) -> np.ndarray:
    img = np.full((SIZE, SIZE, 3), 255, np.uint8)
    img[20:26, 20:26] = (144, 238, 144)  # static goal
    bx, by = (block[:2] / 512 * SIZE).astype(int)
    img[max(by - 3, 0) : by + 3, max(bx - 3, 0) : bx + 3] = (119, 136, 153)
    ax, ay = (agent / 512 * SIZE).astype(int)
    img[max(ay - 2, 0) : ay + 2, max(ax - 2, 0) : ax + 2] = (65, 105, 225)
    return img


def synthetic_data(n_eps: int = 8, length: int = 24, seed: int = 0) -> EpisodeData:
    """An agent square chases random targets and shoves a grey block."""
    rng = np.random.default_rng(seed)
    frames, actions, states, task = [], [], [], []
    for _ in range(n_eps):
        agent = rng.uniform(100, 412, 2)
        block = np.array([*rng.uniform(150, 362, 2), rng.uniform(-np.pi, np.pi)])
        target = rng.uniform(50, 462, 2)
        for _ in range(length):
            if rng.random() < 0.15:
                target = block[:2] + rng.normal(0, 40, 2)
            frames.append(_draw(agent, block))
            actions.append(target.copy())
            states.append(agent.copy())
            task.append(block.copy())
            agent = np.clip(agent + 0.4 * (target - agent), 0, 511)
            gap = block[:2] - agent
            if np.abs(gap).max() < 60:
                block[:2] = np.clip(block[:2] + 0.5 * np.sign(gap) * (60 - np.abs(gap)), 0, 511)
                block[2] = (block[2] + 0.05 + np.pi) % (2 * np.pi) - np.pi
    return EpisodeData(
        frames=np.stack(frames),
        actions=np.stack(actions).astype(np.float32),
        state=np.stack(states).astype(np.float32),
        task_state=np.stack(task).astype(np.float32),
        episode_ends=np.arange(1, n_eps + 1, dtype=np.int64) * length,
        source="synthetic",
    )


def tiny_config() -> WorldModelConfig:
    return WorldModelConfig(
        autoencoder=AutoencoderConfig(image_size=(SIZE, SIZE), channels=(16, 16), blocks=(1, 1)),
        dynamics=DynamicsConfig(
            latent_size=(8, 8), context=3, channels=(16, 24), emb_dim=32, state_head_channels=8
        ),
        probe=ProbeConfig(image_size=(SIZE, SIZE), channels=(8, 16), keypoints=4, hidden=32),
        consistency=ConsistencyConfig(s0=10, s1=10),
    )


class Recorder:
    def __init__(self) -> None:
        self.losses: list[float] = []
        self.steps: list[int] = []

    def __call__(self, step: int, total: int | None, metrics: dict[str, float]) -> None:
        self.steps.append(step)
        self.losses.append(metrics["loss"])

    def fell(self, ratio: float = 0.85) -> bool:
        """The mean of the last 5 smoothed losses is below ``ratio`` x the first 5's."""
        return float(np.mean(self.losses[-5:])) < ratio * float(np.mean(self.losses[:5]))


def tc(**kw: float) -> TrainConfig:
    base: dict = dict(
        batch_size=8,
        lr=3e-3,
        warmup_steps=5,
        log_every=1,
        threads=0,
        checkpoint_every_s=1e9,
        val_fraction=0.2,
    )
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def data() -> EpisodeData:
    return synthetic_data()


@pytest.fixture(scope="module")
def ae_dir(tmp_path_factory: pytest.TempPathFactory, data: EpisodeData) -> Path:
    d = tmp_path_factory.mktemp("model")
    rec = Recorder()
    metrics = train_autoencoder(
        data, d, tiny_config(), Budget(steps=60), on_progress=rec, train_cfg=tc()
    )
    assert rec.fell(), rec.losses
    assert rec.steps[-1] == 60 and metrics["step"] == 60
    assert {"val_psnr", "val_t_iou", "samples_per_s"} <= set(metrics)
    return d


def test_window_sampler_stays_inside_episodes(data: EpisodeData) -> None:
    train_eps, val_eps = data.split(0.25, seed=1)
    assert not set(train_eps) & set(val_eps) and len(train_eps) + len(val_eps) == 8
    sampler = WindowSampler(data, 6, train_eps, pad_prob=0.3, pad_max=3)
    idx = sampler.sample(500, np.random.default_rng(0))
    episode = np.searchsorted(data.episode_ends, idx, side="right")
    assert np.all(episode == episode[:, :1])
    assert set(np.unique(episode)) <= set(train_eps)
    steps = np.diff(idx, axis=1)
    assert np.all((steps == 0) | (steps == 1))
    padded = np.any(steps == 0, axis=1)
    assert 0 < padded.mean() < 0.6
    assert np.all(np.isin(idx[padded, 0], data.episode_starts))


def test_episode_data_validation(data: EpisodeData) -> None:
    with pytest.raises(ValueError):
        EpisodeData(
            frames=data.frames,
            actions=data.actions,
            state=data.state,
            episode_ends=np.array([10, 5]),
        )
    with pytest.raises(ValueError):
        WindowSampler(data, 100)


def test_autoencoder_trains_and_resumes(ae_dir: Path, data: EpisodeData) -> None:
    state = json.loads((ae_dir / "autoencoder.state.json").read_text())
    assert state["step"] == 60
    rec = Recorder()
    metrics = train_autoencoder(
        data, ae_dir, tiny_config(), Budget(steps=70), resume=True, on_progress=rec, train_cfg=tc()
    )
    assert rec.steps[0] == 61 and metrics["step"] == 70
    prov = json.loads((ae_dir / "provenance.json").read_text())
    assert prov["parts"]["autoencoder"]["steps"] == 70 and prov["data"] == "synthetic"


def test_dynamics_and_decoder_train(ae_dir: Path, data: EpisodeData) -> None:
    rec = Recorder()
    opts = DynamicsTrainOptions(unroll_steps=2, unroll_start=0.0, unroll_prob=0.5)
    metrics = train_dynamics(
        data,
        ae_dir,
        tiny_config(),
        Budget(steps=60),
        on_progress=rec,
        train_cfg=tc(lr=2e-3),
        opts=opts,
    )
    assert rec.fell(), rec.losses
    assert (ae_dir / "latents.cache.safetensors").is_file()
    assert np.isfinite(metrics["val_mse"]) and metrics["val_copy_mse"] > 0
    out = finetune_decoder(
        data, ae_dir, Budget(steps=5), train_cfg=tc(lr=1e-3), opts=DecoderTrainOptions(horizon=2)
    )
    assert {"before_psnr", "after_psnr", "before_t_iou", "after_t_iou"} <= set(out)
    wm = load_model_dir(ae_dir)
    assert wm.autoencoder is not None and wm.dynamics is not None
    wm.start(data.frames[None, :2], data.actions[None, :1], seed=0)
    step = wm.step(data.actions[None, 1])
    assert step.frames.shape == (1, SIZE, SIZE, 3) and np.isfinite(step.state).all()


def scattered_data(n_eps: int = 20, length: int = 20, seed: int = 0) -> EpisodeData:
    """Agent and block at fresh random places in every frame, the block always at angle 0
    (the drawn square shows no angle): frames a reader can be checked on."""
    rng = np.random.default_rng(seed)
    n = n_eps * length
    agent = rng.uniform(50, 462, (n, 2)).astype(np.float32)
    block = np.concatenate([rng.uniform(80, 432, (n, 2)), np.zeros((n, 1))], 1)
    return EpisodeData(
        frames=np.stack([_draw(a, b) for a, b in zip(agent, block, strict=True)]),
        actions=agent.copy(),
        state=agent,
        task_state=block.astype(np.float32),
        episode_ends=np.arange(1, n_eps + 1, dtype=np.int64) * length,
        source="scattered",
    )


def test_probe_trains(tmp_path: Path) -> None:
    """The trained probe reads held-out frames better than the training-set mean pose does,
    and the (constant) angle to within a few degrees."""
    data = scattered_data()
    rec = Recorder()
    cfg = tc(batch_size=32, lr=3e-2)
    torch.manual_seed(0)  # the probe's initial weights
    metrics = train_probe(
        data, tmp_path, tiny_config(), Budget(steps=200), on_progress=rec, train_cfg=cfg
    )
    assert rec.fell(), rec.losses
    train_eps, val_eps = data.split(cfg.val_fraction, cfg.seed)
    train_idx, val_idx = data.frame_indices(train_eps), data.frame_indices(val_eps)
    assert data.task_state is not None
    mean_pose = np.broadcast_to(data.task_state[train_idx].mean(0), (len(val_idx), 3))
    mean_agent = np.broadcast_to(data.state[train_idx].mean(0), (len(val_idx), 2))
    base = reader_errors(mean_agent, data.state[val_idx], mean_pose, data.task_state[val_idx])
    assert metrics["val_block_err_px"] < 0.75 * base["block_err_px"].mean(), metrics
    assert metrics["val_agent_err_px"] < base["agent_err_px"].mean(), metrics
    assert metrics["val_angle_err_deg"] < 5.0, metrics
    wm = load_model_dir(tmp_path)
    agent, block = wm.read_frames(data.frames[:3])
    assert agent.shape == (3, 2) and block.shape == (3, 3)


def test_scratch_copy_leaves_training_state_behind(tmp_path: Path) -> None:
    """The batch search's scratch directory holds the model files and the latent cache,
    not the optimiser, resume or plan state (:func:`factory.model.files.is_training_state`)."""
    from factory.train.batch_search import SCRATCH, scratch_copy

    kept = ["config.json", "dynamics.safetensors", "provenance.json", "latents.cache.safetensors"]
    left = ["dynamics.optim.safetensors", "dynamics.state.json", "config.json.partial"]
    for name in [*kept, *left, "train_all.json"]:
        (tmp_path / name).write_text(name)
    scratch = scratch_copy(tmp_path)
    assert scratch == tmp_path / SCRATCH
    assert sorted(f.name for f in scratch.iterdir()) == sorted(kept)
    assert (scratch / "latents.cache.safetensors").stat().st_ino == (
        tmp_path / "latents.cache.safetensors"
    ).stat().st_ino  # hard-linked, not copied
