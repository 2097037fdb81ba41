"""``docs/RESULTS.md``'s tables from ``bench/zero_real_data.py``'s JSON:

.venv/bin/python bench/zero_real_markdown.py docs/results/zero_real_data.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _f(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _range(pair: list[Any]) -> str:
    return "[" + ", ".join(_f(v) for v in pair) + "]"


def arm_tables(arm: str, res: dict[str, Any]) -> list[str]:
    out = [f"### The {arm} arm", "", "| dataset (N) | real success | in-model success |"]
    out.append("| --- | --- | --- |")
    for fam in ("R", "G", "M"):
        out.append(f"| {fam} | {_f(res['real_success'][fam])} | {_f(res['model_success'][fam])} |")
    out += ["", f"G/R: {_f(res['g_over_r'])}", ""]
    a, b = res["agreement"], res["agreement_max_reward"]
    out += ["| over checkpoints | success | mean max reward |", "| --- | --- | --- |"]
    for key in ("n_checkpoints", "pearson", "spearman", "mmrv", "bias"):
        fmt = str if key == "n_checkpoints" else _f
        out.append(f"| {key} | {fmt(a[key])} | {fmt(b[key])} |")
    level = round(100 * a["ci_level"])
    out.append(f"| Pearson {level}% CI | {_range(a['pearson_ci'])} | {_range(b['pearson_ci'])} |")
    out.append(
        f"| real range | {_range(a['real_success_range'])} | {_range(b['real_success_range'])} |"
    )
    out += ["", "| dataset | step | real success | in-model success | real reward | "
            "in-model reward |", "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    rewards = {(p["dataset"], p["step"]): p for p in res["checkpoints_max_reward"]}
    for p in res["checkpoints"]:
        r = rewards.get((p["dataset"], p["step"]), {})
        cells = [_f(p["real"]), _f(p["model"]), _f(r.get("real")), _f(r.get("model"))]
        out.append(f"| {p['dataset']} | {p['step']} | " + " | ".join(cells) + " |")
    return [*out, ""]


def markdown(res: dict[str, Any]) -> str:
    """The results JSON as markdown tables."""
    out: list[str] = []
    if res.get("partial"):
        todo = ", ".join(res["partial"]["stages_to_run"])
        out += [f"**Partial: an unfinished run** (stages still to run: {todo}); no targets.", ""]
    for arm, arm_res in res["arms"].items():
        out += arm_tables(arm, arm_res)
    g = res["g"]
    out += ["### G: demos generated inside the model", "", "| kept | tried | keep rate | "
            "real success given model success |", "| --- | --- | --- | --- |"]  # fmt: skip
    out.append(
        f"| {g['kept']} | {g['tried']} | {_f(g['keep_rate'])} | "
        f"{_f(g['real_success_given_model_success'])} |"
    )
    score = g.get("success_score")
    rule = "coverage above 0.95, the task's own" if score is None else f"coverage at least {score}"
    out += ["", f"Kept when the model read success: {rule}."]
    if g.get("transfer"):
        t = g["transfer"]
        out += ["", f"Final block error (median over G's demos, model vs ground truth): "
                f"{_f(t.get('block_err_px_median'), 2)} px, "
                f"{_f(t.get('angle_err_deg_median'), 2)} deg."]  # fmt: skip
    if res.get("hold_still"):
        out += [
            "",
            "| a policy that holds still | success | mean max reward |",
            "| --- | --- | --- |",
        ]
        for world, v in res["hold_still"].items():
            out.append(f"| {world} | {_f(v['success'])} | {_f(v['max_reward'])} |")
    if res["targets"]:
        out += ["", "| target (default run) | met |", "| --- | --- |"]
        out += [f"| {k} | {'yes' if v else '**no**'} |" for k, v in res["targets"].items()]
    out += ["", "| stage | wall time (s) |", "| --- | --- |"]
    out += [f"| {k} | {v:.0f} |" for k, v in res["wall_s"].items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown(json.loads(Path(sys.argv[1]).read_text())), end="")
