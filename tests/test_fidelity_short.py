"""``factory eval fidelity`` on short episodes: the horizons that fit, each on the episodes
long enough for it, with known answers from the same episodes in a long store."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from factories import assert_one_line_error, write_tiny_model_dir, write_tiny_object_state_dir
from typer.testing import CliRunner

from factory.envs.pusht import pusht_spec
from factory.eval.fidelity import (
    HORIZONS,
    horizon_metrics,
    parse_horizons,
    plan_replay,
    replay_set,
    rollout_replay,
)
from factory.model import load_model_dir
from factory.record import open_output
from factory.store import EpisodeStore
from pipelines.cli import app

runner = CliRunner()
CONTEXT = 3  # the tiny models' context


def _ok(args: list[str]) -> dict[str, Any]:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def _truncated(src: Path, out: Path, lengths: Sequence[int | None]) -> Path:
    """A copy of ``src`` whose episode i keeps its first ``lengths[i]`` steps (None: all)."""
    with EpisodeStore.open(src) as store, open_output(out, pusht_spec(32), 32, False) as dst:
        for i, n in enumerate(lengths):
            ep = store.episode(i)
            dst.append_episode({k: v[:n] for k, v in ep.to_dict().items()}, ep.meta)
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """long: 3 collected episodes of 110 steps; short: the same, cut to 40 steps; mixed:
    only the middle one cut."""
    root = tmp_path_factory.mktemp("fid_short")
    long = root / "long.zarr"
    args = ["collect", "--out", str(long), "--episodes", "3", "--steps", "110"]
    result = runner.invoke(app, [*args, "--resolution", "32"])
    assert result.exit_code == 0, result.output
    with EpisodeStore.open(long) as s:
        assert s.episode_lengths.tolist() == [110, 110, 110]
    return {
        "long": long,
        "short": _truncated(long, root / "short.zarr", [40, 40, 40]),
        "mixed": _truncated(long, root / "mixed.zarr", [None, 40, None]),
    }


@pytest.fixture(scope="module")
def grid_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model_dir(tmp_path_factory.mktemp("grid") / "model", context=CONTEXT)


@pytest.fixture(scope="module")
def obj_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_object_state_dir(tmp_path_factory.mktemp("obj") / "model")


def _fidelity(model: Path, data: Path, *extra: str) -> dict[str, Any]:
    args = ["eval", "fidelity", "--model", str(model), "--data", str(data), "--episodes", "3"]
    return _ok([*args, "--device", "cpu", "--json", *extra])


def test_short_store_scores_the_horizons_that_fit(grid_dir: Path, stores: dict[str, Path]) -> None:
    """40-step episodes with --horizons 1,10,50: horizons 1 and 10 on all three episodes,
    50 skipped with the reason; the h1/h10 rows are exactly those of the same episodes
    uncut (the replay is causal, so steps past 10 cannot change them)."""
    extra = ("--stability-frames", "20", "--permanence-starts", "2")
    short = _fidelity(grid_dir, stores["short"], "--horizons", "1,10,50", *extra)
    assert set(short["horizons"]) == {"1", "10"}
    assert [short["horizons"][h]["episodes"] for h in ("1", "10")] == [3, 3]
    assert set(short["horizons_skipped"]) == {"50"}
    assert "no episode of at least 53 steps" in short["horizons_skipped"]["50"]
    assert "the longest has 40" in short["horizons_skipped"]["50"]
    assert short["episodes"] == 3 and short["stability"]["frames"] == 20
    perm = short["permanence"]
    assert perm["starts"] > 0 or "agent clear of a block at rest" in perm["skipped"]

    long = _fidelity(grid_dir, stores["long"], "--stability-frames", "0")
    assert set(long["horizons"]) == {"1", "10", "50", "100"} and "horizons_skipped" not in long
    for h in ("1", "10"):
        assert short["horizons"][h] == pytest.approx(long["horizons"][h], rel=1e-6), h


def test_mixed_lengths_score_each_horizon_on_the_episodes_that_reach_it(
    obj_dir: Path, stores: dict[str, Path]
) -> None:
    """Episodes of 110, 40 and 110 steps: the 40-step one is replayed to horizon 10 only.
    h50/h100 are scored on the two long ones and equal their replay alone; h1/h10 on all
    three equal the long store's (the object_state rollout is row-independent)."""
    model = load_model_dir(obj_dir, device="cpu")
    with EpisodeStore.open(stores["mixed"]) as s:
        plan = plan_replay(s, 16, CONTEXT, HORIZONS)
    assert list(plan.groups) == [100, 10]
    assert plan.episodes == {1: 3, 10: 3, 50: 2, 100: 2} and plan.skipped == {}
    mixed = horizon_metrics([(rs, rollout_replay(model, rs)) for rs in plan.groups.values()])
    with EpisodeStore.open(stores["long"]) as s:
        pair = replay_set(s, [0, 2], CONTEXT, 100)
        every = replay_set(s, 3, CONTEXT, 100)
    two = horizon_metrics([(pair, rollout_replay(model, pair))])
    three = horizon_metrics([(every, rollout_replay(model, every))])
    for h in ("50", "100"):
        assert mixed[h]["episodes"] == two[h]["episodes"] == 2
        assert mixed[h] == pytest.approx(two[h], rel=1e-6), h
    for h in ("1", "10"):
        assert mixed[h]["episodes"] == 3
        assert mixed[h] == pytest.approx(three[h], rel=1e-5, abs=1e-6), h


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # its random agent
def test_read_start_follows_the_horizons(obj_dir: Path, stores: dict[str, Path]) -> None:
    """An object_state model's second replay (from the reader's reading) scores the same
    horizons on the same episodes; the copy-last baseline is the same real frames."""
    extra = ("--horizons", "10,1,50", "--stability-frames", "0", "--permanence-starts", "0")
    r = _fidelity(obj_dir, stores["short"], *extra)
    assert set(r["horizons"]) == set(r["horizons_read_start"]) == {"1", "10"}
    assert set(r["horizons_skipped"]) == {"50"} and "permanence" not in r
    for h in ("1", "10"):
        exact, read = r["horizons"][h], r["horizons_read_start"][h]
        assert exact["episodes"] == read["episodes"] == 3
        assert exact["copy_iou"] == read["copy_iou"] and exact["copy_psnr"] == read["copy_psnr"]


@pytest.mark.parametrize("bad", ["0", "-5", "ten", "1,,10", "1.5", ""])
def test_bad_horizons_are_refused(bad: str, grid_dir: Path, stores: dict[str, Path]) -> None:
    args = ["eval", "fidelity", "--model", str(grid_dir), "--data", str(stores["short"])]
    assert_one_line_error(runner.invoke(app, [*args, f"--horizons={bad}"]), "--horizons")


def test_no_horizon_fits_is_refused(grid_dir: Path, stores: dict[str, Path]) -> None:
    args = ["eval", "fidelity", "--model", str(grid_dir), "--data", str(stores["short"])]
    result = runner.invoke(app, [*args, "--horizons", "50,100", "--device", "cpu"])
    assert_one_line_error(result, "no episode of at least 53 steps", "the longest has 40")


def test_parse_horizons() -> None:
    assert parse_horizons("1,10,50") == (1, 10, 50)
    assert parse_horizons(" 50, 1 ,10,1") == (1, 10, 50)  # sorted, each once


def test_a_store_of_an_unknown_env_is_scored(
    grid_dir: Path, stores: dict[str, Path], tmp_path: Path
) -> None:
    """A store whose env is no world of ours (an imported dataset's robot, here
    ``lerobot``) is not refused as another world: its shapes decide, and these fit."""
    import shutil

    import zarr

    data = tmp_path / "imported.zarr"
    shutil.copytree(stores["short"], data)
    zarr.open_group(str(data), mode="r+").attrs["env"] = "lerobot"
    with EpisodeStore.open(data) as store:
        assert store.attrs["env"] == "lerobot"
    r = _fidelity(grid_dir, data, "--horizons", "1,10", "--permanence-starts", "0",
                  "--stability-frames", "0")  # fmt: skip
    assert set(r["horizons"]) == {"1", "10"}
