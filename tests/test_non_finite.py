"""A store with a NaN in it is refused in one line, naming the episode, before any work:
by the replays (eval fidelity, eval predictability), by training and by the export. A
NaN would otherwise flow into every metric, every weight or the dataset a policy learns."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from factories import assert_one_line_error, write_tiny_object_set_dir
from typer.testing import CliRunner

from pipelines.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A clean pile store (2 episodes of 20 steps at 32 px) and copies with a NaN in
    episode 1's actions and in episode 0's disc positions."""
    base = tmp_path_factory.mktemp("nan")
    clean = base / "clean.zarr"
    args = ["collect", "--env", "pile", "--generator", "pile_play", "--out", str(clean)]
    result = runner.invoke(app, [*args, "--episodes", "2", "--steps", "20", "--resolution", "32"])
    assert result.exit_code == 0, result.output
    out = {"clean": clean}
    for name, key, frame in (("action", "action", 25), ("task_state", "task_state", 3)):
        path = base / f"nan_{name}.zarr"
        shutil.copytree(clean, path)
        arr = zarr.open_group(str(path), mode="r+")[f"data/{key}"]
        values = arr[:]
        values[frame, 0] = np.nan
        arr[:] = values
        out[name] = path
    return out


def test_replays_refuse_a_nan(tmp_path: Path, stores: dict[str, Path]) -> None:
    model = write_tiny_object_set_dir(tmp_path / "set")
    fid = ["eval", "fidelity", "--model", str(model), "--device", "cpu", "--horizons", "1,10"]
    bad = runner.invoke(app, [*fid, "--data", str(stores["action"])])
    assert_one_line_error(bad, "episode(s) [1]", "non-finite action")
    bad = runner.invoke(app, [*fid, "--data", str(stores["task_state"])])
    assert_one_line_error(bad, "episode(s) [0]", "non-finite task_state")
    bad = runner.invoke(app, ["eval", "predictability", "--data", str(stores["action"])])
    assert_one_line_error(bad, "episode(s) [1]", "non-finite action")


def test_training_refuses_a_nan(tmp_path: Path, stores: dict[str, Path]) -> None:
    for name in ("action", "task_state"):
        out = tmp_path / name
        args = ["train", "dynamics", "--kind", "object_set", "--data", str(stores[name])]
        bad = runner.invoke(app, [*args, "--out", str(out), "--steps", "2", "--device", "cpu"])
        assert_one_line_error(bad, f"non-finite {name}", "cannot train a model")
        assert not out.exists()


def test_the_export_refuses_a_nan_and_exports_the_rest(
    tmp_path: Path, stores: dict[str, Path]
) -> None:
    out = tmp_path / "ds"
    args = ["export", "lerobot", str(stores["action"]), str(out), "--repo-id", "local/nan"]
    assert_one_line_error(runner.invoke(app, args), "episode(s) 1", "non-finite action")
    assert not out.exists()
    ok = runner.invoke(app, [*args, "--episodes", "0"])
    assert ok.exit_code == 0, ok.output
    assert out.exists()


def test_non_finite_frames_map_to_their_episodes() -> None:
    """Frames 0..4 are episode 0, 5..6 episode 1, 7..9 episode 2 (ends 5, 7, 10): a NaN at
    each episode's first and last frame names that episode, an inf too; finite: none."""
    from factory.store.finite import non_finite_episodes, shown

    ends = np.array([5, 7, 10])
    values = np.zeros((10, 2), np.float32)
    assert non_finite_episodes(values, ends) == []
    for frame, episode in ((0, 0), (4, 0), (5, 1), (6, 1), (7, 2), (9, 2)):
        bad = values.copy()
        bad[frame, 1] = np.nan if frame % 2 else np.inf
        assert non_finite_episodes(bad, ends) == [episode], frame
    values[[4, 9]] = np.nan
    assert non_finite_episodes(values, ends) == [0, 2]
    assert shown(list(range(12))) == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 ..."
