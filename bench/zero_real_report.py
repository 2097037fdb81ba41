"""The report of ``bench/zero_real_data.py``: scores read from ``lerobot-eval``'s
``eval_info.json`` files, the results JSON (issue 14's keys) and a PIL plot (no matplotlib
in the locked environment): success against training steps per dataset and world, and the
in-model against the real success of every checkpoint.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from factory.eval.agreement import agreement

DATASETS = ("R", "G", "M")
WORLDS = ("real", "model")  # lerobot's pusht env, the demofactory env
COLOURS = {"R": (31, 119, 180), "G": (255, 127, 14), "M": (44, 160, 44)}


def read_eval(path: Path) -> dict[str, float]:
    """Success rate (0..1) and mean max reward of one ``eval_info.json``."""
    overall = json.loads(path.read_text())["overall"]
    return {
        "success": round(float(overall["pc_success"]) / 100.0, 6),
        "max_reward": round(float(overall["avg_max_reward"]), 6),
        "n_episodes": int(overall["n_episodes"]),
    }


def paired(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """One row per checkpoint scored in both worlds: dataset, step, real and model ``key``."""
    got: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        cell = got.setdefault((row["dataset"], row["step"]), {})
        cell[row["world"]] = row[key]
    return [
        {"dataset": d, "step": s, "real": c["real"], "model": c["model"]}
        for (d, s), c in sorted(got.items())
        if "real" in c and "model" in c
    ]


def final_scores(rows: list[dict[str, Any]], world: str) -> dict[str, float | None]:
    """Each dataset's success at its last scored step in ``world`` (None: not trained)."""
    out: dict[str, float | None] = {}
    for d in DATASETS:
        mine = [r for r in rows if r["dataset"] == d and r["world"] == world]
        out[d] = max(mine, key=lambda r: r["step"])["success"] if mine else None
    return out


def agreement_of(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    if len(pairs) < 2:
        return {
            "pearson": None,
            "spearman": None,
            "mmrv": None,
            "n_checkpoints": len(pairs),
            "pearson_ci90": [None, None],
        }
    return agreement([p["model"] for p in pairs], [p["real"] for p in pairs])


def targets(
    real: dict[str, float | None], agree: dict[str, Any], wall: float, constant_real: bool
) -> dict[str, Any]:
    """Issue 14's targets, each True/False, or None where it cannot be judged.

    A comparison of two zeros (M against R when both are 0) and an MMRV over checkpoints
    whose real success is constant (no ranking to violate) would be met vacuously, so
    they are None, not True.
    """
    r, g, m = real["R"], real["G"], real["M"]
    pear, mmrv = agree["pearson"], agree["mmrv"]
    return {
        "g_over_r_at_least_0.8": None if r in (None, 0) or g is None else g / r >= 0.8,
        "m_at_least_r": None if r is None or m is None or r == m == 0 else m >= r,
        "pearson_at_least_0.8": None if pear is None else pear >= 0.8,
        "mmrv_at_most_0.1": None if mmrv is None or constant_real else mmrv <= 0.1,
        "n_checkpoints_at_least_8": agree["n_checkpoints"] >= 8,
        "under_4_hours": wall < 4 * 3600,
    }


def build(rows: list[dict[str, Any]], state: dict[str, Any]) -> dict[str, Any]:
    """The results JSON from the score rows and the run's ``state.json``."""
    real, model = final_scores(rows, "real"), final_scores(rows, "model")
    pairs = paired(rows, "success")
    agree = agreement_of(pairs)
    reward_pairs = paired(rows, "max_reward")
    wall = {k: v.get("wall_s", 0.0) for k, v in state["stages"].items()}
    total = round(sum(wall.values()), 1)
    r, g = real["R"], real["G"]
    return {
        "real_success": real,
        "model_success": model,
        "g_over_r": None if r in (None, 0) or g is None else round(g / r, 4),
        "agreement": agree,
        "agreement_max_reward": agreement_of(reward_pairs),
        "checkpoints": pairs,
        "checkpoints_max_reward": reward_pairs,
        "scores": rows,
        "demos": {k: state["stages"].get(k, {}).get("info") for k in DATASETS},
        "g_transfer": state["stages"].get("transfer", {}).get("info"),
        "hold_still": state["stages"].get("null", {}).get("info"),
        "config": state["config"],
        "commands": [
            c["cmd"] + (f"  # exit {c['rc']}" if c["rc"] else "") for c in state["commands"]
        ],
        "wall_s": {**wall, "total": total},
        "targets": targets(real, agree, total, len({p["real"] for p in pairs}) < 2),
        "notes": state.get("notes", []),
    }


# ---------------------------------------------------------------- plot (PIL)
W, H, PAD = 560, 420, 60


def _panel(
    draw: ImageDraw.ImageDraw, x0: int, title: str, xlabel: str, ylabel: str, xmax: float
) -> Any:
    font = ImageFont.load_default()
    left, top, right, bottom = x0 + PAD, PAD, x0 + W - 20, H - PAD
    draw.rectangle((left, top, right, bottom), outline=(0, 0, 0))
    draw.text((left, 20), title, fill=(0, 0, 0), font=font)
    draw.text(((left + right) // 2 - 30, bottom + 30), xlabel, fill=(0, 0, 0), font=font)
    draw.text((x0 + 5, top - 15), ylabel, fill=(0, 0, 0), font=font)
    for k in range(6):
        y = bottom - (bottom - top) * k / 5
        draw.line((left - 4, y, left, y), fill=(0, 0, 0))
        draw.text((left - 30, y - 6), f"{k / 5:.1f}", fill=(0, 0, 0), font=font)
        x = left + (right - left) * k / 5
        draw.line((x, bottom, x, bottom + 4), fill=(0, 0, 0))
        label = f"{xmax * k / 5:.4g}"
        draw.text((x - 10, bottom + 8), label, fill=(0, 0, 0), font=font)

    def to_px(x: float, y: float) -> tuple[float, float]:
        return left + (right - left) * x / xmax, bottom - (bottom - top) * y

    return to_px


def _dashed(
    draw: ImageDraw.ImageDraw,
    a: tuple[float, float],
    b: tuple[float, float],
    colour: tuple[int, int, int],
) -> None:
    n = 12
    for k in range(0, n, 2):
        p = (a[0] + (b[0] - a[0]) * k / n, a[1] + (b[1] - a[1]) * k / n)
        q = (a[0] + (b[0] - a[0]) * (k + 1) / n, a[1] + (b[1] - a[1]) * (k + 1) / n)
        draw.line((p, q), fill=colour, width=2)


def _scatter(
    draw: ImageDraw.ImageDraw, x0: int, what: str, agree: dict[str, Any], pairs: list[dict]
) -> None:
    """One in-model vs real scatter panel at ``x0``, with the y = x line."""
    pear = "n/a" if agree["pearson"] is None else f"{agree['pearson']:.3f}"
    title = f"in-model vs real {what}, {agree['n_checkpoints']} checkpoints, Pearson {pear}"
    to_px = _panel(draw, x0, title, f"real {what} (pusht)", f"in-model {what}", 1.0)
    _dashed(draw, to_px(0.0, 0.0), to_px(1.0, 1.0), (150, 150, 150))
    for p in pairs:
        x, y = to_px(p["real"], p["model"])
        draw.ellipse((x - 4, y - 4, x + 4, y + 4), fill=COLOURS[p["dataset"]])


def draw_plot(report: dict[str, Any], out: Path) -> None:
    """Three panels: success vs steps (solid: ground truth, dashed: in the model), and the
    model-vs-real scatter of every checkpoint's success and mean max reward."""
    img = Image.new("RGB", (3 * W, H), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    rows = report["scores"]
    xmax = float(max([r["step"] for r in rows], default=1))
    curve = _panel(
        draw,
        0,
        "success vs training steps (solid: real, dashed: in model)",
        "training steps",
        "success",
        xmax,
    )
    for d in DATASETS:
        for world in WORLDS:
            pts = sorted(
                (r["step"], r["success"]) for r in rows if r["dataset"] == d and r["world"] == world
            )
            px = [curve(x, y) for x, y in pts]
            for a, b in itertools.pairwise(px):
                if world == "real":
                    draw.line((a, b), fill=COLOURS[d], width=2)
                else:
                    _dashed(draw, a, b, COLOURS[d])
            for x, y in px:
                draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=COLOURS[d])
    _scatter(draw, W, "success", report["agreement"], report["checkpoints"])
    reward_pairs = report.get("checkpoints_max_reward", [])
    _scatter(draw, 2 * W, "max reward", report["agreement_max_reward"], reward_pairs)
    for k, d in enumerate(DATASETS):
        draw.rectangle((W - 90, PAD + 8 + 16 * k, W - 80, PAD + 18 + 16 * k), fill=COLOURS[d])
        draw.text((W - 75, PAD + 6 + 16 * k), d, fill=(0, 0, 0))
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out)


def contact_sheet(store: Path, out: Path, cols: int = 5, scale: int = 2) -> int:
    """Each episode of ``store`` as one row of ``cols`` frames evenly spaced from its first
    to its last, ``scale`` times enlarged; returns the number of rows drawn."""
    import numpy as np

    from factory.store import EpisodeStore

    rows = []
    with EpisodeStore.open(store) as st:
        for i in range(st.n_episodes):
            frames = st.episode(i)["image"]  # (T, H, W, 3) uint8
            idx = np.linspace(0, len(frames) - 1, cols).round().astype(int)
            rows.append(np.concatenate([frames[j] for j in idx], axis=1))
    if not rows:
        return 0
    sheet = Image.fromarray(np.concatenate(rows, axis=0))
    sheet = sheet.resize((sheet.width * scale, sheet.height * scale), Image.Resampling.NEAREST)
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out)
    return len(rows)


# ---------------------------------------------------------------- markdown
def _f(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _demos_used(info: dict[str, Any]) -> int | None:
    """R's and G's stage info say ``used``; M's its ``real`` and ``generated`` parts."""
    if "used" in info:
        return int(info["used"])
    return (info.get("real", 0) + info.get("generated", 0)) or None


def markdown(res: dict[str, Any]) -> str:
    """The results JSON as the markdown tables of ``docs/RESULTS.md``."""
    demos, out = res["demos"], []
    out.append("| dataset | demos used | real success | in-model success |")
    out.append("| --- | --- | --- | --- |")
    for d in DATASETS:
        used = _demos_used(demos.get(d) or {})
        real, model = res["real_success"][d], res["model_success"][d]
        out.append(f"| {d} | {used if used is not None else 'n/a'} | {_f(real)} | {_f(model)} |")
    out += ["", "| statistic over checkpoints | success | mean max reward |", "| --- | --- | --- |"]
    a, b = res["agreement"], res["agreement_max_reward"]
    for key in ("pearson", "spearman", "mmrv", "n_checkpoints"):
        fmt = str if key == "n_checkpoints" else _f
        out.append(f"| {key} | {fmt(a[key])} | {fmt(b[key])} |")
    ci = "| Pearson 90% CI (bootstrap) | {} | {} |"
    out.append(
        ci.format(*("[" + ", ".join(_f(v) for v in x["pearson_ci90"]) + "]" for x in (a, b)))
    )
    out += ["", "| dataset | step | real success | in-model success | real max reward |"]
    out[-1] += " in-model max reward |"
    out.append("| --- | --- | --- | --- | --- | --- |")
    rewards = {(p["dataset"], p["step"]): p for p in res.get("checkpoints_max_reward", [])}
    for p in res["checkpoints"]:
        r = rewards.get((p["dataset"], p["step"]), {})
        cells = [_f(p["real"]), _f(p["model"]), _f(r.get("real")), _f(r.get("model"))]
        out.append(f"| {p['dataset']} | {p['step']} | " + " | ".join(cells) + " |")
    if res.get("hold_still"):
        out += [
            "",
            "| a policy that holds still | success | mean max reward |",
            "| --- | --- | --- |",
        ]
        for world, v in res["hold_still"].items():
            out.append(f"| {world} | {_f(v['success'])} | {_f(v['max_reward'])} |")
    out += ["", "| stage | wall time (s) |", "| --- | --- |"]
    out += [f"| {k} | {v:.0f} |" for k, v in res["wall_s"].items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import sys

    print(markdown(json.loads(Path(sys.argv[1]).read_text())), end="")
