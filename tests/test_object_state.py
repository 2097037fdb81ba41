"""The ``object_state`` kind: config and directory dispatch, the rollout protocol and
``factory train all --kind object_state`` (its three parts on their own:
``test_object_state_parts.py``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import (
    assert_one_line_error,
    pusht_scene,
    tiny_object_state_config,
    tiny_object_state_model,
    write_tiny_model_dir,
    write_tiny_object_state_dir,
)
from typer.testing import CliRunner

from factory.envs import make_world
from factory.envs.model_world import ModelWorld
from factory.errors import ModelError
from factory.model import WorldModel, WorldModelConfig, load_model_dir, read_config
from factory.model.object_state.config import ObjectStateConfig
from factory.model.object_state.model import ObjectStateModel
from factory.train.all_stages import STATE_FILE
from pipelines.cli import app

runner = CliRunner()
SIZE = 32
PX = 512 / SIZE  # board px per image column
BLOCK_RGB = torch.tensor([0.1, 0.6, 0.9])


# -- config and model directories -------------------------------------------------------
def test_config_dict_round_trip() -> None:
    cfg = tiny_object_state_config().with_parts("renderer", "dynamics")
    back = ObjectStateConfig.from_dict(json.loads(cfg.to_json()))
    assert back == cfg
    assert back.parts == ("dynamics", "renderer") and back.renderer.image_size == (32, 32)
    with pytest.raises(ValueError, match="kind"):
        ObjectStateConfig.from_dict({**cfg.to_dict(), "kind": "latent_grid"})
    with pytest.raises(ValueError, match="bogus"):
        ObjectStateConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_model_dir_round_trip(tmp_path: Path) -> None:
    d = write_tiny_object_state_dir(tmp_path / "m")
    cfg = read_config(d)
    assert isinstance(cfg, ObjectStateConfig) and cfg.kind == "object_state"
    assert cfg.parts == ("dynamics", "reader", "renderer")
    assert cfg.renderer.image_size == (SIZE, SIZE) == cfg.reader.image_size
    assert (cfg.reader.width, cfg.dynamics.hidden, cfg.dynamics.layers) == (8, 32, 2)
    assert json.loads((d / "config.json").read_text())["kind"] == "object_state"
    model = load_model_dir(d)
    assert isinstance(model, ObjectStateModel) and model.kind == "object_state"
    fresh = tiny_object_state_model(0)
    for part in ("dynamics", "renderer", "reader"):
        loaded, orig = getattr(model, part).state_dict(), getattr(fresh, part).state_dict()
        assert loaded.keys() == orig.keys()
        for k, v in orig.items():
            torch.testing.assert_close(loaded[k], v, rtol=0, atol=0)
    only = load_model_dir(d, parts=("dynamics", "renderer"))
    assert only.reader is None and only.dynamics is not None


def test_unknown_kind_is_refused_naming_the_kinds(tmp_path: Path) -> None:
    d = write_tiny_object_state_dir(tmp_path / "m")
    data = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**data, "kind": "voxels"}))
    for load in (read_config, load_model_dir):
        with pytest.raises(ModelError, match="voxels") as err:
            load(d)
        assert "latent_grid" in str(err.value) and "object_state" in str(err.value)


def test_config_without_kind_is_latent_grid(tmp_path: Path) -> None:
    d = write_tiny_model_dir(tmp_path / "old")
    data = json.loads((d / "config.json").read_text())
    data.pop("kind", None)
    (d / "config.json").write_text(json.dumps(data))
    cfg = read_config(d)
    assert isinstance(cfg, WorldModelConfig) and cfg.kind == "latent_grid"
    assert isinstance(load_model_dir(d), WorldModel)


# -- the rollout protocol ---------------------------------------------------------------
def _states(n: int, seed: int) -> np.ndarray:
    return pusht_scene(n, seed)[1].numpy()


def test_start_and_step() -> None:
    model = tiny_object_state_model(0)
    assert model.dynamics is not None and model.renderer is not None
    s = _states(3, seed=7)
    model.start(states=s[:, None])
    agent, block = model.last_reading()
    np.testing.assert_array_equal(agent, s[:, :2])
    np.testing.assert_array_equal(block, s[:, 2:])
    acts = (s[:, :2] + np.array([[10.0, -5.0], [0.0, 20.0], [-15.0, 3.0]])).astype(np.float32)
    out = model.step(acts)
    assert out.frames.shape == (3, SIZE, SIZE, 3) and out.frames.dtype == np.uint8
    assert out.state.shape == (3, 2) and out.state.dtype == np.float32
    assert out.task_state is not None and out.task_state.shape == (3, 3)
    # one state: the padding is "at rest", previous state = current, previous action = agent
    cur = torch.from_numpy(s)
    with torch.no_grad():
        want, _ = model.dynamics(cur, cur, cur[:, :2], torch.from_numpy(acts))
    np.testing.assert_allclose(out.state, want[:, :2].numpy(), atol=1e-4)
    np.testing.assert_allclose(out.task_state, want[:, 2:].numpy(), atol=1e-4)
    np.testing.assert_array_equal(
        out.frames, model.render(np.concatenate([out.state, out.task_state], 1))
    )
    got_agent, got_block = model.last_reading()
    np.testing.assert_array_equal(got_agent, out.state)
    np.testing.assert_array_equal(got_block, out.task_state)


def test_start_from_two_states_uses_the_context_action() -> None:
    model = tiny_object_state_model(0)
    assert model.dynamics is not None
    prev, cur, pa, a = pusht_scene(2, seed=8)
    model.start(states=torch.stack([prev, cur], 1).numpy(), context_actions=pa[:, None].numpy())
    out = model.step(a.numpy())
    with torch.no_grad():
        want, _ = model.dynamics(prev, cur, pa, a)
    np.testing.assert_allclose(out.state, want[:, :2].numpy(), atol=1e-4)
    np.testing.assert_allclose(out.task_state, want[:, 2:].numpy(), atol=1e-4)


def test_start_slots_restarts_only_those_rows() -> None:
    """Mid-rollout (after a step, as the generation engine refills slots) row 1 restarts
    from a new state; rows 0 and 2 go on as if nothing happened."""
    s, new = _states(3, seed=9), _states(1, seed=10)
    acts = np.full((3, 2), 256.0, np.float32)
    ref = tiny_object_state_model(0)
    ref.start(states=s[:, None])
    ref.step(acts)
    ref_agent, ref_block = ref.last_reading()
    ref_out = ref.step(acts)
    model = tiny_object_state_model(0)
    model.start(states=s[:, None])
    model.step(acts)
    model.start_slots([1], states=new[:, None])
    agent, block = model.last_reading()
    np.testing.assert_array_equal(agent[[0, 2]], ref_agent[[0, 2]])
    np.testing.assert_array_equal(block[[0, 2]], ref_block[[0, 2]])
    np.testing.assert_array_equal(agent[1], new[0, :2])
    np.testing.assert_array_equal(block[1], new[0, 2:])
    np.testing.assert_array_equal(model.last_reading([1])[1], new[:, 2:])
    one = tiny_object_state_model(0)
    one.start(states=new[:, None])
    one_out = one.step(acts[:1])
    out = model.step(acts)
    np.testing.assert_array_equal(out.frames[[0, 2]], ref_out.frames[[0, 2]])
    np.testing.assert_array_equal(out.state[[0, 2]], ref_out.state[[0, 2]])
    np.testing.assert_allclose(out.state[1], one_out.state[0], atol=1e-4)
    assert out.task_state is not None and one_out.task_state is not None
    np.testing.assert_allclose(out.task_state[1], one_out.task_state[0], atol=1e-4)
    with pytest.raises(ValueError, match="slots"):
        model.start_slots([0, 1], states=new[:, None])


def test_model_world_start_slots_mid_rollout() -> None:
    configs = np.array([[100.0, 100.0, 300.0, 300.0, 0.5], [400.0, 120.0, 200.0, 250.0, -1.0]])
    world = ModelWorld(tiny_object_state_model(0), batch_size=2, seed=0)
    try:
        first = world.reset(configs=configs)
        world.step(np.full((2, 2), 250.0, np.float32))
        state = np.array([[[300.0, 310.0, 220.0, 260.0, 0.25]]], np.float32)
        obs = world.start_slots([0], first.frames[:1, None], None, states=state)
        np.testing.assert_array_equal(obs.state, state[:, 0, :2])
        np.testing.assert_array_equal(obs.task_state, state[:, 0, 2:])
        assert world.step(np.full((2, 2), 250.0, np.float32)).frames.shape == (2, 32, 32, 3)
    finally:
        world.close()


def test_keep_slots_keeps_rows_in_order() -> None:
    s = _states(3, seed=11)
    acts = np.full((3, 2), 200.0, np.float32)
    ref = tiny_object_state_model(0)
    ref.start(states=s[:, None])
    ref_out = ref.step(acts)
    model = tiny_object_state_model(0)
    model.start(states=s[:, None])
    model.keep_slots([2, 0])
    assert model.batch_size == 2
    np.testing.assert_array_equal(model.last_reading()[0], s[[2, 0], :2])
    out = model.step(acts[:2])
    np.testing.assert_array_equal(out.state, ref_out.state[[2, 0]])
    np.testing.assert_array_equal(out.frames, ref_out.frames[[2, 0]])


def test_start_from_frames_uses_the_reader() -> None:
    model = tiny_object_state_model(0)
    s = _states(2, seed=13)
    frames = model.render(s)
    model.start(context_frames=frames[:, None])
    agent, block = model.last_reading()
    want = model.read_states(frames).numpy()
    np.testing.assert_allclose(agent, want[:, :2], atol=1e-4)
    np.testing.assert_allclose(block, want[:, 2:], atol=1e-4)


def test_model_world_starts_from_the_exact_reset_state() -> None:
    configs = np.array([[100.0, 100.0, 300.0, 300.0, 0.5], [400.0, 120.0, 200.0, 250.0, -1.0]])
    gt = make_world("pusht", batch_size=2, resolution=SIZE)
    world = ModelWorld(tiny_object_state_model(0), batch_size=2, seed=0)
    try:
        real, obs = gt.reset(configs=configs), world.reset(configs=configs)
        np.testing.assert_array_equal(obs.state, real.state)
        np.testing.assert_array_equal(obs.task_state, real.task_state)
        np.testing.assert_array_equal(obs.frames, real.frames)
        assert world.task_reader == "state"
    finally:
        gt.close()
        world.close()


# -- factory train all --kind object_state ----------------------------------------------
def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def gt_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("object_state") / "s.zarr"
    _ok(["collect", "--out", str(out), "--episodes", "2", "--steps", "40", "--resolution", "32"])
    return out


def test_train_all_object_state(gt_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["train", "all", "--data", str(gt_store), "--out", str(out), "--device", "cpu"]
    summary = json.loads(_ok([*args, "--kind", "object_state", "--steps", "6", "--json"]))
    assert list(summary["stages"]) == ["renderer", "dynamics", "reader"]
    steps = {s: r["steps"] for s, r in summary["stages"].items()}
    assert steps == {"renderer": 1, "dynamics": 3, "reader": 2}
    state = json.loads((out / STATE_FILE).read_text())
    assert state["kind"] == "object_state"
    cfg = read_config(out / "model")
    assert isinstance(cfg, ObjectStateConfig)
    assert cfg.parts == ("dynamics", "reader", "renderer") and cfg.image_shape == (32, 32, 3)
    model = load_model_dir(out / "model")
    assert isinstance(model, ObjectStateModel)
    assert None not in (model.dynamics, model.renderer, model.reader)
    # resuming under another kind is refused; without --kind the run's own kind resumes
    assert_one_line_error(
        runner.invoke(app, [*args, "--resume", "--kind", "latent_grid"]), "latent_grid"
    )
    _ok([*args, "--resume"])
    assert isinstance(load_model_dir(out / "model"), ObjectStateModel)


def test_train_all_object_state_needs_task_state(filled: Path, tmp_path: Path) -> None:
    args = ["train", "all", "--data", str(filled), "--out", str(tmp_path / "o"), "--steps", "6"]
    result = runner.invoke(app, [*args, "--kind", "object_state", "--device", "cpu"])
    assert_one_line_error(result, "task_state", "latent_grid")
    assert not (tmp_path / "o").exists()


def test_unknown_kind_for_train_all(filled: Path, tmp_path: Path) -> None:
    args = ["train", "all", "--data", str(filled), "--out", str(tmp_path / "o"), "--steps", "6"]
    result = runner.invoke(app, [*args, "--kind", "voxels", "--device", "cpu"])
    assert_one_line_error(result, "voxels", "latent_grid", "object_state")


def test_object_state_replace_keeps_kind() -> None:
    cfg = dataclasses.replace(tiny_object_state_config(), name="x")
    assert cfg.kind == "object_state" and cfg.state_dim == 5 and cfg.context == 2
