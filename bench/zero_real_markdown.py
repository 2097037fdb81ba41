"""``docs/RESULTS.md``'s tables from ``bench/zero_real_data.py``'s JSON:

.venv/bin/python bench/zero_real_markdown.py docs/results/zero_real_data.json      # print them
.venv/bin/python bench/zero_real_markdown.py docs/results/zero_real_data.json --into docs/RESULTS.md

``--into`` (and the experiment's report stage) replaces what lies between the document's
:data:`BEGIN` and :data:`END` markers and leaves the rest of it as it is.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

BEGIN = "<!-- zero_real_data tables: begin (bench/zero_real_markdown.py writes them) -->"
END = "<!-- zero_real_data tables: end -->"


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
    robust = g.get("robust_keep")
    if robust is not None:
        rule += f", and at least {robust} of its noisy replays in the model still succeed"
        judges = g.get("robust_judges") or []
        if judges:
            rule += f" (under the model's dynamics and {len(judges)} judges')"
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


def splice(doc: str, tables: str) -> str:
    """``doc`` with the text between its one :data:`BEGIN` and its one :data:`END` line
    replaced by ``tables``; ValueError when the markers are missing, repeated or out of
    order."""
    lines = doc.split("\n")
    begins = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise ValueError(f"needs one {BEGIN!r} line and, after it, one {END!r} line")
    body = tables.rstrip("\n").split("\n")
    return "\n".join([*lines[: begins[0] + 1], "", *body, "", *lines[ends[0] :]])


def write_into(doc: Path, res: dict[str, Any]) -> None:
    """Replace the tables in the markdown file ``doc`` (:func:`splice`), atomically."""
    text = splice(doc.read_text(), markdown(res))
    tmp = doc.with_name(doc.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, doc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", type=Path, help="bench/zero_real_data.py's results JSON")
    ap.add_argument("--into", type=Path, help="a markdown file with the BEGIN / END markers")
    a = ap.parse_args(argv)
    try:
        res = json.loads(a.json.read_text())
        if a.into is None:
            print(markdown(res), end="")
        else:
            write_into(a.into, res)
    except KeyError as err:
        ap.exit(2, f"zero_real_markdown: {a.json} is not a results JSON of the experiment "
                f"(no {err})\n")  # fmt: skip
    except (OSError, ValueError) as err:
        ap.exit(2, f"zero_real_markdown: {err}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
