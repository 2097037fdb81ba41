"""Accelerator helpers: frames gathered from a device copy, the batch-size search's
choice, and (on CUDA only) a short ``train all`` that measures its batch sizes."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import tiny_config
from test_train import synthetic_data

from factory.model import load_model_dir
from factory.train.accel import AccelConfig, MirroredFrames, gather_frames, hold_frames
from factory.train.all_stages import STAGE_TRAIN, AllStagesConfig, run_all_stages
from factory.train.batch_search import BatchSearch, choose, search_batch
from factory.train.loop import Budget, TrainConfig


def test_gather_from_a_device_copy_matches_ram() -> None:
    frames = np.random.default_rng(0).integers(0, 255, (10, 4, 4, 3), dtype=np.uint8)
    mirrored = frames.view(MirroredFrames)
    mirrored.device_copy = torch.from_numpy(frames.copy()) + 0  # stands in for the GPU copy
    idx = np.array([3, 1, 3])
    assert torch.equal(gather_frames(mirrored, idx, "cpu"), torch.from_numpy(frames[idx]))
    assert mirrored[2:5].device_copy is None and mirrored[idx].device_copy is None
    assert hold_frames(frames, "cpu", AccelConfig()) is frames  # nothing to hold on a CPU


def test_choose_prefers_the_knee_and_enough_steps() -> None:
    rates = {32: 1000.0, 64: 1900.0, 128: 2000.0, 256: 2050.0}
    cfg = BatchSearch(knee=0.9, min_steps=100)
    assert choose(rates, cfg, None) == 64
    assert choose(rates, cfg, budget_s=3.3) == 32  # 64 would leave 3.3 * 1900 / 64 < 100 steps
    assert choose(rates, cfg, budget_s=0.1) == 32  # none leaves 100 steps: the smallest


def test_search_stops_when_doubling_stops_paying(tmp_path: Path) -> None:
    """A fake stage whose step time is flat up to batch 64, then linear."""

    def stage(_d: Path, tc: TrainConfig, budget: Budget, progress: object) -> None:
        assert budget.steps is not None and callable(progress)
        for step in range(1, budget.steps + 1):
            time.sleep(0.01 * max(1.0, tc.batch_size / 64))
            progress(step, budget.steps, {})

    (tmp_path / "config.json").write_text("{}")
    cfg = BatchSearch(probe_steps=6, skip_steps=2, max_batch=1024)
    choice = search_batch(stage, tmp_path, "probe", TrainConfig(batch_size=16), cfg, None)
    assert sorted(choice.rates) == [16, 32, 64, 128]
    assert choice.batch_size == 64 and not (tmp_path / ".batch_search").exists()


@pytest.mark.gpu
def test_train_all_on_cuda_measures_batches(tmp_path: Path) -> None:
    cfg = AllStagesConfig(batch=BatchSearch(max_batch=256, min_steps=1))
    summary = run_all_stages(
        synthetic_data(), tmp_path, tiny_config(size=32), Budget(minutes=0.5), "cuda", cfg
    )
    for stage in ("autoencoder", "dynamics", "decoder", "probe"):
        rec = summary["stages"][stage]
        assert rec["batch_rates"] and rec["batch_size"] >= STAGE_TRAIN[stage].batch_size
        assert rec["steps"] > 0 and rec["samples_per_s"] > 0
    assert load_model_dir(tmp_path).dynamics is not None
