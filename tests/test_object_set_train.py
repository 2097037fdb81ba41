"""The ``object_set`` kind trained on a tiny pile store: each part's loss falls and the
part beats its baseline on held-out episodes, the cameras' homography fit, ``train all``
(object_set by default for a pile store) and ``generate --generator pile_expert``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from factories import assert_one_line_error, tiny_object_set_config, write_tiny_object_set_dir
from typer.testing import CliRunner

from factory.envs.pile_render import DISC_HEIGHT, side_camera
from factory.model import load_model_dir, read_config
from factory.model.object_set.config import ObjectSetConfig
from factory.model.object_set.homography import apply
from factory.model.object_set.model import ObjectSetModel
from factory.model.object_set.reader import SetReader, chamfer_px
from factory.model.object_set.renderer import CameraRenderer
from factory.store import EpisodeStore
from pipelines.cli import app

runner = CliRunner()
SIZE = 32  # the tiny model's frames
STORE_SIZE = 48  # the training store's frames


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def pile_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("object_set") / "pile.zarr"
    _ok(["collect", "--env", "pile", "--generator", "pile_play", "--out", str(out),
         "--episodes", "8", "--steps", "60", "--resolution", str(STORE_SIZE)])  # fmt: skip
    return out


def test_store_config_and_refusals(pile_store: Path, tmp_path: Path) -> None:
    from factory.train.data import load_episode_data
    from factory.train.object_set import store_set_config

    cfg = store_set_config(pile_store, load_episode_data(pile_store))
    assert (cfg.n_discs, cfg.cameras, cfg.world, cfg.image_shape) == (
        30, ("top", "side"), "pile", (STORE_SIZE, STORE_SIZE, 3))  # fmt: skip
    assert (cfg.renderer.layers, cfg.renderer.supersample) == (2, 1)  # version 7's
    assert cfg.renderer.learn_heights and cfg.renderer.binary_weight == 0.0
    assert cfg.renderer.order_by_rise and cfg.renderer.lift_start == 0.0
    assert not cfg.dynamics.coast  # the coasting term is an ablation's, off by default
    assert cfg.dynamics.edge_frames and cfg.dynamics.message_steps == 3  # version 9's
    pusht = tmp_path / "pusht.zarr"
    _ok(["collect", "--out", str(pusht), "--episodes", "1", "--steps", "5",
         "--resolution", str(SIZE)])  # fmt: skip
    args = ["train", "all", "--data", str(pusht), "--out", str(tmp_path / "o"), "--steps", "3"]
    result = runner.invoke(app, [*args, "--kind", "object_set", "--device", "cpu"])
    assert_one_line_error(result, "object_set", "3 values")
    assert not (tmp_path / "o").exists()


def test_camera_fit_finds_both_cameras(pile_store: Path) -> None:
    """The homography fitted to where the agent is seen arriving: the top view's (the
    board resized: identity) and the side camera's projection of the floor, each within
    a pixel at the board's corners and centre; with ``lift_start`` 8, the side camera's
    top layer starts up the image, within 0.15 px of where a disc's top face is (0.40 px
    at this size), and the top camera's (no perspective) where its bottom is."""
    from factory.train.object_set import fit_camera, load_views, still_pairs

    data, states, _ = _held_out(pile_store)
    views = load_views(data, ("top", "side"))
    pairs = still_pairs(data, states, min_move=30.0)
    board = torch.tensor([[60.0, 60.0], [450.0, 60.0], [256.0, 256.0], [60.0, 450.0],
                          [450.0, 450.0]])  # fmt: skip
    side = side_camera(STORE_SIZE).project(np.c_[board.numpy(), np.zeros(5)])[0]
    truth = {"top": board.numpy() * STORE_SIZE / 512, "side": side}
    centre = np.array([[256.0, 256.0, 0.0], [256.0, 256.0, DISC_HEIGHT]])
    rise = -np.diff(side_camera(STORE_SIZE).project(centre)[0][:, 1])[0]
    layered = dataclasses.replace(_train_config().renderer, layers=2, lift_start=DISC_HEIGHT)
    for name, want in truth.items():
        cam = CameraRenderer(layered)
        assert fit_camera(cam, views[name], states, pairs, 512.0) >= 8
        pix, _ = apply(torch.linalg.inv(cam.homography().detach()), board / 256 - 1)
        got = ((pix + 1) / 2 * STORE_SIZE).numpy()
        assert np.abs(got - want).max() < 1.0, (name, got, want)
        want_rise = rise if name == "side" else 0.0
        assert abs(float(cam.rise()) - want_rise) < 0.15, (name, float(cam.rise()), rise)


def _train_config(edge_frames: bool = False) -> ObjectSetConfig:
    """The tiny config at the store's size, opacity prior off (its loss is the MSE)."""
    base = tiny_object_set_config(STORE_SIZE)
    dyn = dataclasses.replace(base.dynamics, hidden=32, message_steps=2, edge_frames=edge_frames)
    return dataclasses.replace(
        base,
        dynamics=dyn,
        renderer=dataclasses.replace(base.renderer, binary_weight=0.0),
        reader=dataclasses.replace(base.reader, layers=3),
    )


def _train(
    stage: str,
    store: Path,
    out: Path,
    steps: int,
    batch: int,
    lr: float | None = None,
    edge_frames: bool = False,
    **kw: Any,
) -> list[float]:
    """Train one part for ``steps`` steps of ``batch`` (learning rate ``lr``, default the
    stage's; the dynamics in edge frames or board axes); its (smoothed) loss at every
    step."""
    from factory.train.data import load_episode_data
    from factory.train.loop import Budget, TrainConfig
    from factory.train.object_set import STAGE_TRAIN, train_set_part

    losses: list[float] = []
    base = STAGE_TRAIN[stage]
    tc: TrainConfig = dataclasses.replace(
        base, batch_size=batch, lr=lr or base.lr, warmup_steps=10, log_every=1, threads=1
    )

    def progress(step: int, total: int | None, metrics: dict[str, float]) -> None:
        losses.append(metrics["loss"])

    data = load_episode_data(store)
    train_set_part(stage, data, out, _train_config(edge_frames), Budget(steps=steps),
                   on_progress=progress, train_cfg=tc, **kw)  # fmt: skip
    return losses


def _held_out(store: Path) -> tuple[Any, np.ndarray, np.ndarray]:
    """The data, its states and the held-out episodes' frame indices (the stages' split)."""
    from factory.train.data import load_episode_data
    from factory.train.object_set import STAGE_TRAIN, set_states

    data = load_episode_data(store)
    _, val = data.split(STAGE_TRAIN["dynamics"].val_fraction, seed=0)
    return data, set_states(data), data.frame_indices(val)


def test_training_the_renderer_fits_both_cameras(pile_store: Path, tmp_path: Path) -> None:
    losses = _train("renderer", pile_store, tmp_path / "m", steps=120, batch=8)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    model = load_model_dir(tmp_path / "m", parts=("renderer",))
    data, states, val = _held_out(pile_store)
    views = model.renderer.render_uint8(torch.from_numpy(states[val]))
    with EpisodeStore.open(pile_store) as store:
        side = store.load(["image_side"])["image_side"]
    train = np.setdiff1d(np.arange(len(side)), val)
    for cam, frames in (("top", data.frames), ("side", side)):
        real = frames[val].astype(float)
        err = np.abs(views[cam].numpy() - real).mean()
        board = np.abs(np.median(frames[train], axis=0) - real).mean()  # the empty board
        assert err < 0.6 * board, (cam, err, board)


@pytest.mark.parametrize("edge_frames", [False, True], ids=["board_axes", "edge_frames"])
def test_training_the_dynamics_beats_copy_last(
    pile_store: Path, tmp_path: Path, edge_frames: bool
) -> None:
    from factory.train.object_set import SetSchedule

    sched = SetSchedule(unrolls=(2,), at=(0.0,))
    losses = _train("dynamics", pile_store, tmp_path / "m", 150, 32, lr=3e-3,
                    edge_frames=edge_frames, schedule=sched)  # fmt: skip
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10]), losses
    dyn = load_model_dir(tmp_path / "m", parts=("dynamics",)).dynamics
    data, states, val = _held_out(pile_store)
    t = val[np.isin(val + 2, val) & np.isin(val + 1, val)]  # (t, t+1) -> t+2, one episode
    t = t[np.any(states[t + 2, 2:] != states[t + 1, 2:], axis=1)]  # some disc moves
    assert len(t) >= 5
    s = torch.from_numpy(states)
    a = torch.from_numpy(data.actions)
    with torch.no_grad():
        nxt, _, _ = dyn(s[t], s[t + 1], a[t], a[t + 1])
    true = s[t + 2]
    agent_err = (nxt[:, :2] - true[:, :2]).norm(dim=-1).max()
    model_err = (nxt[:, 2:] - true[:, 2:]).unflatten(1, (-1, 2)).norm(dim=-1).mean()
    copy_err = (s[t + 1, 2:] - true[:, 2:]).unflatten(1, (-1, 2)).norm(dim=-1).mean()
    assert agent_err < 0.05  # the PD-driven agent is linear: least squares is exact
    assert model_err < 0.8 * copy_err, (model_err, copy_err)


def test_training_the_reader_finds_the_discs(pile_store: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)  # both readers' initialisations: the test is the same every run
    losses = _train("reader", pile_store, tmp_path / "m", steps=120, batch=8)
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    data, states, val = _held_out(pile_store)
    frames = torch.from_numpy(data.frames[val]).permute(0, 3, 1, 2).float() / 255
    true = torch.from_numpy(states[val])
    errors = []
    for reader in (SetReader(_train_config().reader, 30),
                   load_model_dir(tmp_path / "m", parts=("reader",)).reader):  # fmt: skip
        with torch.no_grad():
            read = reader(frames)
        errors.append(float(chamfer_px(read[:, 2:].unflatten(1, (-1, 2)),
                                       true[:, 2:].unflatten(1, (-1, 2))).mean()))  # fmt: skip
    assert errors[1] < 0.5 * errors[0], errors


def test_train_all_picks_object_set_for_a_pile_store(pile_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["train", "all", "--data", str(pile_store), "--out", str(out), "--device", "cpu"]
    summary = json.loads(_ok([*args, "--steps", "4", "--json"]))
    assert list(summary["stages"]) == ["renderer", "dynamics", "reader"]
    assert {s: r["steps"] for s, r in summary["stages"].items()} == {
        "renderer": 1, "dynamics": 2, "reader": 1}  # fmt: skip
    assert json.loads((out / "train_all.json").read_text())["kind"] == "object_set"
    model = load_model_dir(out / "model")
    assert isinstance(model, ObjectSetModel) and model.cameras == ("top", "side")
    assert model.config.n_discs == 30 and model.config.image_shape == (STORE_SIZE, STORE_SIZE, 3)


def test_train_one_stage_picks_object_set_for_a_pile_store(
    pile_store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "stagewise"
    base = ["--data", str(pile_store), "--out", str(out), "--steps", "1", "--device", "cpu"]
    _ok(["train", "renderer", *base])
    assert read_config(out).kind == "object_set" and "renderer" in read_config(out).parts
    _ok(["train", "dynamics", *base])  # the directory's kind from here on
    assert read_config(out).kind == "object_set" and "dynamics" in read_config(out).parts
    assert_one_line_error(runner.invoke(app, ["train", "heads", *base]), "object_set", "valid")


def test_the_dynamics_stage_loads_no_pixels(
    pile_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from factory.train import data as data_mod

    full = data_mod.load_episode_data(pile_store, need_task_state=True)
    lean = data_mod.load_episode_data(pile_store, need_task_state=True, frames=False)
    assert lean.frames.shape == full.frames.shape and lean.frames.dtype == np.uint8
    assert lean.frames.strides[0] == 0 and not lean.frames.any()  # a view: no memory
    assert full.frames.any()
    for key in ("actions", "state", "task_state", "episode_ends"):
        np.testing.assert_array_equal(getattr(lean, key), getattr(full, key))
    asked: list[tuple[str, bool]] = []

    def spy(*args: Any, **kw: Any) -> Any:
        data = data_mod.load_episode_data(*args, **kw)
        asked.append((stage, bool(data.frames.any())))
        return data

    monkeypatch.setattr("pipelines.train.load_episode_data", spy)
    base = ["--data", str(pile_store), "--out", str(tmp_path / "m"), "--steps", "1"]
    for stage in ("renderer", "dynamics", "reader"):
        _ok(["train", stage, *base, "--device", "cpu"])
    assert asked == [("renderer", True), ("dynamics", False), ("reader", True)]


def test_set_configures_a_fresh_object_set_model(pile_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "layered"
    base = ["--data", str(pile_store), "--out", str(out), "--steps", "1", "--device", "cpu"]
    bad = runner.invoke(app, ["train", "renderer", *base, "--set", "renderer.layers=0"])
    assert_one_line_error(bad, "renderer.layers")
    bad = runner.invoke(app, ["train", "renderer", *base, "--set", "renderer.fg_weight=-1"])
    assert_one_line_error(bad, "renderer.fg_weight")
    bad = runner.invoke(app, ["train", "dynamics", *base, "--set", "dynamics.vectors=1"])
    assert_one_line_error(bad, "dynamics.vectors")
    assert not out.exists()
    _ok(["train", "renderer", *base, "--set", "renderer.layers=2",
         "--set", "renderer.supersample=2"])  # fmt: skip
    cfg = read_config(out)
    assert (cfg.renderer.layers, cfg.renderer.supersample) == (2, 2)
    model = load_model_dir(out, parts=("renderer",))
    assert model.renderer.render_uint8(torch.zeros(1, 62))["side"].shape == (
        1, STORE_SIZE, STORE_SIZE, 3)  # fmt: skip
    again = runner.invoke(app, ["train", "dynamics", *base, "--set", "renderer.layers=3"])
    assert_one_line_error(again, "fresh")
    assert read_config(out).renderer.layers == 2
    dyn = tmp_path / "dynamics_first"  # a pile store's dynamics stage is object_set's too
    _ok(["train", "dynamics", *base[:2], "--out", str(dyn), *base[4:],
         "--set", "dynamics.message_steps=3", "--set", "dynamics.coast=true"])  # fmt: skip
    assert read_config(dyn).kind == "object_set"
    assert read_config(dyn).dynamics.message_steps == 3
    assert load_model_dir(dyn, parts=("dynamics",)).dynamics.coast is not None
    assert load_model_dir(dyn, parts=("dynamics",)).dynamics.frames is not None
    axes = tmp_path / "board_axes"  # the ablation's other arm, by the same option
    _ok(["train", "dynamics", *base[:2], "--out", str(axes), *base[4:],
         "--set", "dynamics.edge_frames=false"])  # fmt: skip
    assert load_model_dir(axes, parts=("dynamics",)).dynamics.frames is None


def test_generate_pile_expert_writes_both_cameras(ray_session: Any, tmp_path: Path) -> None:
    from factory.gen.plan import GenerateConfig
    from pipelines.generate import run_generate

    model = write_tiny_object_set_dir(tmp_path / "model")
    out = tmp_path / "gen.zarr"
    cfg = GenerateConfig(out=out, generator="pile_expert", episodes=3, model=model, steps=4,
                         batch_size=2)  # fmt: skip
    assert run_generate(cfg)["episodes"] == 3
    with EpisodeStore.open(out) as store:
        assert store.attrs["env"] == "pile" and store.attrs["cameras"] == ["top", "side"]
        for i in range(3):
            ep = store.episode(i)
            assert ep["image"].shape == ep["image_side"].shape == (4, SIZE, SIZE, 3)
            assert ep["task_state"].shape == (4, 60)
            assert not np.array_equal(ep["image"], ep["image_side"])
        assert {m.generator for m in store.all_meta()} == {"pile_expert"}
