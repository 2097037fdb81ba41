"""CLI: ``factory collect`` and ``factory inspect``, good and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from factories import assert_one_line_error
from typer.testing import CliRunner

from factory.store import EpisodeStore
from pipelines.cli import app

runner = CliRunner()
RES = "32"


def _collect(out: Path, *extra: str) -> object:
    args = ["collect", "--out", str(out), "--steps", "12", "--resolution", RES, *extra]
    return runner.invoke(app, args)


@pytest.fixture(scope="module")
def play_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "play.zarr"
    result = _collect(out, "--episodes", "3", "--generator", "play")
    assert result.exit_code == 0, result.output
    return out


def test_collect_then_inspect_json(play_store: Path) -> None:
    result = runner.invoke(app, ["inspect", str(play_store), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert {"episodes", "frames", "fps", "keys", "successes"} <= set(summary)
    assert summary["episodes"] == 3
    assert summary["frames"] == 36
    assert summary["fps"] == 10
    assert summary["keys"]["image"]["shape"] == [36, 32, 32, 3]
    assert summary["keys"]["action"]["dtype"] == "float32"


def test_inspect_human_readable(play_store: Path) -> None:
    result = runner.invoke(app, ["inspect", str(play_store)])
    assert result.exit_code == 0, result.output
    assert "episodes 3" in result.stdout and "image" in result.stdout


def test_append_resumes_without_duplicates(tmp_path: Path) -> None:
    out = tmp_path / "s.zarr"
    assert _collect(out, "--episodes", "2").exit_code == 0
    with EpisodeStore.open(out) as store:
        first = store.episode(1)["image"].copy()
    result = _collect(out, "--episodes", "4", "--append")
    assert result.exit_code == 0, result.output
    with EpisodeStore.open(out) as store:
        seeds = [m.seed for m in store.all_meta()]
        assert seeds == [0, 1, 2, 3]
        np.testing.assert_array_equal(store.episode(1)["image"], first)
    # A new seed range adds new episodes.
    assert _collect(out, "--episodes", "1", "--seed", "10", "--append").exit_code == 0
    with EpisodeStore.open(out) as store:
        assert [m.seed for m in store.all_meta()] == [0, 1, 2, 3, 10]


def test_seeded_collect_is_reproducible(tmp_path: Path, play_store: Path) -> None:
    out = tmp_path / "again.zarr"
    assert _collect(out, "--episodes", "3", "--generator", "play").exit_code == 0
    with EpisodeStore.open(out) as a, EpisodeStore.open(play_store) as b:
        for i in range(3):
            for key in ("image", "action", "state", "task_state"):
                np.testing.assert_array_equal(a.episode(i)[key], b.episode(i)[key])


def test_two_workers_match_one(tmp_path: Path, play_store: Path) -> None:
    out = tmp_path / "w2.zarr"
    result = _collect(out, "--episodes", "3", "--generator", "play", "--workers", "2")
    assert result.exit_code == 0, result.output
    with EpisodeStore.open(out) as a, EpisodeStore.open(play_store) as b:
        assert a.n_episodes == 3
        for i in range(3):
            np.testing.assert_array_equal(a.episode(i)["image"], b.episode(i)["image"])


def test_replay_reproduces_source(tmp_path: Path, play_store: Path) -> None:
    out = tmp_path / "replay.zarr"
    result = _collect(out, "--episodes", "2", "--generator", "replay", "--source", str(play_store))
    assert result.exit_code == 0, result.output
    with EpisodeStore.open(out) as a, EpisodeStore.open(play_store) as b:
        for i in range(2):
            np.testing.assert_array_equal(a.episode(i)["action"], b.episode(i)["action"])
            np.testing.assert_array_equal(a.episode(i)["image"], b.episode(i)["image"])


def test_existing_output_without_append(play_store: Path) -> None:
    assert_one_line_error(_collect(play_store, "--episodes", "1"), "--append")


def test_append_other_resolution_refused(play_store: Path) -> None:
    before = EpisodeStore.open(play_store).n_frames
    result = runner.invoke(
        app,
        ["collect", "--out", str(play_store), "--episodes", "4", "--resolution", "48", "--append"],
    )
    assert_one_line_error(result, "(48, 48, 3)")
    assert EpisodeStore.open(play_store).n_frames == before


@pytest.mark.parametrize("n", ["0", "-3"])
def test_non_positive_episodes(tmp_path: Path, n: str) -> None:
    assert_one_line_error(_collect(tmp_path / "x.zarr", "--episodes", n), "--episodes")
    assert not (tmp_path / "x.zarr").exists()


def test_unknown_env_lists_valid(tmp_path: Path) -> None:
    assert_one_line_error(_collect(tmp_path / "x.zarr", "--env", "mars"), "mars", "pusht")


def test_unknown_generator_lists_valid(tmp_path: Path) -> None:
    assert_one_line_error(
        _collect(tmp_path / "x.zarr", "--generator", "telepathy"), "expert", "play"
    )


def test_param_sets_a_generator_knob(tmp_path: Path) -> None:
    speeds = {}
    for limit in ("40", "8"):  # play's per-step cursor speed limit (px): the default, and 8
        out = tmp_path / f"p{limit}.zarr"
        args = ["--episodes", "2", "--generator", "play", "--param", f"max_speed={limit}"]
        assert _collect(out, *args).exit_code == 0
        with EpisodeStore.open(out) as store:
            assert store.all_meta()[0].generator_params["max_speed"] == float(limit)
            speeds[limit] = np.linalg.norm(np.diff(store.load()["action"], axis=0), axis=1)
    assert np.median(speeds["8"]) < 0.5 * np.median(speeds["40"])  # (diffs span episodes)


@pytest.mark.parametrize(
    ("param", "needle"), [("warp=3", "warp"), ("max_speed", "KEY=VALUE"), ("max_speed=x", "number")]
)
def test_bad_param_is_one_line(tmp_path: Path, param: str, needle: str) -> None:
    out = tmp_path / "x.zarr"
    assert_one_line_error(_collect(out, "--generator", "play", "--param", param), needle)
    assert not out.exists()


def test_replay_without_source(tmp_path: Path) -> None:
    assert_one_line_error(_collect(tmp_path / "x.zarr", "--generator", "replay"), "--source")


def test_second_writer_refused(play_store: Path) -> None:
    with EpisodeStore.open(play_store, mode="a"):
        result = _collect(play_store, "--episodes", "5", "--append")
    assert_one_line_error(result)
    with EpisodeStore.open(play_store) as store:
        assert store.n_episodes == 3


def test_inspect_missing_and_corrupt(tmp_path: Path) -> None:
    assert_one_line_error(runner.invoke(app, ["inspect", str(tmp_path / "nope.zarr")]))
    corrupt = tmp_path / "corrupt.zarr"
    corrupt.mkdir()
    (corrupt / "zarr.json").write_text("{not json")
    assert_one_line_error(runner.invoke(app, ["inspect", str(corrupt)]))


def test_cli_process_exit_code_and_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "inspect", str(tmp_path / "missing.zarr")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
