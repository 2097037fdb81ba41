"""``factory eval predictability``: the real world replayed from a jittered start, scored
with the fidelity metrics. Known answers: jitter 0 replays exactly; a larger jitter
drifts more; stores that cannot be replayed in the real world are refused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from factories import assert_one_line_error
from typer.testing import CliRunner

from factory.eval.predictability import jittered_starts, run_predictability
from factory.store import EpisodeStore
from pipelines.cli import app

runner = CliRunner()


def _collect(out: Path, env: str, generator: str, *extra: str) -> Path:
    args = ["collect", "--env", env, "--generator", generator, "--out", str(out)]
    args += ["--episodes", "3", "--resolution", "64", *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def pile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 pile_play episodes of 40 steps at 64 px (top and side)."""
    return _collect(
        tmp_path_factory.mktemp("pred") / "pile.zarr", "pile", "pile_play", "--steps", "40"
    )


def test_jitter_zero_replays_exactly_and_jitter_drifts(pile: Path) -> None:
    """Jitter 0 lands on the stored episode (IoU 1, no disc error; by h30 the float32
    rounding of the stored start may show, under 0.1 px); 0.5 px of start jitter shows as
    disc error from the first step and lowers the IoU, more than 0.05 px does."""
    r = run_predictability(pile, (0.0, 0.05, 0.5), episodes=3, horizons=(1, 10, 30))
    json.dumps(r, allow_nan=False)
    assert r["world"] == "pile" and r["episodes"] == 3 and r["reproduced_px"] < 1e-3
    exact, small, large = (r["references"][k] for k in ("0", "0.05", "0.5"))
    for h in ("1", "10"):
        assert exact[h]["disc_iou_top"] == exact[h]["disc_iou_side"] == 1.0, h
        assert exact[h]["disc_err_px"] < 1e-3, h
        assert exact[h]["count_gap"] == exact[h]["real_count_gap"], h
    assert exact["30"]["disc_err_px"] < 0.1 and exact["30"]["disc_iou_top"] > 0.99
    assert 0.1 < large["1"]["disc_err_px"] < 1.5  # about 0.5 sqrt(pi / 2) at the start
    assert small["1"]["disc_err_px"] < large["1"]["disc_err_px"] / 4
    assert large["30"]["disc_iou_top"] < small["30"]["disc_iou_top"] <= 1.0


def test_pusht_store_replays_too(tmp_path: Path) -> None:
    """PushT: jitter 0 reproduces the block; jitter moves the block's position."""
    store = _collect(tmp_path / "pusht.zarr", "pusht", "play", "--steps", "30")
    r = run_predictability(store, (0.0, 1.0), episodes=2, horizons=(1, 20))
    assert r["world"] == "pusht" and r["episodes"] == 2
    assert r["references"]["0"]["20"]["block_err_px"] < 1e-2
    assert r["references"]["1"]["1"]["block_err_px"] > 0.1


def test_jitter_moves_positions_only() -> None:
    """PushT's block angle and the agent are never jittered; the pile's every disc is."""
    rng = np.random.default_rng(0)
    states = np.full((4, 5), 100.0)
    out = jittered_starts(states, "pusht", 1.0, rng)
    assert np.all(out[:, [0, 1, 4]] == 100.0) and np.all(out[:, 2:4] != 100.0)
    pile = jittered_starts(np.full((4, 8), 100.0), "pile", 1.0, rng)
    assert np.all(pile[:, :2] == 100.0) and np.all(pile[:, 2:] != 100.0)


def test_cli_json_and_refusals(pile: Path, tmp_path: Path) -> None:
    """The CLI prints one JSON object; a store whose actions do not replay its episodes
    (here its first actions were changed), one recorded inside a model, a missing path
    and a bad --jitter get one line and exit 2."""
    args = ["eval", "predictability", "--data", str(pile), "--episodes", "2"]
    ok = runner.invoke(app, [*args, "--horizons", "1,10", "--jitter", "0.1", "--json"])
    assert ok.exit_code == 0, ok.output
    assert set(json.loads(ok.stdout)["references"]) == {"0.1"}
    table = runner.invoke(app, [*args, "--horizons", "1", "--jitter", "0,0.1"])
    assert table.exit_code == 0, table.output
    assert "start jitter 0 px" in table.output and "start jitter 0.1 px" in table.output
    edited = _collect(tmp_path / "edited.zarr", "pile", "pile_play", "--steps", "20")
    group = zarr.open_group(str(edited), mode="r+")
    group["data/action"][0] = group["data/action"][0] + 3.0
    bad = runner.invoke(app, ["eval", "predictability", "--data", str(edited), "--horizons", "1"])
    assert_one_line_error(bad, "lands", "executed actions")
    group.attrs["env"] = "pile-model"
    bad = runner.invoke(app, ["eval", "predictability", "--data", str(edited)])
    assert_one_line_error(bad, "recorded inside a model")
    bad = runner.invoke(app, ["eval", "predictability", "--data", str(tmp_path / "no.zarr")])
    assert_one_line_error(bad, "does not exist")
    for jitter in ("-1", "x", "inf"):
        bad = runner.invoke(app, [*args, "--jitter", jitter])
        assert_one_line_error(bad, "--jitter")


def test_a_store_generated_inside_a_model_is_refused(pile: Path, tmp_path: Path) -> None:
    """`factory generate` records its world's name (here pile), but its episodes are the
    model's (meta source ``world_model``), which the real world does not replay: one
    line, exit 2. The store is the collected one's episodes with that provenance."""
    out = tmp_path / "gen.zarr"
    with EpisodeStore.open(pile) as src:
        attrs = {**src.attrs}
        kw = {"fps": src.fps, "action_meaning": src.action_meaning, "attrs": attrs}
        with EpisodeStore.create(out, src.schema, **kw) as dst:
            for ep in list(src)[:2]:
                meta = dataclasses.replace(ep.meta, source="world_model", model_id="m")
                dst.append_episode({k: np.asarray(ep[k]) for k in src.schema.keys}, meta)
    bad = runner.invoke(app, ["eval", "predictability", "--data", str(out)])
    assert_one_line_error(bad, "2 episodes generated inside a model", "factory collect")
