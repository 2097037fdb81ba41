"""``bench/zero_real_seeds.py``: the spread of M - R over several runs of the experiment."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import zero_real_seeds as zrs


def write_run(path: Path, r: float, g: float, m: float, seed: int, n: int = 100) -> Path:
    res = {
        "config": {"train_seed": seed, "n": n},
        "arms": {
            "state": {
                "real_success": {"R": r, "G": g, "M": m},
                "model_success": {"R": r - 0.1, "G": g, "M": m},
            }
        },
    }
    path.write_text(json.dumps(res))
    return path


def test_spread_is_the_t_interval_over_runs() -> None:
    """Three runs of M - R: 0.1, 0.0, -0.05: mean 0.0167, sd 0.0764, se 0.0441, and the
    interval is mean +- 4.303 se (t with 2 degrees of freedom)."""
    s = zrs.spread([0.1, 0.0, -0.05])
    assert s["mean"] == pytest.approx(0.0167, abs=1e-4)
    assert s["sd"] == pytest.approx(0.0764, abs=1e-4)
    assert s["se"] == pytest.approx(0.0441, abs=1e-4)
    lo, hi = s["ci95"]
    assert lo == pytest.approx(0.0167 - 4.303 * 0.0441, abs=2e-4)
    assert hi == pytest.approx(0.0167 + 4.303 * 0.0441, abs=2e-4)
    assert zrs.spread([0.3])["ci95"] is None


def test_t_quantile_beyond_the_table_is_close_to_the_true_one() -> None:
    assert zrs.t975(2) == 4.303
    assert zrs.t975(30) == 2.042
    assert zrs.t975(40) == pytest.approx(2.021, abs=0.005)
    assert zrs.t975(120) == pytest.approx(1.980, abs=0.005)


def test_runs_are_summarised_per_family(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = write_run(tmp_path / "a.json", 0.78, 0.76, 0.68, 1000)
    b = write_run(tmp_path / "b.json", 0.70, 0.74, 0.80, 1001)
    assert zrs.main([str(a), str(b), "--labels", "s1000,s1001"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["train_seed"] for r in out["runs"]] == [1000, 1001]
    summ = out["summary"]
    assert summ["mean_real_success"] == {"R": 0.74, "G": 0.75, "M": 0.74}
    assert summ["m_minus_r"]["per_run"] == [-0.1, 0.1]
    assert summ["m_minus_r"]["runs_m_at_least_r"] == 1
    assert summ["g_minus_r"]["runs_g_at_least_r"] == 1


def test_a_file_that_is_not_a_run_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    good = write_run(tmp_path / "a.json", 0.78, 0.76, 0.68, 1000)
    bad = tmp_path / "b.json"
    bad.write_text(json.dumps({"arms": {}}))
    assert zrs.main([str(good), str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a zero_real_data results JSON" in err[0]
    assert zrs.main([str(good), "--labels", "x,y"]) == 2
    assert zrs.main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    other_n = write_run(tmp_path / "c.json", 0.5, 0.5, 0.5, 1001, n=30)
    assert zrs.main([str(good), str(other_n)]) == 2
    assert "differ in N" in capsys.readouterr().err
