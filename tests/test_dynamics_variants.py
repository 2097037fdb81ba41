"""Issue 10's dynamics variants: each recipe trains and rolls out; their priors hold."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import assert_one_line_error
from test_train import Recorder, synthetic_data, tc, tiny_config

from factory.model import Dynamics, load_model_dir
from factory.model.heads import pose_to_target, target_to_pose
from factory.model.motion import warp
from factory.train import (
    Budget,
    DynamicsTrainOptions,
    EpisodeData,
    train_autoencoder,
    train_dynamics,
)
from factory.train.dynamics import DYNAMICS_TRAIN
from factory.train.recipes import RECIPES, apply_recipe, parse_override


@pytest.fixture(scope="module")
def data() -> EpisodeData:
    return synthetic_data()


@pytest.fixture(scope="module")
def ae_dir(tmp_path_factory: pytest.TempPathFactory, data: EpisodeData) -> Path:
    d = tmp_path_factory.mktemp("variants")
    train_autoencoder(data, d, tiny_config(), Budget(steps=40), train_cfg=tc())
    return d


def _dyn(**kw: object) -> Dynamics:
    cfg = tiny_config()
    return Dynamics(dataclasses.replace(cfg.dynamics, **kw), cfg.consistency).eval()


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_recipe_trains_and_rolls_out(
    recipe: str,
    ae_dir: Path,
    data: EpisodeData,
    tmp_path: Path,
) -> None:
    d = tmp_path / recipe
    shutil.copytree(ae_dir, d)
    cfg, opts, _ = apply_recipe(
        tiny_config(), DynamicsTrainOptions(), DYNAMICS_TRAIN, recipe, ("dynamics.task_dim=4",)
    )
    rec = Recorder()
    metrics = train_dynamics(
        data, d, cfg, Budget(steps=30), on_progress=rec, train_cfg=tc(lr=2e-3), opts=opts
    )
    assert rec.fell(0.95), rec.losses
    assert np.isfinite(metrics["val_mse"]) and np.isfinite(metrics["val_task_pos_err"])
    wm = load_model_dir(d)
    assert wm.dynamics is not None and wm.dynamics.cfg.objective == cfg.dynamics.objective
    wm.start(data.frames[None, :2].repeat(2, 0), data.actions[None, :1].repeat(2, 0), seed=0)
    steps = wm.step_many(data.actions[None, 1:7].repeat(2, 0))
    assert len(steps) == 6
    assert all(s.frames.shape == (2, 32, 32, 3) and s.task_state is not None for s in steps)
    one = wm.step(data.actions[:2])
    assert np.isfinite(one.state).all() and one.task_state is not None
    assert one.task_state.shape == (2, 3)


def test_motion_prior_is_identity_at_init() -> None:
    dyn = _dyn(objective="x0", motion="flow", chunk=2)
    window = torch.randn(3, 3, 4, 8, 8)
    actions = torch.randn(3, 4, 2)
    level = torch.zeros(3)
    pred = dyn.predict_x0(window, window, level, actions, None)
    assert pred.shape == (3, 2, 4, 8, 8)
    torch.testing.assert_close(pred[:, 0], window[:, -1], atol=1e-5, rtol=0)
    torch.testing.assert_close(pred[:, 1], window[:, -1], atol=1e-5, rtol=0)


def test_warp_moves_content_by_the_flow() -> None:
    z = torch.zeros(1, 1, 8, 8)
    z[0, 0, 3, 2] = 1.0
    flow = torch.zeros(1, 2, 8, 8)
    flow[:, 0] = 2.0  # two cells to the right
    moved = warp(z, flow)
    assert moved[0, 0, 3, 4] == pytest.approx(1.0) and moved[0, 0, 3, 2] == 0.0


def test_chunk_model_calls_the_network_once_per_chunk(
    ae_dir: Path,
    data: EpisodeData,
    tmp_path: Path,
) -> None:
    d = tmp_path / "chunk"
    shutil.copytree(ae_dir, d)
    cfg, opts, _ = apply_recipe(tiny_config(), DynamicsTrainOptions(), DYNAMICS_TRAIN, "chunk")
    train_dynamics(data, d, cfg, Budget(steps=2), train_cfg=tc(), opts=opts)
    wm = load_model_dir(d)
    assert wm.dynamics is not None
    calls = []
    wm.dynamics.net.register_forward_hook(lambda *_: calls.append(1))
    wm.start(data.frames[None, :1], None, seed=0)
    wm.step_many(data.actions[None, :8])
    assert len(calls) == 2  # 8 frames, 4 per call
    wm.step(data.actions[:1])
    assert len(calls) == 3


def test_pixel_norm_renorm_and_task_pose_round_trip() -> None:
    dyn = _dyn(objective="x0", renorm="pixel_norm")
    dyn.pixel_norm.fill_(2.0)
    z = dyn.settle(torch.randn(2, 4, 8, 8))
    torch.testing.assert_close(z.norm(dim=1), torch.full((2, 8, 8), 2.0))
    pose = torch.tensor([[100.0, 300.0, 0.5], [400.0, 20.0, 6.0]])
    mean, std = torch.tensor([256.0, 256.0]), torch.tensor([100.0, 100.0])
    torch.testing.assert_close(target_to_pose(pose_to_target(pose, mean, std), mean, std), pose)


def test_recipes_and_overrides_are_checked() -> None:
    cfg = tiny_config()
    with pytest.raises(ValueError, match="unknown recipe"):
        apply_recipe(cfg, DynamicsTrainOptions(), DYNAMICS_TRAIN, "nope")
    with pytest.raises(ValueError, match="unknown dynamics"):
        apply_recipe(cfg, DynamicsTrainOptions(), DYNAMICS_TRAIN, None, ("dynamics.nope=1",))
    with pytest.raises(ValueError, match="need objective"):
        apply_recipe(cfg, DynamicsTrainOptions(), DYNAMICS_TRAIN, "baseline", ("dynamics.chunk=2",))
    with pytest.raises(ValueError, match=r"SECTION\.FIELD"):
        parse_override("chunk=2")
    assert parse_override("train.lr=0.002") == ("train", "lr", 0.002)
    assert parse_override("dynamics.channels=[8,16]") == ("dynamics", "channels", (8, 16))
    _, opts, train = apply_recipe(
        cfg, DynamicsTrainOptions(), DYNAMICS_TRAIN, "unroll", ("train.batch_size=4",)
    )
    assert opts.grad_unroll == 4 and train.batch_size == 4


def test_cpu_minute_budget_counts_process_time() -> None:
    budget = Budget(cpu_minutes=1.0)
    assert budget.progress(10_000, 3600.0, 30.0) == pytest.approx(0.5)
    assert budget.done(0, 0.0, 60.0) and not budget.done(10**6, 1e6, 59.0)
    with pytest.raises(ValueError):
        Budget()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--recipe", "nope"], "unknown recipe"),
        (["--set", "dynamics.nope=1"], "unknown dynamics field"),
        (["--set", "chunk=2"], "SECTION.FIELD=VALUE"),
        (["--cpu-minutes", "0"], "must be positive"),
    ],
)
def test_train_cli_refuses_bad_recipes(tmp_path: Path, args: list[str], needle: str) -> None:
    from typer.testing import CliRunner

    from pipelines.cli import app

    cmd = ["train", "dynamics", "--data", str(tmp_path / "none.zarr"), "--out", str(tmp_path)]
    if "--cpu-minutes" not in args:
        cmd += ["--steps", "1"]
    result = CliRunner().invoke(app, [*cmd, *args])
    assert_one_line_error(result, needle)


def test_heads_stage_trains_only_the_heads(ae_dir: Path, data: EpisodeData, tmp_path: Path) -> None:
    from factory.train.heads import train_heads

    d = tmp_path / "heads"
    shutil.copytree(ae_dir, d)
    cfg, opts, _ = apply_recipe(
        tiny_config(), DynamicsTrainOptions(), DYNAMICS_TRAIN, "iws", ("dynamics.task_dim=4",)
    )
    train_dynamics(data, d, cfg, Budget(steps=3), train_cfg=tc(), opts=opts)
    before = load_model_dir(d).dynamics
    assert before is not None
    rec = Recorder()
    metrics = train_heads(data, d, Budget(steps=40), on_progress=rec, train_cfg=tc(batch_size=32))
    assert rec.fell(0.9), rec.losses
    assert {"val_agent_err_px", "val_block_err_px", "val_angle_err_deg"} <= set(metrics)
    after = load_model_dir(d).dynamics
    assert after is not None
    torch.testing.assert_close(after.net.stem.weight, before.net.stem.weight)
    assert not torch.equal(after.task_head.heat.weight, before.task_head.heat.weight)  # type: ignore[union-attr]
