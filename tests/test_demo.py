"""``factory demo``: generate in the model on Ray -> store -> LeRobot export -> preview."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from factories import write_tiny_model_dir
from typer.testing import CliRunner

from factory.errors import FactoryError
from factory.store import EpisodeStore
from pipelines.cli import app
from pipelines.demo import DemoConfig, run_demo


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model_dir(tmp_path_factory.mktemp("demo") / "model")


def test_demo_writes_store_export_and_preview(
    ray_session: Any, model_dir: Path, tmp_path: Path
) -> None:
    stages: set[str] = set()
    cfg = DemoConfig(out=tmp_path / "d", model=model_dir, episodes=2, steps=6, batch_size=2)
    summary = run_demo(cfg, lambda stage, *_: stages.add(stage))
    assert {"generate (Ray)", "export LeRobot", "preview"} <= stages
    with EpisodeStore.open(Path(summary["store"])) as store:
        assert store.n_episodes == 2
        metas = store.all_meta()
        assert {m.generator for m in metas} == {"expert"}
        assert all(m.model_id == summary["model_id"] for m in metas)
        frames = store.n_frames
    info = json.loads((Path(summary["lerobot"]) / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 2 and info["total_frames"] == frames
    preview = Path(summary["preview"])
    assert preview.stat().st_size > 0
    import imageio.v3 as iio

    video = iio.imread(preview)
    assert video.shape[0] == frames and video.shape[-1] == 3
    strip = video[:, :12].reshape(len(video), -1).mean(axis=1)
    assert (strip < 80).all()  # every frame carries the dark text strip with its score
    saved = json.loads((tmp_path / "d" / "summary.json").read_text())
    assert saved == summary
    note = summary["preview_shows"]
    assert "of 2 episodes" in note and f"{summary['model_successes']} of 2" in note
    assert f"factory eval transfer {summary['store']}" in note


def test_demo_refuses_a_non_empty_folder(model_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("keep me")
    with pytest.raises(FactoryError, match="not empty"):
        run_demo(DemoConfig(out=tmp_path / "d", model=model_dir))
    assert (tmp_path / "d" / "x").read_text() == "keep me"


def test_cli_demo_without_a_model_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["demo", "--out", str(tmp_path / "d"), "--model", str(tmp_path / "none")]
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
