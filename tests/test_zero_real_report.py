"""The report of ``bench/zero_real_data.py``: scores read from lerobot-eval files, the
issue-14 JSON keys, and targets that are never met vacuously."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import zero_real_report as report


def _row(d: str, step: int, world: str, success: float, reward: float) -> dict[str, Any]:
    return {
        "dataset": d,
        "step": step,
        "world": world,
        "success": success,
        "max_reward": reward,
        "n_episodes": 20,
    }


def _state() -> dict[str, Any]:
    return {
        "config": {"n": 4},
        "stages": {"R": {"wall_s": 10.0, "info": {"used": 4}}, "train": {"wall_s": 100.0}},
        "commands": [{"cmd": "factory collect", "rc": 0}, {"cmd": "lerobot-eval", "rc": 1}],
        "notes": ["G: 1 usable demos of 4"],
    }


def test_read_eval_converts_percent(tmp_path: Path) -> None:
    f = tmp_path / "eval_info.json"
    overall = {"pc_success": 35.0, "avg_max_reward": 0.41, "n_episodes": 20}
    f.write_text(json.dumps({"overall": overall}))
    assert report.read_eval(f) == {"success": 0.35, "max_reward": 0.41, "n_episodes": 20}


def test_build_pairs_worlds_and_reports_final_checkpoints() -> None:
    rows = []
    for d, base in (("R", 0.2), ("G", 0.0), ("M", 0.1)):
        for step in (100, 200):
            gain = 0.1 * step / 100
            rows.append(_row(d, step, "real", base + gain, 0.3 + base + gain))
            rows.append(_row(d, step, "model", base + gain + 0.05, 0.35 + base + gain))
    res = report.build(rows, _state())
    assert res["real_success"] == pytest.approx({"R": 0.4, "G": 0.2, "M": 0.3})
    assert res["model_success"]["R"] == pytest.approx(0.45)
    assert res["g_over_r"] == pytest.approx(0.5)
    assert res["agreement"]["n_checkpoints"] == 6
    assert res["agreement"]["pearson"] == pytest.approx(1.0)
    assert res["agreement_max_reward"]["mmrv"] == 0.0
    assert res["targets"]["g_over_r_at_least_0.8"] is False
    assert res["targets"]["m_at_least_r"] is False
    assert res["targets"]["n_checkpoints_at_least_8"] is False
    assert res["commands"][1].endswith("# exit 1")
    assert res["wall_s"]["total"] == pytest.approx(110.0)


def test_all_zero_real_success_judges_nothing_vacuously() -> None:
    rows = []
    for d in "RGM":
        for step, model in ((100, 0.0), (200, 0.05)):
            rows.append(_row(d, step, "real", 0.0, 0.2))
            rows.append(_row(d, step, "model", model, 0.3))
    res = report.build(rows, _state())
    assert res["agreement"]["pearson"] is None
    assert res["agreement"]["mmrv"] == 0.0  # defined, but nothing to rank
    t = res["targets"]
    assert t["mmrv_at_most_0.1"] is None
    assert t["m_at_least_r"] is None
    assert t["g_over_r_at_least_0.8"] is None
    assert t["pearson_at_least_0.8"] is None


def test_missing_world_leaves_a_checkpoint_unpaired() -> None:
    rows = [_row("R", 100, "real", 0.1, 0.2), _row("R", 200, "real", 0.2, 0.3)]
    rows.append(_row("R", 200, "model", 0.3, 0.4))
    assert report.paired(rows, "success") == [
        {"dataset": "R", "step": 200, "real": 0.2, "model": 0.3}
    ]
    assert report.agreement_of(report.paired(rows, "success"))["pearson"] is None


def test_plot_is_written(tmp_path: Path) -> None:
    rows = [_row("R", s, w, 0.1 * s / 100, 0.2) for s in (100, 200) for w in ("real", "model")]
    res = report.build(rows, _state())
    out = tmp_path / "plot.png"
    report.draw_plot(res, out)
    assert out.stat().st_size > 1000


def test_markdown_tables_carry_the_json_numbers() -> None:
    rows = [_row("R", s, w, 0.1 * s / 100, 0.2) for s in (100, 200) for w in ("real", "model")]
    res = report.build(rows, _state())
    res["hold_still"] = {"real": {"success": 0.0, "max_reward": 0.125}}
    text = report.markdown(res)
    assert "| R | 4 | 0.200 | 0.200 |" in text
    assert "| G | n/a | n/a | n/a |" in text
    assert "| R | 200 | 0.200 | 0.200 | 0.200 | 0.200 |" in text
    assert "| real | 0.000 | 0.125 |" in text
    assert "| total | 110 |" in text


def test_contact_sheet_has_a_row_per_episode(filled: Path, tmp_path: Path) -> None:
    from PIL import Image
    from store_factories import LENGTHS

    out = tmp_path / "sheet.png"
    assert report.contact_sheet(filled, out, cols=3, scale=2) == len(LENGTHS)
    with Image.open(out) as im:
        assert im.size == (3 * 16 * 2, len(LENGTHS) * 16 * 2)


def test_hold_still_scores_the_start_states_in_the_ground_truth() -> None:
    import numpy as np
    from zero_real_run import Plan, hold_still

    from factory.envs.model_vector_env import pusht_reward
    from factory.envs.pusht import PushTWorld

    plan = Plan(
        work="unused",
        n=2,
        steps=4,
        lengths=1,
        batch=4,
        episodes=3,
        eval_batch=3,
        episode_length=5,
        num_workers=0,
        policy="",
        eval_seed=500000,
        demo_seed=300000,
        demo_steps=50,
        max_rounds=1,
        gen_batch=2,
        train_seed=0,
        device="cpu",
        model=None,
        g_all=False,
    )
    with PushTWorld(batch_size=3) as world:
        start = pusht_reward(world.reset(seeds=np.arange(500000, 500003)).score)
    got = hold_still(plan, "real")
    assert got["success"] == 0.0
    # the block settles a little under the physics: within 0.002 of its start reward
    assert got["max_reward"] == pytest.approx(float(start.mean()), abs=2e-3)
