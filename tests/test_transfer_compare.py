"""``bench/transfer_compare.py``: two models' open-loop transfer paired seed by seed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import transfer_compare as tc  # noqa: E402


def write(path: Path, rows: list[tuple[int, bool, bool, int]]) -> str:
    """A transfer JSON with rows (seed, model_success, real_success, steps)."""
    per = [{"seed": s, "model_success": m, "real_success": r, "steps": t} for s, m, r, t in rows]
    path.write_text(json.dumps({"per_episode": per}))
    return str(path)


def test_pairs_by_seed_over_both_models_successes(tmp_path: Path) -> None:
    a = write(
        tmp_path / "a.json",
        [(1, True, True, 10), (2, True, False, 20), (3, True, False, 30), (4, False, False, 40)],
    )
    b = write(
        tmp_path / "b.json",
        [(1, True, True, 12), (2, True, True, 22), (3, True, True, 32), (4, True, True, 42)],
    )
    out = tc.compare(tc.episodes([a]), tc.episodes([b]))
    # seed 4: model A did not read success, so it is not paired
    assert out["paired"] == 3 and out["seeds_common"] == 4
    assert (out["both"], out["only_a"], out["only_b"], out["neither"]) == (1, 0, 2, 0)
    assert out["transfer_a"] == pytest.approx(1 / 3) and out["transfer_b"] == 1.0
    assert out["b_minus_a"] == pytest.approx(2 / 3)
    assert out["mcnemar_p"] == pytest.approx(0.5)  # 2 of 2 discordant one way: 2 * 1/4
    assert out["median_steps_b"] == 22.0


def test_exact_binomial_matches_known_values() -> None:
    assert tc.binomial_two_sided(0, 0) == 1.0
    assert tc.binomial_two_sided(5, 10) == 1.0
    # 1 of 10 one way: 2 * (1 + 10) / 1024
    assert tc.binomial_two_sided(1, 10) == pytest.approx(22 / 1024)
    assert tc.binomial_two_sided(9, 10) == pytest.approx(22 / 1024)


def test_pools_files_and_refuses_a_repeated_seed(tmp_path: Path) -> None:
    a1 = write(tmp_path / "a1.json", [(1, True, True, 1)])
    a2 = write(tmp_path / "a2.json", [(2, True, False, 1)])
    assert sorted(tc.episodes([a1, a2])) == [1, 2]
    with pytest.raises(ValueError, match="appears twice"):
        tc.episodes([a1, a1])
    # an unseeded episode (reset from a recorded config) is left out, not paired
    per = [{"seed": None, "model_success": True, "real_success": True, "steps": 1}]
    (tmp_path / "c.json").write_text(json.dumps({"per_episode": per}))
    assert sorted(tc.episodes([a1, str(tmp_path / "c.json")])) == [1]


def test_bad_path_is_one_line_exit_2(tmp_path: Path) -> None:
    b = write(tmp_path / "b.json", [(1, True, True, 1)])
    done = subprocess.run(
        [sys.executable, str(BENCH / "transfer_compare.py"), "--a", str(tmp_path / "no"), "--b", b],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "not a transfer JSON" in done.stderr
    (tmp_path / "rows.json").write_text(json.dumps({"per_episode": [{"steps": 1}]}))
    done = subprocess.run(
        [sys.executable, str(BENCH / "transfer_compare.py"), "--a", str(tmp_path / "rows.json"),
         "--b", b],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 2 and "not a transfer JSON" in done.stderr
