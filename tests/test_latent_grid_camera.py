"""One latent_grid model per camera: ``--camera`` trains on that camera's frames (pile's
``side``: ``data/image_side``) and the model records it; ``eval fidelity --side-model``
replays a top-camera model beside a side-camera one, each from its own camera's real
context, for the side view's disc IoU and the cross-view consistency between the two
(known answers from stand-ins of the ground truth; the CLI on tiny model dirs)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import (
    assert_one_line_error,
    tiny_config,
    write_tiny_model_dir,
    write_tiny_object_set_dir,
)
from pile_stand_in import PileStandIn
from typer.testing import CliRunner

from factory.errors import FactoryError
from factory.eval import pile_metrics as pm
from factory.eval.fidelity import plan_replay
from factory.eval.pile_pair import pair_replay
from factory.model import WorldModel, WorldModelConfig, read_config
from factory.model.files import load_model
from factory.model.registry import world_of
from factory.model.world_model import StepOutput
from factory.store import EpisodeStore
from factory.train import all_stages
from factory.train.data import camera_key
from pipelines import train_all
from pipelines.cli import app
from pipelines.eval_fidelity import FidelityRequest, model_fidelity
from pipelines.train import TrainRequest, camera_for

runner = CliRunner()
RES, CONTEXT, DRIFT = 32, 3, 6.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 pile_play episodes of 20 steps at 32 px (top and side)."""
    out = tmp_path_factory.mktemp("pile_cam") / "pile.zarr"
    args = ["collect", "--env", "pile", "--generator", "pile_play", "--out", str(out)]
    args += ["--episodes", "2", "--steps", "20", "--resolution", str(RES)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


def _frames(store: Path, key: str) -> np.ndarray:
    with EpisodeStore.open(store) as s:
        return s.load([key])[key]


def _train(*args: str) -> Any:
    return runner.invoke(app, ["train", *args, "--device", "cpu"])


# -- training ------------------------------------------------------------------------------
def test_camera_names_the_store_key(store: Path) -> None:
    with EpisodeStore.open(store) as s:
        assert camera_key(s, "top") == "image" and camera_key(s, "side") == "image_side"
        with pytest.raises(FactoryError, match=r"no camera 'wrist'.*its cameras: top, side"):
            camera_key(s, "wrist")
    side, top = _frames(store, "image_side"), _frames(store, "image")
    assert side.shape == top.shape and not np.array_equal(side, top)  # the test can tell


@pytest.mark.parametrize(("camera", "key"), [(None, "image"), ("side", "image_side")])
def test_train_all_trains_every_stage_on_the_camera(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, store: Path, camera: str | None, key: str
) -> None:
    """Every stage gets that camera's frames and the config says the camera (the stages
    themselves stand in: they would only learn from what they are given); the run records
    it, and a resume with another --camera is refused."""
    seen: dict[str, tuple[np.ndarray, str]] = {}

    def stage(run: Any, name: str, rec: dict[str, Any]) -> dict[str, Any]:
        seen[name] = (run.data.frames, run.config.camera)
        return {"metrics": {}, "steps": 0, "samples_per_s": 0.0}

    monkeypatch.setattr(all_stages, "_run_stage", stage)
    monkeypatch.setattr(train_all, "_finish", lambda req, result, device: result)
    out = tmp_path / "run"
    base = ["all", "--kind", "latent_grid", "--data", str(store), "--out", str(out)]
    given = [] if camera is None else ["--camera", camera]
    result = _train(*base, *given, "--steps", "6", "--json")
    assert result.exit_code == 0, result.output
    assert set(seen) == {"autoencoder", "latents", "dynamics", "heads", "decoder"}
    expected = _frames(store, key)
    for name, (frames, cam) in seen.items():
        assert np.array_equal(frames, expected) and cam == (camera or "top"), name
    assert train_all.read_state(out)["camera"] == (camera or "top")
    other = "top" if camera else "side"
    again = _train(*base, "--resume", "--camera", other)
    assert_one_line_error(again, f"trains on the {camera or 'top'} camera", f"--camera {other}")


def test_a_stage_on_the_side_camera_reads_image_side(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, store: Path
) -> None:
    """``train autoencoder --camera side``: the stage's data are the side frames, the saved
    config says side (the model's cameras too); the next stage keeps the directory's
    camera and a resume with another --camera is refused."""
    seen: list[np.ndarray] = []
    real = all_stages.train_autoencoder

    def spy(data: Any, *args: Any, **kw: Any) -> dict[str, float]:
        seen.append(data.frames)
        return real(data, *args, **kw)

    monkeypatch.setattr(all_stages, "train_autoencoder", spy)
    out = tmp_path / "grid"
    base = ["autoencoder", "--kind", "latent_grid", "--data", str(store), "--out", str(out)]
    result = _train(*base, "--camera", "side", "--steps", "1")
    assert result.exit_code == 0, result.output
    assert len(seen) == 1 and np.array_equal(seen[0], _frames(store, "image_side"))
    config = read_config(out)
    assert isinstance(config, WorldModelConfig) and config.camera == "side"
    assert config.world == "pile" and world_of(config) == "pile"  # the store's env
    assert WorldModel(config).cameras == ("side",)
    assert camera_for(TrainRequest(stage="dynamics", data=store, out=out), "latent_grid") == "side"
    again = _train(*base, "--camera", "top", "--steps", "2", "--resume")
    assert_one_line_error(again, "model of the side camera", "--camera top")


def test_a_camera_the_store_lacks_is_refused(tmp_path: Path, store: Path) -> None:
    data = ["--data", str(store), "--steps", "1", "--camera", "wrist"]
    for stage in ("all", "autoencoder"):
        out = ["--kind", "latent_grid", "--out", str(tmp_path / stage)]
        assert_one_line_error(_train(stage, *data, *out), "no camera 'wrist'", "top, side")
        assert not (tmp_path / stage / "config.json").exists()


def test_camera_with_a_state_kind_is_refused(tmp_path: Path, store: Path) -> None:
    """object_set (a pile store's default kind) renders every camera."""
    data = ["--data", str(store), "--steps", "1", "--camera", "side"]
    for stage in ("all", "renderer"):
        result = _train(stage, *data, "--out", str(tmp_path / stage))
        assert_one_line_error(result, "object_set kind renders every camera", "--kind latent_grid")


def test_eval_after_training_a_side_model_is_refused(tmp_path: Path, store: Path) -> None:
    """train all --eval scores a top-camera model alone; a side one is scored in a pair."""
    args = ["all", "--kind", "latent_grid", "--camera", "side", "--data", str(store)]
    args += ["--out", str(tmp_path / "run"), "--steps", "1", "--eval", str(store)]
    assert_one_line_error(_train(*args), "--side-model")


def test_an_old_config_is_a_model_of_the_main_camera() -> None:
    """A config written before the field loads as the main camera (one unnamed camera)."""
    old = tiny_config().to_dict()
    del old["camera"], old["world"]
    config = WorldModelConfig.from_dict(old)
    assert config.camera == "top" and WorldModel(config).cameras == ()
    assert config.world == "pusht"  # every config before the field was PushT's
    side = WorldModelConfig.from_json(dataclasses.replace(config, camera="side").to_json())
    assert side.camera == "side" and WorldModel(side).cameras == ("side",)


# -- pair evaluation -----------------------------------------------------------------------
class SideStandIn(PileStandIn):
    """The ground truth seen by the side camera alone, as a model trained with ``--camera
    side`` is: its frames are the side view, its one camera ``side``. It starts from its
    context frames (read by the lookup; remembered in ``started_from``), not states."""

    starts_from_states = False

    def __init__(self, resolution: int, drift_px: float = 0.0) -> None:
        super().__init__(resolution, drift_px, side=True)
        self.kind = "side_stand_in"
        self.started_from: list[np.ndarray] = []

    @property
    def cameras(self) -> tuple[str, ...]:
        return ("side",)

    def start(
        self,
        context_frames: Any = None,
        context_actions: Any = None,
        seed: int = 0,
        states: Any = None,
    ) -> None:
        self.started_from.append(np.asarray(context_frames))
        super().start(context_frames, context_actions, seed, None)

    def step(self, actions: Any) -> StepOutput:
        out = super().step(actions)
        return dataclasses.replace(out, frames=out.views["side"], views={})


def _learnt(model: PileStandIn, store: Path) -> PileStandIn:
    with EpisodeStore.open(store) as s:
        model.learn(s)
    return model


@pytest.fixture()
def top(store: Path) -> Iterator[PileStandIn]:
    model = _learnt(PileStandIn(RES, side=False), store)
    yield model
    model.close()


def _pair(top: PileStandIn, side: SideStandIn, store: Path, horizons: tuple[int, ...]) -> dict:
    req = FidelityRequest(
        data=store, episodes=2, horizons=horizons, stability_frames=0, permanence_starts=0
    )
    result = model_fidelity(top, "top-id", req, side=(side, "side-id"))  # type: ignore[arg-type]
    json.dumps(result, allow_nan=False)
    return result


def test_a_perfect_pair_scores_like_a_model_of_both_views(top: PileStandIn, store: Path) -> None:
    """The ground truth's top and side views from two one-camera models: IoU 1 in both
    views, the cross-view numbers the real frames'; the side model started from the side
    camera's real context frames."""
    side = _learnt(SideStandIn(RES), store)
    r = _pair(top, side, store, (1, 4, 10))
    side.close()
    assert r["side_model"] == "side-id" and "pile_skipped" not in r
    context = _frames(store, "image_side").reshape(2, 20, RES, RES, 3)[:, :CONTEXT]
    assert side.started_from  # the replay, and the one from the top model's reading
    assert all(np.array_equal(frames, context) for frames in side.started_from)
    for h, row in r["horizons"].items():
        assert row["disc_iou_top"] == row["disc_iou_side"] == 1.0, h
        assert row["count_gap"] == row["real_count_gap"], h
        real = row["real_centroid_gap_px"]  # float32 states: a few hundredths off at h 10
        assert row["centroid_gap_px"] == pytest.approx(real, abs=0.05), h
    assert r["horizons"]["10"]["copy_disc_iou_side"] < 1.0


def test_a_drifting_side_model_breaks_the_views_agreement(top: PileStandIn, store: Path) -> None:
    """The side model's discs drift 6 px per step, the top model's do not: the side IoU
    falls with h while the top one stays 1, and the centroids the two models' views imply
    part by about the drift (60 px at h 10, against the real frames' few px)."""
    side = _learnt(SideStandIn(RES, DRIFT), store)
    r = _pair(top, side, store, (1, 4, 10))
    side.close()
    rows = [r["horizons"][h] for h in ("1", "4", "10")]
    assert all(row["disc_iou_top"] == 1.0 for row in rows)
    ious = [row["disc_iou_side"] for row in rows]
    assert ious == sorted(ious, reverse=True) and ious[-1] < 0.5
    far = rows[-1]
    assert far["real_centroid_gap_px"] < 20
    assert far["centroid_gap_px"] == pytest.approx(DRIFT * 10, abs=far["real_centroid_gap_px"] + 10)


def test_the_cli_pairs_two_latent_grid_dirs(tmp_path: Path, store: Path) -> None:
    """Tiny random latent_grid dirs of each camera: every view's and cross-view number is
    there; the cross-view gap is that of the two models' own frames (re-measured from the
    same replay), not a copy of the real one."""
    top_dir = write_tiny_model_dir(tmp_path / "top", context=CONTEXT, world="pile")
    side_dir = write_tiny_model_dir(tmp_path / "side", CONTEXT, camera="side", world="pile")
    args = ["eval", "fidelity", "--model", str(top_dir), "--side-model", str(side_dir)]
    args += ["--data", str(store), "--episodes", "2", "--horizons", "1,10"]
    args += ["--stability-frames", "0", "--permanence-starts", "0", "--device", "cpu"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["kind"] == "latent_grid" and r["side_model"]
    assert "disc_iou_side" not in r.get("pile_skipped", {})
    keys = {"disc_iou_top", "disc_iou_side", "copy_disc_iou_side", "count_gap", "face_count_gap"}
    keys |= {"centroid_gap_px", "real_count_gap", "real_face_count_gap", "real_centroid_gap_px"}
    for h in ("1", "10"):
        assert keys <= set(r["horizons"][h]), h
    # the count gap re-measured from the same pair replay
    top_m, _ = load_model(top_dir, "cpu")
    side_m, _ = load_model(side_dir, "cpu")
    with EpisodeStore.open(store) as s:
        plan = plan_replay(s, 2, CONTEXT, (1, 10))
    rs = next(iter(plan.groups.values()))
    rep = pair_replay(top_m, side_m, rs, seed=0)
    gap, _ = pm.cross_view(rep.frames[:, 0], rep.views["side"][:, 0])
    assert r["horizons"]["1"]["count_gap"] == pytest.approx(gap.mean())


def test_mismatched_side_models_are_refused(tmp_path: Path, store: Path) -> None:
    """A side model of the top camera, of another world (3-D actions, or trained on PushT),
    or a --model that renders the side view itself (object_set); a side model alone as
    --model."""
    top_dir = write_tiny_model_dir(tmp_path / "top", context=CONTEXT, world="pile")
    side_dir = write_tiny_model_dir(tmp_path / "side", CONTEXT, camera="side", world="pile")
    wide = write_tiny_model_dir(tmp_path / "wide", CONTEXT, 3, camera="side", world="pile")
    pusht_side = write_tiny_model_dir(tmp_path / "pusht", CONTEXT, camera="side")
    both = write_tiny_object_set_dir(tmp_path / "set")
    base = ["eval", "fidelity", "--data", str(store), "--device", "cpu", "--horizons", "1"]
    cases = [
        (top_dir, top_dir, "renders the top camera, not side"),
        (top_dir, wide, "another world"),
        (top_dir, pusht_side, "a model of the pusht world"),
        (both, side_dir, "object_set --model renders the side camera"),
    ]
    for model, side, needle in cases:
        result = runner.invoke(app, [*base, "--model", str(model), "--side-model", str(side)])
        assert_one_line_error(result, "--side-model", needle)
    alone = runner.invoke(app, [*base, "--model", str(side_dir)])
    assert_one_line_error(alone, "renders the side camera", "--side-model")


def test_generating_in_a_side_camera_model_is_refused(tmp_path: Path) -> None:
    """A world model world starts from and shows the main camera: a side-camera model
    would be started from top frames, so generate refuses it in one line, leaving no
    output."""
    side_dir = write_tiny_model_dir(tmp_path / "side", context=CONTEXT, camera="side")
    out = tmp_path / "gen.zarr"
    args = ["generate", "--model", str(side_dir), "--generator", "play", "--episodes", "1"]
    result = runner.invoke(app, [*args, "--steps", "3", "--out", str(out)])
    assert_one_line_error(result, "'side' camera only")
    assert not out.exists()


def test_a_pile_task_head_reads_positions_only() -> None:
    """PushT's task state ends with the block angle (read as sin, cos: K + 1 outputs); the
    pile's 60 numbers are all positions (K outputs), and its head's targets invert to the
    same positions (no number wrapped as an angle)."""
    import torch

    from factory.model.heads import pose_to_target, target_to_pose
    from factory.train.data import EpisodeData
    from factory.train.model_config import task_head_overrides

    def data(world: str | None, width: int) -> EpisodeData:
        n = 4
        frames = np.zeros((n, 8, 8, 3), np.uint8)
        task = np.random.default_rng(0).uniform(0, 512, (n, width)).astype(np.float32)
        acts, state = np.zeros((n, 2), np.float32), np.zeros((n, 2), np.float32)
        return EpisodeData(frames, acts, state, np.array([n]), task, world=world)

    assert task_head_overrides(data("pusht", 3)) == ("dynamics.task_dim=4",)
    assert task_head_overrides(data(None, 3)) == ("dynamics.task_dim=4",)
    assert task_head_overrides(data("pile", 60)) == (
        "dynamics.task_dim=60",
        "dynamics.task_angle=false",
    )
    discs = torch.from_numpy(data("pile", 60).task_state)
    mean, std = discs.mean(0), discs.std(0)
    target = pose_to_target(discs, mean, std, angle=False)
    assert target.shape == discs.shape
    torch.testing.assert_close(
        target_to_pose(target, mean, std, angle=False), discs, atol=1e-3, rtol=0
    )
    wrapped = target_to_pose(pose_to_target(discs, mean[:-1], std[:-1]), mean[:-1], std[:-1])
    assert not torch.allclose(wrapped[:, -1], discs[:, -1])  # read as an angle, it is lost


def test_a_dynamics_without_a_task_angle_reads_every_number() -> None:
    """A latent_grid dynamics of pile's 60-number task state reads 60 numbers."""
    import torch

    from factory.model.dynamics import Dynamics

    base = tiny_config()
    dyn_cfg = dataclasses.replace(base.dynamics, task_dim=60, task_angle=False)
    dyn = Dynamics(dyn_cfg, base.consistency)
    z = torch.zeros(2, dyn_cfg.latent_channels, *dyn_cfg.latent_size)
    assert dyn.task_mean.shape == (60,) and dyn.read_task(z).shape == (2, 60)
    assert dyn.task_target(torch.zeros(2, 60)).shape == (2, 60)
