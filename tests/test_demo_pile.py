"""``factory demo --env pile``: the pile expert inside an object_set model on Ray -> a store
of both cameras -> a LeRobot export of both -> a preview of both side by side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import assert_one_line_error, write_tiny_model_dir, write_tiny_object_set_dir
from typer.testing import CliRunner

from factory.envs.pile import PileWorld, pile_spec
from factory.errors import FactoryError
from factory.generators import make_generator
from factory.model import files
from factory.record import EpisodeRunner, EpisodeSpec, open_output
from factory.store import EpisodeStore
from factory.view.png import beside
from pipelines.cli import app
from pipelines.demo import DEMO_ENVS, DemoConfig, run_demo
from pipelines.preview import SCALE, write_preview

RES = 32
runner = CliRunner()


@pytest.fixture(scope="module")
def pile_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_object_set_dir(tmp_path_factory.mktemp("pile") / "model")


@pytest.fixture(scope="module")
def pusht_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model_dir(tmp_path_factory.mktemp("pusht") / "model")


def test_pile_demo_writes_both_cameras_everywhere(
    ray_session: Any, pile_model: Path, tmp_path: Path
) -> None:
    cfg = DemoConfig(out=tmp_path / "d", model=pile_model, env="pile", episodes=2, steps=6)
    summary = run_demo(cfg)
    assert summary["env"] == "pile" and summary["repo_id"] == "local/demofactory_pile"
    assert summary["cameras"] == ["observation.images.top", "observation.images.side"]
    with EpisodeStore.open(Path(summary["store"])) as store:
        assert store.n_episodes == 2 and store.attrs["cameras"] == ["top", "side"]
        assert {m.generator for m in store.all_meta()} == {"pile_expert"}
        assert store.schema.keys["image_side"].shape == (RES, RES, 3)
        frames = store.n_frames
    info = json.loads((Path(summary["lerobot"]) / "meta" / "info.json").read_text())
    assert info["total_frames"] == frames
    for cam in summary["cameras"]:
        assert info["features"][cam]["shape"] == [RES, RES, 3]
    import imageio.v3 as iio

    video = iio.imread(Path(summary["preview"]))
    assert video.shape == (frames, RES * SCALE, (2 * RES + 2) * SCALE, 3)  # two views wide
    assert json.loads((tmp_path / "d" / "summary.json").read_text()) == summary
    note = summary["preview_shows"]
    assert "top and side views side by side" in note and "fraction of discs" in note


def _real_pile_store(path: Path) -> Path:
    """Two short pile_play episodes recorded in the real pile env (both cameras)."""
    world = PileWorld(1, RES)
    with open_output(path, pile_spec(RES), RES, append=False) as store:
        for seed in (0, 1):
            (ep,) = EpisodeRunner(world, source="real").run(
                [make_generator("pile_play")], [EpisodeSpec(seed, 4)]
            )
            store.append_episode(ep.data, ep.meta)
    world.close()
    return path


def test_preview_frames_are_both_views_side_by_side(tmp_path: Path) -> None:
    """Below its text strip a preview frame is the top view, a white gap, then the side
    view, each scaled SCALE times (a GIF: no lossy codec between)."""
    store_path = _real_pile_store(tmp_path / "real.zarr")
    out = write_preview(store_path, tmp_path / "p.gif", episodes=2)
    import imageio.v3 as iio

    video = iio.imread(out)
    with EpisodeStore.open(store_path) as store:
        ep = store.episode(0)
        want = beside([np.asarray(ep["image"]), np.asarray(ep["image_side"])])
        n = store.n_frames
    want = want.repeat(SCALE, axis=1).repeat(SCALE, axis=2)
    assert video.shape == (n, *want.shape[1:])
    body = slice(15, None)  # below the text strip
    got = video[: len(want), body].astype(np.int16)
    assert np.abs(got - want[:, body]).mean() < 1.0
    top_width = RES * SCALE
    assert (video[:, body, top_width : top_width + 2 * SCALE] > 240).all()  # the white gap


def test_demo_refuses_a_model_of_another_world(
    pile_model: Path, pusht_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "d"
    pile_with_pusht = ["demo", "--env", "pile", "--model", str(pusht_model), "--out", str(out)]
    assert_one_line_error(runner.invoke(app, pile_with_pusht), "pusht world, not pile")
    pusht_with_pile = ["demo", "--model", str(pile_model), "--out", str(out)]
    assert_one_line_error(runner.invoke(app, pusht_with_pile), "pile world, not pusht")
    assert not out.exists()


def test_a_missing_shipped_pile_model_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(files.SHIPPED_MODELS, "pile", tmp_path / "models" / "pile")
    out = tmp_path / "d"
    result = runner.invoke(app, ["demo", "--env", "pile", "--out", str(out)])
    assert_one_line_error(result, "no shipped pile model", "--model", "factory train all")
    assert not out.exists()
    assert files.shipped_model("pusht") == files.DEFAULT_MODEL  # the PushT default as it was


def test_an_unknown_env_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FactoryError, match="valid: pile, pusht"):
        run_demo(DemoConfig(out=tmp_path / "d", env="mars"))
    assert not (tmp_path / "d").exists()


def test_a_refused_demo_prints_one_line_and_no_bar(pusht_model: Path, tmp_path: Path) -> None:
    """In a real process, with a stderr that is not a terminal: the model of another world
    is refused before the progress bar opens, so stderr is the error line alone."""
    factory = Path(sys.executable).parent / "factory"
    out = tmp_path / "d"
    args = [str(factory), "demo", "--env", "pile", "--model", str(pusht_model), "--out", str(out)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [proc.stderr.strip()], repr(proc.stderr)
    assert proc.stderr.startswith("error: ") and "not pile" in proc.stderr
    assert not out.exists()


def test_the_pile_steps_default_lets_the_real_expert_finish() -> None:
    """The demo's first seeds, in the real pile env: the pile expert succeeds within the
    default steps, and stops there (the cap only costs time on failures)."""
    steps = DEMO_ENVS["pile"].steps
    world = PileWorld(2, RES)
    specs = [EpisodeSpec(seed, steps, stop_on_success=True) for seed in (0, 1)]
    episodes = EpisodeRunner(world, source="real").run(
        [make_generator("pile_expert") for _ in specs], specs
    )
    world.close()
    assert all(ep.meta.success for ep in episodes)
    assert all(len(ep.data["action"]) < steps for ep in episodes)
