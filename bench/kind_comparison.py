"""Both model kinds at an equal budget on the same data, judged by the same commands.

    uv run python bench/kind_comparison.py --work ~/.cache/demofactory/runs/kinds \\
        --data data/pusht_play.zarr --heldout data/pusht_heldout.zarr --minutes 45

For each kind (``object_state``, ``latent_grid``) it runs, in ``WORK/<kind>/`` (results in
``WORK/results/<kind>/``), one step after another and skipping what is already there (so
a rerun resumes):

1. ``factory train all --kind K --minutes M`` (resumed with ``--resume`` if interrupted);
2. ``factory eval fidelity`` on the held-out store (16 episodes, 9,000 stability frames);
3. ``factory generate --generator expert --steps 300 --episodes 20 --seed 300000`` and
   ``factory eval transfer`` of that store (held-out seeds);
4. ``factory bench rollout --baseline models/pusht_latent_grid`` (batch-1 FPS and its ratio
   to the shipped latent_grid model's, timed in the same run).

Then it writes ``WORK/kind_comparison.json`` and prints the markdown table of
docs/MODEL_CARD.md. One heavy job runs at a time; run nothing else beside it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

KINDS = ("object_state", "latent_grid")
REPO = Path(__file__).resolve().parents[1]
HORIZONS = ("10", "50", "100")


def _factory(args: list[str], out: Path) -> None:
    """Run ``factory ARGS --json`` (this venv's), writing stdout to ``out`` atomically."""
    tmp = out.with_name(out.name + ".partial")
    with tmp.open("w") as f:
        done = subprocess.run([sys.executable, "-m", "pipelines.cli", *args, "--json"], stdout=f)
    if done.returncode != 0:
        raise SystemExit(f"factory {' '.join(args[:2])} failed (exit {done.returncode})")
    tmp.replace(out)


def run_kind(kind: str, a: argparse.Namespace) -> dict[str, Path]:
    """Train and evaluate one kind in ``WORK/<kind>``; the result files."""
    d, res = a.work / kind, a.work / "results" / kind  # train all wants an empty run dir
    res.mkdir(parents=True, exist_ok=True)
    files = {k: res / f"{k}.json" for k in ("train", "fidelity", "expert", "transfer", "bench")}
    if not files["train"].exists():
        resume = ["--resume"] if (d / "train_all.json").exists() else []
        train = ["train", "all", "--kind", kind, "--data", str(a.data), "--out", str(d)]
        _factory([*train, "--minutes", str(a.minutes), *resume], files["train"])
    model = str(d / "model")
    expert = f"--generator expert --steps 300 --episodes {a.episodes} --seed {a.seed}"
    expert += f" --batch-size 10 --workers 1 --out {res / 'expert.zarr'}"
    steps = [
        ("fidelity", ["eval", "fidelity", "--model", model, "--data", str(a.heldout)]),
        ("expert", ["generate", "--model", model, *expert.split()]),
        ("transfer", ["eval", "transfer", str(res / "expert.zarr")]),
        ("bench", ["bench", "rollout", "--model", model, "--baseline", str(a.baseline)]),
    ]
    for name, args in steps:
        if not files[name].exists():
            _factory(args, files[name])
    return files


def summarise(files: dict[str, Path]) -> dict[str, Any]:
    """The comparison's row for one kind from its result files."""
    r = {k: json.loads(p.read_text()) for k, p in files.items()}
    fid, hor = r["fidelity"], r["fidelity"]["horizons"]
    perm, stab = fid.get("permanence", {}), fid.get("stability", {})
    reader = fid["reader_real"] if "reader_real" in fid else fid["probe_real"]  # older runs
    cpu_s = sum(s["metrics"].get("cpu_s", 0.0) for s in r["train"]["stages"].values())
    return {
        "train_wall_s": sum(s["wall_s"] for s in r["train"]["stages"].values()),
        "train_cpu_s": cpu_s,
        "recon_of": fid["recon_of"],
        "recon_psnr": fid["recon_psnr"],
        "recon_iou": fid["recon_iou"],
        "recon_agent_iou": fid["recon_agent_iou"],
        **{f"iou_h{h}": hor[h]["iou"] for h in HORIZONS},
        **{f"copy_iou_h{h}": hor[h]["copy_iou"] for h in HORIZONS},
        **{f"block_px_median_h{h}": hor[h]["block_err_px_median"] for h in HORIZONS},
        **{f"angle_deg_median_h{h}": hor[h]["angle_err_deg_median"] for h in HORIZONS},
        "permanence_iou_100": perm.get("iou_100"),
        "hold_drift_px": perm.get("block_drift_px"),
        "stability_t_ratio_min": stab.get("t_fraction_ratio_min"),
        "stability_t_ratio_max": stab.get("t_fraction_ratio_max"),
        "stability_found": stab.get("block_found_frac"),
        "reader": reader["reader"],
        "reader_block_px": reader["block_px"],
        "reader_angle_deg": reader["angle_deg"],
        "reader_agent_px": reader["agent_px"],
        "expert_model_success": r["expert"]["success_rate"],
        "real_given_model": r["transfer"].get("real_success_given_model_success"),
        "transfer_real_success": r["transfer"].get("real_success"),
        "transfer_block_px": r["transfer"].get("block_err_px_median"),
        "fps_batch1": r["bench"]["fps_batch1"],
        "fps_ratio_vs_latent_grid_v2": r["bench"].get("fps_ratio_vs_baseline"),
    }


def table(rows: dict[str, dict[str, Any]]) -> str:
    """Markdown: one row per measure, one column per kind."""
    kinds = list(rows)
    lines = ["| measure | " + " | ".join(f"`{k}`" for k in kinds) + " |"]
    lines.append("| --- |" + " --- |" * len(kinds))
    for key in rows[kinds[0]]:
        vals = []
        for k in kinds:
            v = rows[k].get(key)
            vals.append(f"{v:.3g}" if isinstance(v, float) else str(v))
        lines.append(f"| {key} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--heldout", type=Path, required=True)
    ap.add_argument("--minutes", type=float, default=45.0)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=300000)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument(
        "--baseline",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "models" / "pusht_latent_grid",
        help="model dir timed beside each kind in bench rollout (default: the latent_grid model)",
    )
    a = ap.parse_args()
    rows = {kind: summarise(run_kind(kind, a)) for kind in a.kinds}
    out = {"minutes": a.minutes, "data": str(a.data), "heldout": str(a.heldout), "kinds": rows}
    (a.work / "kind_comparison.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
