"""The report of ``bench/zero_real_data.py``: scores read from ``lerobot-eval``'s
``eval_info.json`` files, the results JSON (one entry per policy arm under ``arms``) and
a PIL plot (no matplotlib in the locked environment): in-model against real success of
every checkpoint, per arm, and the state arm's success against training steps.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from factory.eval.agreement import at_least, at_most, checkpoint_agreement, paired

ARMS = ("state", "image")
WORLDS = ("real", "model")  # lerobot's pusht env, the demofactory env
FAMILIES = ("R", "G", "M")  # real demos, generated demos, half and half
COLOURS = {"R": (31, 119, 180), "G": (255, 127, 14), "M": (44, 160, 44)}
CI_LEVEL = 0.95
SPAN = (0.1, 0.7)  # the real-success range the checkpoints must cover


def read_eval(path: Path) -> dict[str, float]:
    """Success rate (0..1) and mean max reward of one ``eval_info.json``."""
    overall = json.loads(path.read_text())["overall"]
    return {
        "success": round(float(overall["pc_success"]) / 100.0, 6),
        "max_reward": round(float(overall["avg_max_reward"]), 6),
        "n_episodes": int(overall["n_episodes"]),
    }


def final_scores(rows: list[dict[str, Any]], world: str, n: int) -> dict[str, float | None]:
    """Success of ``R<n>``, ``G<n>`` and ``M<n>`` at their last step in ``world``."""
    out: dict[str, float | None] = {}
    for fam in FAMILIES:
        mine = [r for r in rows if r["dataset"] == f"{fam}{n}" and r["world"] == world]
        out[fam] = max(mine, key=lambda r: r["step"])["success"] if mine else None
    return out


def arm_report(rows: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """One arm's results: final success of R, G, M in both worlds, G/R and the agreement
    over every checkpoint, on success and on mean max reward."""
    real, model = final_scores(rows, "real", n), final_scores(rows, "model", n)
    pairs = paired(rows, "success")
    r, g = real["R"], real["G"]
    return {
        "real_success": real,
        "model_success": model,
        "g_over_r": None if r in (None, 0) or g is None else round(g / r, 4),
        "agreement": checkpoint_agreement(pairs, level=CI_LEVEL),
        "agreement_max_reward": checkpoint_agreement(paired(rows, "max_reward"), level=CI_LEVEL),
        "checkpoints": pairs,
        "checkpoints_max_reward": paired(rows, "max_reward"),
    }


def state_targets(arm: dict[str, Any], g: dict[str, Any], wall: float) -> dict[str, bool]:
    """The issue's targets for the default run (the state arm); False when not computable."""
    real, a = arm["real_success"], arm["agreement"]
    lo, hi = a["real_success_range"]
    r, m = real["R"], real["M"]
    return {
        "r_at_least_0.6": at_least(r, 0.6),
        "g_over_r_at_least_0.8": at_least(arm["g_over_r"], 0.8),
        "m_at_least_r": r is not None and m is not None and m >= r,
        "n_checkpoints_at_least_12": a["n_checkpoints"] >= 12,
        "real_success_spans_0.1_to_0.7": lo is not None and lo <= SPAN[0] and hi >= SPAN[1],
        "pearson_at_least_0.8": at_least(a["pearson"], 0.8),
        "pearson_ci_low_above_0.5": a["pearson_ci"][0] is not None and a["pearson_ci"][0] > 0.5,
        "mmrv_at_most_0.1": at_most(a["mmrv"], 0.1),
        "abs_bias_at_most_0.05": a["bias"] is not None and abs(a["bias"]) <= 0.05,
        "g_real_given_model_at_least_0.8": at_least(g.get("real_success_given_model_success"), 0.8),
        "under_3_hours": wall < 3 * 3600,
    }


def g_summary(state: dict[str, Any]) -> dict[str, Any]:
    """G's keep rate and transfer: demos kept by the model's own success reading."""
    demos = state["stages"].get("G", {}).get("info") or {}
    transfer = state["stages"].get("transfer", {}).get("info") or {}
    kept, tried = demos.get("usable"), demos.get("seeds_tried")
    return {
        "kept": kept,
        "tried": tried,
        "keep_rate": None if not tried or kept is None else round(kept / tried, 4),
        # the model's success reading that kept them (None: the task's own, coverage > 0.95)
        "success_score": state["config"].get("g_success_score"),
        # the robustness in the model they needed (None: none; generate --robust-keep)
        "robust_keep": state["config"].get("g_robust_keep"),
        # the judges' dynamics that replayed them too (generate --robust-judge)
        "robust_judges": state["config"].get("g_robust_judges", []),
        "real_success_given_model_success": transfer.get("real_success_given_model_success"),
        "transfer": transfer or None,
    }


def build(rows: list[dict[str, Any]], state: dict[str, Any]) -> dict[str, Any]:
    """The results JSON from the score rows (with an ``arm`` each) and ``state.json``."""
    n = int(state["config"]["n"])
    arms = {
        arm: arm_report([r for r in rows if r["arm"] == arm], n)
        for arm in ARMS
        if any(r["arm"] == arm for r in rows)
    }
    wall = {k: v.get("wall_s", 0.0) for k, v in state["stages"].items()}
    total = round(sum(wall.values()), 1)
    g = g_summary(state)
    empty = arm_report([], n)
    return {
        "arms": arms,
        "g": g,
        "hold_still": state["stages"].get("null", {}).get("info"),
        "demos": {k: state["stages"].get(k, {}).get("info") for k in ("R", "G", "M")},
        "scores": rows,
        "config": state["config"],
        "commands": [
            c["cmd"] + (f"  # exit {c['rc']}" if c["rc"] else "")
            for c in state["commands"]
            if not c.get("superseded")
        ],
        "wall_s": {**wall, "total": total},
        "targets": state_targets(arms.get("state", empty), g, total),
        "notes": state.get("notes", []),
    }


# ---------------------------------------------------------------- plot (PIL)
W, H, PAD = 560, 420, 60


def _panel(
    draw: ImageDraw.ImageDraw, x0: int, title: str, labels: tuple[str, str], xmax: float
) -> Any:
    font = ImageFont.load_default()
    left, top, right, bottom = x0 + PAD, PAD, x0 + W - 20, H - PAD
    draw.rectangle((left, top, right, bottom), outline=(0, 0, 0))
    draw.text((left, 20), title, fill=(0, 0, 0), font=font)
    draw.text(((left + right) // 2 - 30, bottom + 30), labels[0], fill=(0, 0, 0), font=font)
    draw.text((x0 + 5, top - 15), labels[1], fill=(0, 0, 0), font=font)
    for k in range(6):
        y = bottom - (bottom - top) * k / 5
        draw.line((left - 4, y, left, y), fill=(0, 0, 0))
        draw.text((left - 30, y - 6), f"{k / 5:.1f}", fill=(0, 0, 0), font=font)
        x = left + (right - left) * k / 5
        draw.line((x, bottom, x, bottom + 4), fill=(0, 0, 0))
        draw.text((x - 10, bottom + 8), f"{xmax * k / 5:.4g}", fill=(0, 0, 0), font=font)

    def to_px(x: float, y: float) -> tuple[float, float]:
        return left + (right - left) * x / xmax, bottom - (bottom - top) * y

    return to_px


def _dashed(
    draw: ImageDraw.ImageDraw, a: tuple[float, float], b: tuple[float, float], colour: Any
) -> None:
    n = 12
    for k in range(0, n, 2):
        p = (a[0] + (b[0] - a[0]) * k / n, a[1] + (b[1] - a[1]) * k / n)
        q = (a[0] + (b[0] - a[0]) * (k + 1) / n, a[1] + (b[1] - a[1]) * (k + 1) / n)
        draw.line((p, q), fill=colour, width=2)


def _scatter(draw: ImageDraw.ImageDraw, x0: int, arm: str, res: dict[str, Any]) -> None:
    """In-model vs real success of every checkpoint of one arm, with the y = x line."""
    agree = res["agreement"]
    pear = "n/a" if agree["pearson"] is None else f"{agree['pearson']:.3f}"
    title = f"{arm} arm: in-model vs real success, {agree['n_checkpoints']} ckpts, r={pear}"
    to_px = _panel(draw, x0, title, ("real success (pusht)", "in-model success"), 1.0)
    _dashed(draw, to_px(0.0, 0.0), to_px(1.0, 1.0), (150, 150, 150))
    for p in res["checkpoints"]:
        x, y = to_px(p["real"], p["model"])
        draw.ellipse((x - 4, y - 4, x + 4, y + 4), fill=COLOURS[p["dataset"][0]])


def _curves(draw: ImageDraw.ImageDraw, x0: int, rows: list[dict[str, Any]]) -> None:
    """Success against training steps per dataset (solid: real, dashed: in the model)."""
    xmax = float(max([r["step"] for r in rows], default=1))
    title = "state arm: success vs steps (solid: real, dashed: in model)"
    curve = _panel(draw, x0, title, ("training steps", "success"), xmax)
    for d in sorted({r["dataset"] for r in rows}):
        for world in WORLDS:
            pts = sorted(
                (r["step"], r["success"]) for r in rows if (r["dataset"], r["world"]) == (d, world)
            )
            px = [curve(x, y) for x, y in pts]
            for a, b in itertools.pairwise(px):
                if world == "real":
                    draw.line((a, b), fill=COLOURS[d[0]], width=2)
                else:
                    _dashed(draw, a, b, COLOURS[d[0]])


def draw_plot(report: dict[str, Any], out: Path) -> None:
    """Per arm the model-vs-real scatter, then the state arm's curves."""
    arms = report["arms"]
    img = Image.new("RGB", ((len(arms) + 1) * W, H), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    for k, (arm, res) in enumerate(arms.items()):
        _scatter(draw, k * W, arm, res)
    _curves(draw, len(arms) * W, [r for r in report["scores"] if r["arm"] == "state"])
    for k, fam in enumerate(FAMILIES):
        draw.rectangle((W - 90, PAD + 8 + 16 * k, W - 80, PAD + 18 + 16 * k), fill=COLOURS[fam])
        draw.text((W - 75, PAD + 6 + 16 * k), fam, fill=(0, 0, 0))
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out)
