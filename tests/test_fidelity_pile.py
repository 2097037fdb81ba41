"""``factory eval fidelity`` on a pile store: the pile metrics per horizon, the reader and
the hold-still check, with known answers from stand-in models (the ground truth itself,
and the ground truth with discs drifting 2 px per step), and the CLI on model dirs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import (
    assert_one_line_error,
    write_tiny_model_dir,
    write_tiny_object_set_dir,
    write_tiny_object_state_dir,
)
from pile_stand_in import PileStandIn
from typer.testing import CliRunner

from factory.envs import pile_geometry as geo
from factory.eval.pile_permanence import HoldStillConfig, choose_hold_starts, run_hold_still
from factory.store import EpisodeStore
from pipelines.cli import app
from pipelines.eval_fidelity import FidelityRequest, model_fidelity

runner = CliRunner()
RES, CONTEXT, DRIFT = 64, 3, 2.0


def _collect(out: Path, resolution: int, episodes: int, steps: int) -> Path:
    args = ["collect", "--env", "pile", "--generator", "pile_play", "--out", str(out)]
    extra = ["--episodes", str(episodes), "--steps", str(steps), "--resolution", str(resolution)]
    result = runner.invoke(app, [*args, *extra])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 pile_play episodes of 60 steps at 64 px (top and side)."""
    return _collect(tmp_path_factory.mktemp("pile_fid") / "pile.zarr", RES, 3, 60)


def _stand_in(store: Path, drift: float = 0.0, side: bool = True) -> Iterator[PileStandIn]:
    model = PileStandIn(RES, drift, side)
    with EpisodeStore.open(store) as s:
        model.learn(s)
    yield model
    model.close()


@pytest.fixture()
def perfect(store: Path) -> Iterator[PileStandIn]:
    yield from _stand_in(store)


@pytest.fixture()
def drifting(store: Path) -> Iterator[PileStandIn]:
    yield from _stand_in(store, DRIFT)


def _fidelity(model: PileStandIn, store: Path, horizons: tuple[int, ...], **kw: Any) -> dict:
    req = FidelityRequest(data=store, episodes=3, horizons=horizons, stability_frames=0, **kw)
    result = model_fidelity(model, "stand-in", req)  # type: ignore[arg-type]
    json.dumps(result, allow_nan=False)  # valid JSON
    return result


def test_the_ground_truth_scores_every_best_value(perfect: PileStandIn, store: Path) -> None:
    """IoU 1 in both views, zero swept and disc errors, the cross-view numbers exactly
    the real frames'; at h50 the float32 start shows (under 0.1 px). The copy baseline is
    worse (the discs move), the reader is exact and held still nothing moves."""
    r = _fidelity(perfect, store, (1, 4, 10, 50), permanence_starts=4)
    assert r["world"] == "pile" and r["episodes"] == 3 and "pile_skipped" not in r
    assert r["recon_disc_iou"] == r["recon_agent_iou"] == r["recon_disc_iou_side"] == 1.0
    assert r["recon_face_bias_top"] == r["recon_face_bias_side"] == 0.0
    assert r["recon_face_count_gap"] == r["recon_real_face_count_gap"]
    for h in ("1", "4", "10"):
        row = r["horizons"][h]
        assert row["disc_iou_top"] == row["disc_iou_side"] == row["agent_iou"] == 1.0, h
        assert row["swept_err"] == 0.0 and row["disc_err_px"] < 1e-3, h
        assert row["count_gap"] == row["real_count_gap"], h
        assert row["face_count_gap"] == row["real_face_count_gap"], h
        assert row["centroid_gap_px"] == pytest.approx(row["real_centroid_gap_px"]), h
    assert r["horizons"]["10"]["copy_disc_iou_top"] < 0.9
    far = r["horizons"]["50"]
    assert far["disc_iou_top"] > 0.99 and far["disc_iou_side"] > 0.99 and far["disc_err_px"] < 0.1
    for h, row in r["horizons"].items():  # the lookup reader reads the context exactly
        assert r["horizons_read_start"][h] == pytest.approx(row), h
    reader = r["reader"]
    assert reader["disc_err_px"] == reader["agent_err_px"] == reader["swept_err"] == 0.0
    hold = r["hold_still"]
    assert hold["starts"] == 4 and hold["moved"] is False and hold["disc_drift_px_max"] == 0.0
    assert hold["disc_iou_top_100_min"] == hold["disc_iou_side_100_min"] == 1.0


def test_drifting_discs_give_errors_that_grow(drifting: PileStandIn, store: Path) -> None:
    """Discs drifting 2 px per step: disc error 2 h px while they stay farther apart than
    twice the drift, disc IoU falling with h in both views, the swept error that of the
    shifted real discs; held still, every start moves."""
    r = _fidelity(drifting, store, (1, 2, 4, 10), permanence_starts=2)
    rows = [r["horizons"][h] for h in ("1", "2", "4", "10")]
    for h, row in zip((1, 2, 4), rows, strict=False):
        assert row["disc_err_px"] == pytest.approx(DRIFT * h, abs=1e-3), h
    assert 8.0 < rows[3]["disc_err_px"] <= DRIFT * 10 + 1e-3
    for cam in ("top", "side"):
        ious = [row[f"disc_iou_{cam}"] for row in rows]
        assert ious == sorted(ious, reverse=True) and ious[0] < 1.0 and ious[-1] < 0.5, cam
    with EpisodeStore.open(store) as s:
        true = np.stack([s.episode(i)["task_state"] for i in range(3)]).astype(np.float64)
    for h, row in zip((1, 2, 4, 10), rows, strict=True):
        now = true[:, CONTEXT - 1 + h]
        shifted = now.copy()
        shifted[:, 0::2] += DRIFT * h
        expected = np.abs(geo.fraction_inside(shifted) - geo.fraction_inside(now)).mean()
        assert row["swept_err"] == pytest.approx(expected), h
    hold = r["hold_still"]
    assert hold["moved"] is True and hold["moved_frac"] == 1.0 and hold["disc_drift_px_max"] > 1


def test_hold_still_drift_is_the_drift(drifting: PileStandIn, store: Path) -> None:
    """Four held steps at 2 px per step: every start's largest disc displacement is 8 px."""
    cfg = HoldStillConfig(starts=2, steps=4, horizons=(1, 4))
    with EpisodeStore.open(store) as s:
        starts = choose_hold_starts(s, CONTEXT, cfg)
    assert starts is not None and len(starts.frames) == 2
    r = run_hold_still(drifting, starts, cfg)  # type: ignore[arg-type]
    assert r["disc_drift_px"] == pytest.approx(8.0) == r["disc_drift_px_max"]
    assert r["moved"] is True
    assert r["agent_drift_px"] < 2.0  # the context leaves it moving; it settles on the target
    assert r["disc_iou_top_1"] > r["disc_iou_top_4"]


def test_a_top_only_model_skips_the_side_metrics(store: Path) -> None:
    """A model that renders the top camera only: no side IoU and no generated cross-view
    numbers (named in pile_skipped, with why), the real frames' still reported."""
    model = next(_stand_in(store, side=False))
    r = _fidelity(model, store, (1,), permanence_starts=1)
    model.close()
    skipped = r["pile_skipped"]
    assert set(skipped) == {"disc_iou_side", "count_gap"}
    assert "top camera only" in skipped["disc_iou_side"]
    row = r["horizons"]["1"]
    assert "disc_iou_side" not in row and "count_gap" not in row
    assert row["disc_iou_top"] == 1.0 and "real_count_gap" in row
    assert not any(k.startswith("disc_iou_side") for k in r["hold_still"])
    assert "recon_disc_iou_side" not in r and "recon_face_bias_side" not in r


@pytest.fixture(scope="module")
def store32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _collect(tmp_path_factory.mktemp("pile32") / "pile.zarr", 32, 2, 20)


def test_cli_on_a_model_dir(tmp_path: Path, store32: Path) -> None:
    """A latent_grid model dir of the pile (its task head reads the 60 disc numbers) on a
    pile store: the frame and disc metrics per horizon, the side view's skipped with why
    (it renders the top camera only); text output too. One that reads 20 discs (40
    numbers) gets its disc metrics skipped with why."""
    model = write_tiny_model_dir(tmp_path / "grid", context=CONTEXT, world="pile")
    args = ["eval", "fidelity", "--model", str(model), "--data", str(store32), "--episodes", "2"]
    args += ["--horizons", "1,10", "--stability-frames", "5", "--permanence-starts", "1"]
    result = runner.invoke(app, [*args, "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["world"] == "pile" and r["kind"] == "latent_grid" and set(r["horizons"]) == {"1", "10"}
    assert set(r["pile_skipped"]) == {"disc_iou_side", "count_gap"}
    assert "top camera only" in r["pile_skipped"]["disc_iou_side"]
    keys = {"disc_iou_top", "copy_disc_iou_top", "real_count_gap", "disc_err_px", "swept_err"}
    assert keys <= set(r["horizons"]["1"])
    assert r["reader"]["reader"] == "task_head" and "disc_drift_px" in r["hold_still"]
    assert "PushT" in r["stability_skipped"] and "stability" not in r
    text = runner.invoke(app, [*args, "--device", "cpu"])
    assert text.exit_code == 0, text.output
    assert "pile store" in text.output and "disc_iou_side: not measured" in text.output
    fewer = write_tiny_model_dir(tmp_path / "g20", context=CONTEXT, world="pile", discs=20)
    args[args.index(str(model))] = str(fewer)
    result = runner.invoke(app, [*args, "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert "40 numbers, the store's 60" in r["pile_skipped"]["disc_err_px"]
    assert "drift_skipped" in r["hold_still"]


def test_cli_on_an_object_set_dir(tmp_path: Path, store32: Path) -> None:
    """A tiny object_set model dir (random sprites): the renderer's top-face counts at the
    true states and where its side layers lie are in the JSON and the text report."""
    model = write_tiny_object_set_dir(tmp_path / "set")
    args = ["eval", "fidelity", "--model", str(model), "--data", str(store32), "--episodes", "2"]
    args += ["--horizons", "1", "--permanence-starts", "0", "--device", "cpu"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    r = json.loads(result.stdout)
    assert r["recon_count_frames"] > 0 and r["recon_face_count_gap"] is not None
    layers = r["side_layers"]
    assert set(layers) == {"disc", "agent"} and all(len(v) == 1 for v in layers.values())
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "top faces at the true states" in text.output
    assert "side sprite layers" in text.output


def test_a_model_of_another_world_is_refused(tmp_path: Path, store32: Path) -> None:
    """A PushT model on a pile store, a pile model on a PushT store and a pile model of
    another disc count (its state 2 + 2 x 20 numbers, the store's 62) are each refused in
    one line, before any replay."""
    pusht_model = write_tiny_object_state_dir(tmp_path / "obj")
    pile_model = write_tiny_object_set_dir(tmp_path / "set")
    fewer = write_tiny_object_set_dir(tmp_path / "set20", n_discs=20)
    args = ["collect", "--env", "pusht", "--generator", "play", "--out", str(tmp_path / "p")]
    args += ["--episodes", "1", "--steps", "12", "--resolution", "32"]
    assert runner.invoke(app, args).exit_code == 0
    cases = [
        (pusht_model, store32, ("another world", "pile episodes", "the pusht world")),
        (pile_model, tmp_path / "p", ("another world", "pusht episodes", "the pile world")),
        (fewer, store32, ("another world", "42", "62")),
    ]
    for model, data, needles in cases:
        args = ["eval", "fidelity", "--model", str(model), "--data", str(data), "--device", "cpu"]
        assert_one_line_error(runner.invoke(app, args), *needles)
