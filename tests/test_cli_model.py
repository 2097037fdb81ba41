"""CLI smoke tests of the world-model commands on tiny models and a tiny 32 px store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from factories import write_tiny_model_dir
from typer.testing import CliRunner

from factory.model import load_model_dir
from factory.store import EpisodeMeta, EpisodeStore, KeySpec, StoreSchema
from pipelines.cli import app

runner = CliRunner()


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


def _fails(args: list[str], *needles: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    for needle in needles:
        assert needle in text, text


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("model_cli") / "s.zarr"
    _ok(["collect", "--out", str(out), "--episodes", "3", "--steps", "110", "--resolution", "32"])
    return out


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model")


def test_train_every_stage_then_load(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "m"
    base = ["--data", str(store), "--out", str(out), "--steps", "2", "--device", "cpu"]
    for stage in ("autoencoder", "probe", "dynamics", "decoder"):
        _ok(["train", stage, *base, "--json"])
    model = load_model_dir(out)
    assert model.autoencoder is not None and model.dynamics is not None
    assert model.probe is not None
    provenance = json.loads((out / "provenance.json").read_text())
    assert str(store) in json.dumps(provenance)


def test_train_resume_continues(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "m"
    base = ["train", "probe", "--data", str(store), "--out", str(out), "--device", "cpu"]
    _ok([*base, "--steps", "2"])
    _ok([*base, "--steps", "4", "--resume"])
    state = json.loads((out / "probe.state.json").read_text())
    assert state["step"] == 4


def test_eval_fidelity_json(store: Path, tiny_dir: Path, tmp_path: Path) -> None:
    video = tmp_path / "f.mp4"
    out = _ok(
        [
            "eval",
            "fidelity",
            "--model",
            str(tiny_dir),
            "--data",
            str(store),
            "--episodes",
            "2",
            "--stability-frames",
            "40",
            "--device",
            "cpu",
            "--video",
            str(video),
            "--json",
        ]
    )
    result = json.loads(out)
    assert {"recon_psnr", "recon_iou", "horizons", "stability"} <= set(result)
    assert set(result["horizons"]) == {"1", "10", "50", "100"}
    row = result["horizons"]["10"]
    assert {"psnr", "ssim", "iou", "agent_iou", "block_err_px", "angle_err_deg", "copy_iou"} <= set(
        row
    )
    # the CLI reports exactly what the reader's errors are on every 5th real frame
    from factory.eval.fidelity import reader_metrics

    direct = reader_metrics(load_model_dir(tiny_dir, device="cpu"), EpisodeStore.open(store))
    with EpisodeStore.open(store) as s:
        n_frames = sum(-(-len(s.episode(i)["action"]) // 5) for i in range(s.n_episodes))
    assert result["reader"]["frames"] == direct["frames"] == n_frames
    for key in ("block_err_px", "angle_err_deg", "agent_err_px"):
        assert result["reader"][key] == pytest.approx(direct[key], rel=1e-5)
    stability = result["stability"]
    assert stability["frames"] == 40 and stability["nan"] is False
    assert {"t_fraction_ratio", "block_found_frac"} <= set(stability)
    assert video.stat().st_size > 0


def test_missing_model_dir(store: Path, tmp_path: Path) -> None:
    _fails(["eval", "fidelity", "--model", str(tmp_path / "nope"), "--data", str(store)])


def test_foreign_model_dir(store: Path, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"format": "something-else"}))
    _fails(["eval", "fidelity", "--model", str(tmp_path), "--data", str(store)])


def test_action_dim_mismatch(store: Path, tmp_path: Path) -> None:
    model = write_tiny_model_dir(tmp_path / "m3", action_dim=3)
    _fails(["eval", "fidelity", "--model", str(model), "--data", str(store)], "action")


def test_store_without_images(tmp_path: Path, tiny_dir: Path) -> None:
    path = tmp_path / "noimg.zarr"
    schema = StoreSchema(
        keys={"action": KeySpec((2,), "float32"), "state": KeySpec((2,), "float32")}
    )
    with EpisodeStore.create(path, schema, fps=10, action_meaning="xy") as s:
        data = {"action": np.zeros((5, 2), np.float32), "state": np.zeros((5, 2), np.float32)}
        s.append_episode(data, EpisodeMeta(source="real", generator="test"))
    _fails(
        ["train", "autoencoder", "--data", str(path), "--out", str(tmp_path / "m"), "--steps", "1"],
        "image",
    )
    _fails(["eval", "fidelity", "--model", str(tiny_dir), "--data", str(path)], "image")


def test_train_bad_budget_and_stage(store: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "m")
    _fails(["train", "autoencoder", "--data", str(store), "--out", out], "--minutes")
    _fails(["train", "everything", "--data", str(store), "--out", out, "--steps", "1"], "valid")
    _fails(["train", "probe", "--data", str(store), "--out", out, "--steps", "1", "--resume"])


def test_train_mismatched_checkpoint_refused(store: Path, tmp_path: Path) -> None:
    model = write_tiny_model_dir(tmp_path / "m3", action_dim=3)
    _fails(
        ["train", "dynamics", "--data", str(store), "--out", str(model), "--steps", "1", "--resume"]
    )
