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


def _row(d: str, step: int, world: str, success: float, reward: float, arm: str = "state"):
    return {
        "arm": arm,
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
        "stages": {
            "R": {"wall_s": 10.0, "info": {"used": 4}},
            "G": {"wall_s": 5.0, "info": {"usable": 4, "seeds_tried": 8}},
            "transfer": {"wall_s": 1.0, "info": {"real_success_given_model_success": 0.75}},
            "train_state": {"wall_s": 100.0},
        },
        "commands": [{"cmd": "factory collect", "rc": 0}, {"cmd": "lerobot-eval", "rc": 1}],
        "notes": ["G: 1 usable demos of 4"],
    }


def _spread() -> list[dict[str, Any]]:
    """R, G and M at N=4 and R2, G2: real success from 0.1 to 0.73, the model 0.02 above."""
    rows = []
    for k, d in enumerate(("R2", "G2", "R4", "G4", "M4")):
        for step in (100, 200):
            real = 0.1 + 0.07 * (2 * k + step // 100 - 1)
            rows.append(_row(d, step, "real", real, real + 0.1))
            rows.append(_row(d, step, "model", real + 0.02, real + 0.12))
    return rows


def test_read_eval_converts_percent(tmp_path: Path) -> None:
    f = tmp_path / "eval_info.json"
    overall = {"pc_success": 35.0, "avg_max_reward": 0.41, "n_episodes": 20}
    f.write_text(json.dumps({"overall": overall}))
    assert report.read_eval(f) == {"success": 0.35, "max_reward": 0.41, "n_episodes": 20}


def test_build_reports_each_arm_and_the_agreement_keys() -> None:
    rows = _spread() + [_row("R4", 50, w, 0.3, 0.4, arm="image") for w in ("real", "model")]
    res = report.build(rows, _state())
    assert set(res["arms"]) == {"state", "image"}
    st = res["arms"]["state"]
    assert st["real_success"] == pytest.approx({"R": 0.45, "G": 0.59, "M": 0.73})
    assert st["model_success"]["R"] == pytest.approx(0.47)
    assert st["g_over_r"] == pytest.approx(0.59 / 0.45, abs=1e-4)
    a = st["agreement"]
    assert a["n_checkpoints"] == 10 and a["pearson"] == pytest.approx(1.0)
    assert a["bias"] == pytest.approx(0.02) and a["mmrv"] == 0.0
    assert a["real_success_range"] == pytest.approx([0.1, 0.73])
    assert a["pearson_ci"][0] == pytest.approx(1.0)
    assert res["arms"]["image"]["real_success"]["R"] == 0.3
    assert res["g"] == {
        "kept": 4,
        "tried": 8,
        "keep_rate": 0.5,
        "real_success_given_model_success": 0.75,
        "transfer": {"real_success_given_model_success": 0.75},
    }
    t = res["targets"]
    assert t["pearson_at_least_0.8"] and t["abs_bias_at_most_0.05"] and t["m_at_least_r"]
    assert not t["r_at_least_0.6"]  # 0.45
    assert not t["n_checkpoints_at_least_12"]  # 10
    assert t["real_success_spans_0.1_to_0.7"]
    assert not t["g_real_given_model_at_least_0.8"]  # 0.75
    assert res["commands"][1].endswith("# exit 1")
    assert res["wall_s"]["total"] == pytest.approx(116.0)


def test_a_target_that_cannot_be_computed_is_not_met() -> None:
    rows = []
    for d in ("R4", "G4", "M4"):
        for step, model in ((100, 0.0), (200, 0.05)):
            rows.append(_row(d, step, "real", 0.0, 0.2))
            rows.append(_row(d, step, "model", model, 0.3))
    res = report.build(rows, _state())
    assert res["arms"]["state"]["agreement"]["pearson"] is None
    t = res["targets"]
    assert t["pearson_at_least_0.8"] is False and t["pearson_ci_low_above_0.5"] is False
    assert t["g_over_r_at_least_0.8"] is False  # R is 0: G/R undefined
    assert t["real_success_spans_0.1_to_0.7"] is False
    empty = report.build([], _state())
    assert empty["arms"] == {} and not any(empty["targets"][k] for k in ("mmrv_at_most_0.1",))


def test_missing_world_leaves_a_checkpoint_unpaired() -> None:
    rows = [_row("R4", 100, "real", 0.1, 0.2), _row("R4", 200, "real", 0.2, 0.3)]
    rows.append(_row("R4", 200, "model", 0.3, 0.4))
    assert report.paired(rows, "success") == [
        {"dataset": "R4", "step": 200, "real": 0.2, "model": 0.3}
    ]
    assert report.agreement_of(report.paired(rows, "success"))["pearson"] is None


def test_plot_is_written(tmp_path: Path) -> None:
    res = report.build(_spread(), _state())
    out = tmp_path / "plot.png"
    report.draw_plot(res, out)
    assert out.stat().st_size > 1000


def test_markdown_tables_carry_the_json_numbers() -> None:
    from zero_real_markdown import markdown

    res = report.build(_spread(), _state())
    res["hold_still"] = {"real": {"success": 0.0, "max_reward": 0.125}}
    text = markdown(res)
    assert "| R | 0.450 | 0.470 |" in text
    assert "| M4 | 200 | 0.730 | 0.750 | 0.830 | 0.850 |" in text
    assert "| real | 0.000 | 0.125 |" in text
    assert "| 4 | 8 | 0.500 | 0.750 |" in text
    assert "| r_at_least_0.6 | **no** |" in text
    assert "| total | 116 |" in text


def test_contact_sheet_has_a_row_per_episode(filled: Path, tmp_path: Path) -> None:
    from PIL import Image
    from store_factories import LENGTHS

    out = tmp_path / "sheet.png"
    assert report.contact_sheet(filled, out, rows=10, cols=3, scale=2) == len(LENGTHS)
    with Image.open(out) as im:
        assert im.size == (3 * 16 * 2, len(LENGTHS) * 16 * 2)


def test_hold_still_scores_the_start_states_in_the_ground_truth() -> None:
    import numpy as np
    from zero_real_run import Plan, hold_still

    from factory.envs.model_vector_env import pusht_reward
    from factory.envs.pusht import PushTWorld

    plan = Plan(
        work="unused", n=2, sizes=(2,), episodes=3, eval_batch=3, episode_length=5,
        state_policy="{}", state_steps=4, state_saves=(2,), state_batch=4, image_policy="",
        image_steps=4, image_lengths=1, image_batch=4, num_workers=0, eval_seed=500000,
        demo_seed=300000, demo_steps=50, max_rounds=1, gen_batch=2, train_seed=0,
        device="cpu", model=None, g_all=False,
    )  # fmt: skip
    with PushTWorld(batch_size=3) as world:
        start = pusht_reward(world.reset(seeds=np.arange(500000, 500003)).score)
    got = hold_still(plan, "real")
    assert got["success"] == 0.0
    # the block settles a little under the physics: within 0.002 of its start reward
    assert got["max_reward"] == pytest.approx(float(start.mean()), abs=2e-3)
