"""The training loop skips a step whose loss or gradient is not finite (the weights stay
as they were) and stops with one clear error when every step diverges."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from factory.errors import FactoryError
from factory.train.loop import MAX_NON_FINITE, Budget, LoopState, TrainConfig, run_training


def _train(tmp_path: Path, bad: set[int], steps: int) -> tuple[nn.Parameter, dict[str, float]]:
    w = nn.Parameter(torch.ones(3))

    def step_fn(state: LoopState) -> dict[str, torch.Tensor]:
        loss = (w**2).sum()
        if state.step in bad:  # a diverged batch: an infinite loss, or a finite one
            loss = loss * (torch.inf if state.step % 2 else torch.nan)
        return {"loss": loss}

    out = run_training(part="p", model_dir=tmp_path, params=[w], step_fn=step_fn,
                       save_fn=lambda _s: None, cfg=TrainConfig(lr=0.1, threads=0),
                       budget=Budget(steps=steps))  # fmt: skip
    return w, out


def test_a_non_finite_step_is_skipped(tmp_path: Path) -> None:
    w, out = _train(tmp_path, bad={3, 4}, steps=20)
    assert torch.isfinite(w).all() and float(w.detach().abs().max()) < 1.0  # it still trained
    assert out["skipped_steps"] == 2 and out["step"] == 20
    assert torch.isfinite(torch.tensor(out["loss"]))  # the skipped losses are not smoothed in


def test_a_diverged_run_stops_with_one_line(tmp_path: Path) -> None:
    with pytest.raises(FactoryError, match="diverged"):
        _train(tmp_path, bad=set(range(1, 10_000)), steps=10_000)
    assert MAX_NON_FINITE < 10_000
