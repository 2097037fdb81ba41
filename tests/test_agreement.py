"""Policy evaluation agreement statistics (DESIGN §4) on hand-computed cases."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from factory.eval.agreement import (
    agreement,
    at_least,
    at_most,
    bootstrap_ci,
    checkpoint_agreement,
    mmrv,
    paired,
    pearson,
    ranks,
    spearman,
)


def test_pearson_hand_cases() -> None:
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # deviations (-1.5, -.5, .5, 1.5) and (-1.5, .5, -.5, 1.5): 4 / sqrt(5 * 5) = 0.8
    assert pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert math.isnan(pearson([0.5, 0.5, 0.5], [0.1, 0.2, 0.3]))
    assert math.isnan(pearson([1.0], [2.0]))


def test_ranks_average_ties() -> None:
    np.testing.assert_array_equal(ranks([0.3, 0.1, 0.1, 0.9]), [3.0, 1.5, 1.5, 4.0])


def test_spearman_is_rank_pearson() -> None:
    # monotone but not linear: rho 1, Pearson below 1
    assert spearman([1, 2, 3], [1, 10, 100]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [1, 10, 100]) < 0.95
    assert spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    # ties: ranks (1.5, 1.5, 3) vs (1, 2, 3), deviations (-.5, -.5, 1) and (-1, 0, 1):
    # 1.5 / sqrt(1.5 * 2)
    assert spearman([0.0, 0.0, 1.0], [1, 2, 3]) == pytest.approx(1.5 / math.sqrt(3.0))


def test_mmrv_hand_case() -> None:
    # s = (.1, .2, .3), r = (.5, .2, .6): checkpoints 0 and 1 swap order (cost |.5 - .2|),
    # every pair with checkpoint 2 is ordered alike -> (0.3 + 0.3 + 0) / 3
    assert mmrv([0.1, 0.2, 0.3], [0.5, 0.2, 0.6]) == pytest.approx(0.2)
    assert mmrv([0.1, 0.2, 0.3], [0.2, 0.5, 0.6]) == 0.0  # perfect ranking
    assert mmrv([0.1, 0.2, 0.3], [0.6, 0.5, 0.2]) == pytest.approx((0.4 + 0.3 + 0.4) / 3)


def test_mmrv_strict_greater_on_ties() -> None:
    # s tied: (s0 > s1) and (s1 > s0) are both False. r1 > r0 is True, so only i=1 is a
    # violation (cost 0.8); i=0 agrees (r0 > r1 is False too) -> (0 + 0.8) / 2
    assert mmrv([0.5, 0.5], [0.1, 0.9]) == pytest.approx(0.4)
    assert mmrv([0.5, 0.5], [0.3, 0.3]) == 0.0


def test_bootstrap_ci_bounds_and_determinism() -> None:
    lo, hi = bootstrap_ci([1, 2, 3, 4, 5], [2, 4, 6, 8, 10], n_boot=200)
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)
    rng = np.random.default_rng(3)
    s = rng.uniform(size=12)
    r = s + rng.normal(scale=0.3, size=12)
    a = bootstrap_ci(s, r, n_boot=300, seed=7)
    assert a == bootstrap_ci(s, r, n_boot=300, seed=7)
    assert -1.0 <= a[0] < pearson(s, r) < a[1] <= 1.0
    wide = bootstrap_ci(s, r, n_boot=300, seed=7, level=0.99)
    assert wide[0] <= a[0] and wide[1] >= a[1]
    assert all(math.isnan(x) for x in bootstrap_ci([1.0, 1.0], [0.0, 1.0], n_boot=50))


def test_agreement_report_is_json_ready() -> None:
    rep = agreement([0.1, 0.2, 0.3], [0.5, 0.2, 0.6], n_boot=100)
    keys = {"n_checkpoints", "pearson", "pearson_ci", "ci_level", "spearman", "mmrv", "bias"}
    assert set(rep) == keys and rep["ci_level"] == 0.9
    assert rep["n_checkpoints"] == 3 and rep["mmrv"] == pytest.approx(0.2)
    assert rep["spearman"] == pytest.approx(0.5)  # ranks (1,2,3) vs (2,1,3)
    assert rep["bias"] == pytest.approx((-0.4 + 0.0 - 0.3) / 3, abs=1e-6)  # rounded to 6
    assert rep["pearson_ci"] == [pytest.approx(x, abs=1e-6) for x in bootstrap_ci(
        [0.1, 0.2, 0.3], [0.5, 0.2, 0.6], n_boot=100, level=0.9)]  # fmt: skip
    const = agreement([0.0, 0.0, 0.0], [0.0, 0.5, 1.0], n_boot=20)
    assert const["pearson"] is None and const["pearson_ci"] == [None, None]
    json.dumps(rep, allow_nan=False)
    json.dumps(const, allow_nan=False)


def _row(d: str, step: int, world: str, success: float) -> dict[str, Any]:
    return {"dataset": d, "step": step, "world": world, "success": success}


def _spread() -> list[dict[str, Any]]:
    """Five datasets at two steps: real success from 0.1 to 0.73, the model 0.02 above."""
    rows = []
    for k, d in enumerate(("R2", "G2", "R4", "G4", "M4")):
        for step in (100, 200):
            real = 0.1 + 0.07 * (2 * k + step // 100 - 1)
            rows += [_row(d, step, "real", real), _row(d, step, "model", real + 0.02)]
    return rows


def test_checkpoint_agreement_of_a_perfect_ranking_with_a_bias() -> None:
    pairs = paired(_spread(), "success")
    assert [(p["dataset"], p["step"]) for p in pairs[:3]] == [
        ("G2", 100), ("G2", 200), ("G4", 100)
    ]  # fmt: skip
    a = checkpoint_agreement(pairs)
    assert a["n_checkpoints"] == 10 and a["ci_level"] == 0.95
    assert a["pearson"] == pytest.approx(1.0) and a["spearman"] == pytest.approx(1.0)
    assert a["bias"] == pytest.approx(0.02) and a["mmrv"] == 0.0
    assert a["real_success_range"] == pytest.approx([0.1, 0.73])
    assert a["pearson_ci"] == [pytest.approx(1.0), pytest.approx(1.0)]
    json.dumps(a, allow_nan=False)


def test_a_checkpoint_scored_in_one_world_is_unpaired() -> None:
    rows = [_row("R4", 100, "real", 0.1), _row("R4", 200, "real", 0.2)]
    rows.append(_row("R4", 200, "model", 0.3))
    pairs = paired(rows, "success")
    assert pairs == [{"dataset": "R4", "step": 200, "real": 0.2, "model": 0.3}]
    one = checkpoint_agreement(pairs)
    # one checkpoint ranks nothing: every statistic undefined (mmrv() alone would say 0)
    assert one["n_checkpoints"] == 1 and one["real_success_range"] == [0.2, 0.2]
    assert all(one[k] is None for k in ("pearson", "spearman", "mmrv", "bias"))
    none = checkpoint_agreement([])
    assert none["real_success_range"] == [None, None] and none["pearson_ci"] == [None, None]


def test_targets_are_never_met_vacuously() -> None:
    """An undefined statistic (a constant real score: no Pearson) meets no target."""
    pairs = [{"dataset": "R", "step": s, "real": 0.0, "model": m} for s, m in ((1, 0.0), (2, 0.1))]
    a = checkpoint_agreement(pairs)
    assert a["pearson"] is None and a["mmrv"] == pytest.approx(0.0)
    assert not at_least(a["pearson"], 0.8) and not at_most(a["pearson"], 0.8)
    assert at_most(a["mmrv"], 0.1) and not at_most(0.2, 0.1)
    assert at_least(0.8, 0.8) and not at_least(0.79, 0.8)


@pytest.mark.parametrize(
    ("sim", "real"), [([1.0, 2.0], [1.0]), ([], []), ([1.0, float("nan")], [1.0, 2.0])]
)
def test_bad_input(sim: list[float], real: list[float]) -> None:
    with pytest.raises(ValueError):
        agreement(sim, real)
