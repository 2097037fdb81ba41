"""Issue 10's dynamics ablation: every recipe trained at the same CPU budget on the same
data, then evaluated by the same ``factory eval fidelity`` command; prints one JSON object.

Resumable: a recipe whose run directory already finished its budget is not retrained
(``factory train dynamics --resume`` with the same budget is a no-op), and a finished
evaluation (``fidelity.json`` in the run directory) is reused.

    .venv/bin/python bench/dynamics_ablation.py --base RUN_WITH_AE \
        --runs ~/.cache/demofactory/runs/abl --data data/pusht_play.zarr \
        --heldout data/pusht_heldout.zarr --cpu-minutes 20

``--base`` is a training directory holding the frozen autoencoder (and optionally a probe
and the latent cache), copied into each recipe's run directory first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BASE_FILES = (
    "config.json",
    "autoencoder.safetensors",
    "probe.safetensors",
    "latents.cache.safetensors",
)


def factory(*args: str) -> dict[str, Any]:
    """Run one ``factory`` command; its ``--json`` output parsed."""
    exe = Path(sys.executable).with_name("factory")
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    out = subprocess.run([str(exe), *args], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


def prepare(base: Path, run: Path) -> None:
    run.mkdir(parents=True, exist_ok=True)
    for name in BASE_FILES:
        src, dst = base / name, run / name
        if src.is_file() and not dst.exists():
            if name.endswith(".cache.safetensors"):
                os.link(src, dst)
            else:
                shutil.copy2(src, dst)


def train(args: argparse.Namespace, recipe: str, run: Path) -> dict[str, Any]:
    cmd = [
        "train",
        "dynamics",
        "--data",
        str(args.data),
        "--out",
        str(run),
        "--cpu-minutes",
        str(args.cpu_minutes),
        "--device",
        "cpu",
        "--recipe",
        recipe,
        "--json",
        *[f"--set={s}" for s in args.set],
    ]
    if (run / "dynamics.state.json").is_file():
        cmd.append("--resume")
    t0 = time.monotonic()
    metrics = factory(*cmd)
    metrics["command"] = "factory " + " ".join(cmd)
    metrics["session_wall_s"] = round(time.monotonic() - t0, 1)
    return metrics


def evaluate(args: argparse.Namespace, run: Path) -> dict[str, Any]:
    path = run / "fidelity.json"
    if path.is_file():
        return json.loads(path.read_text())
    result = factory(
        "eval",
        "fidelity",
        "--model",
        str(run),
        "--data",
        str(args.heldout),
        "--episodes",
        str(args.episodes),
        "--stability-frames",
        str(args.stability_frames),
        "--json",
    )
    path.write_text(json.dumps(result, indent=2))
    return result


def headline(fid: dict[str, Any]) -> dict[str, Any]:
    """The table's columns from a fidelity result."""
    h = fid.get("horizons", {})
    perm, stab = fid.get("permanence", {}), fid.get("stability", {})
    row: dict[str, Any] = {}
    for k in ("10", "50", "100"):
        if k in h:
            row[f"iou_h{k}"] = round(h[k]["iou"], 3)
            row[f"copy_iou_h{k}"] = round(h[k]["copy_iou"], 3)
            row[f"block_err_px_h{k}"] = round(h[k]["block_err_px"], 1)
    row["perm_iou_100"] = perm.get("iou_100")
    row["perm_block_drift_px"] = perm.get("block_drift_px")
    row["stab_t_ratio"] = stab.get("t_fraction_ratio_min")
    row["stab_block_found"] = stab.get("block_found_frac")
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, required=True)
    p.add_argument("--runs", type=Path, required=True)
    p.add_argument("--data", type=Path, default=Path("data/pusht_play.zarr"))
    p.add_argument("--heldout", type=Path, default=Path("data/pusht_heldout.zarr"))
    p.add_argument("--recipes", default="baseline,iws,iws_pixel_norm,unroll,motion,chunk")
    p.add_argument("--cpu-minutes", type=float, default=16.0)
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--stability-frames", type=int, default=3000)
    p.add_argument(
        "--set",
        action="append",
        default=["dynamics.task_dim=4", "train.threads=1"],
        help="--set overrides for every recipe (default: the task head, 1 torch thread)",
    )
    p.add_argument("--parallel", type=int, default=2, help="recipes at once (budgets are CPU time)")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = p.parse_args()

    def one(recipe: str) -> dict[str, Any]:
        run = args.runs / recipe
        prepare(args.base, run)
        metrics = train(args, recipe, run)
        fid = evaluate(args, run)
        keys = (
            "step",
            "elapsed_s",
            "cpu_s",
            "samples_per_s",
            "val_mse",
            "val_copy_mse",
            "val_task_pos_err",
            "val_task_angle_err_deg",
        )
        row = {"recipe": recipe, **{k: metrics.get(k) for k in keys}}
        row.update(command=metrics["command"], **headline(fid))
        print(json.dumps(row), file=sys.stderr, flush=True)
        return row

    with ThreadPoolExecutor(max_workers=max(args.parallel, 1)) as pool:
        rows = list(pool.map(one, args.recipes.split(",")))
    result = {
        "cpu_minutes": args.cpu_minutes,
        "episodes": args.episodes,
        "stability_frames": args.stability_frames,
        "rows": rows,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
