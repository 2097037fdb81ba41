"""Pile: the shared-state ``object_set`` kind against pixel-only ``latent_grid`` models, one
per camera, at an equal budget on the same data, judged by the same commands.

    uv run python bench/pile_kinds.py --work ~/.cache/demofactory/runs/pile_kinds \\
        --data data/pile_play.zarr --heldout data/pile_heldout.zarr --minutes 55

In ``WORK`` (results in ``WORK/results/<kind>/``), one step after another and skipping
what is already there (so a rerun resumes); ``--object-set-model DIR`` scores that model
in step 1 instead of training one:

1. ``object_set``: ``factory train all --kind object_set --minutes M`` in
   ``WORK/object_set`` (resumed with ``--resume`` if interrupted); ``factory eval fidelity``
   on the held-out store; ``factory generate --generator pile_expert --steps 400
   --episodes E --seed S`` inside it and ``factory eval transfer`` of that store.
2. ``latent_grid``: ``factory train all --kind latent_grid --camera top`` and ``--camera
   side``, M/2 minutes each (the seed's one model per camera; together the same budget),
   in ``WORK/latent_grid_top`` and ``WORK/latent_grid_side``; ``factory eval fidelity
   --model TOP --side-model SIDE`` on the held-out store (the pair as one model of both
   views).

Then it writes ``WORK/pile_kinds.json`` and prints the markdown table of
docs/MODEL_CARD_pile.md. One heavy job runs at a time; run nothing else beside it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kind_comparison import _factory, table

HORIZONS = ("10", "50", "100")


def _train(kind: str, run: Path, a: argparse.Namespace, minutes: float, *extra: str) -> None:
    """``train all`` into ``run`` unless its model is there (resumed where it stopped)."""
    if (run / "model" / "config.json").exists():
        return
    resume = ["--resume"] if (run / "train_all.json").exists() else []
    args = ["train", "all", "--kind", kind, *extra, "--data", str(a.data), "--out", str(run)]
    _factory([*args, "--minutes", str(minutes), *resume], run.with_name(run.name + ".json"))


def _steps(steps: list[tuple[str, list[str]]], files: dict[str, Path]) -> None:
    for name, args in steps:
        if not files[name].exists():
            _factory(args, files[name])


def run_object_set(a: argparse.Namespace) -> dict[str, Path]:
    """Train (or, with ``--object-set-model``, take) and evaluate the object_set kind; its
    result files (no ``train`` file for a given model: its cost is its own card's)."""
    run, res = a.work / "object_set", a.work / "results" / "object_set"
    res.mkdir(parents=True, exist_ok=True)
    trained: dict[str, Path] = {}
    if a.object_set_model is None:
        _train("object_set", run, a, a.minutes)
        trained["train"] = run / "train_all.json"
    files = {k: res / f"{k}.json" for k in ("fidelity", "expert", "transfer")}
    model = str(run / "model" if a.object_set_model is None else a.object_set_model)
    expert = f"--generator pile_expert --steps 400 --episodes {a.episodes} --seed {a.seed}"
    expert += f" --workers 1 --out {res / 'expert.zarr'}"
    steps = [
        ("fidelity", ["eval", "fidelity", "--model", model, "--data", str(a.heldout)]),
        ("expert", ["generate", "--model", model, *expert.split()]),
        ("transfer", ["eval", "transfer", str(res / "expert.zarr")]),
    ]
    _steps(steps, files)
    return {**trained, **files}


def run_latent_grid(a: argparse.Namespace) -> dict[str, Path]:
    """Train the two one-camera latent_grid models and score them as a pair."""
    res = a.work / "results" / "latent_grid"
    res.mkdir(parents=True, exist_ok=True)
    runs = {cam: a.work / f"latent_grid_{cam}" for cam in ("top", "side")}
    for cam, run in runs.items():
        _train("latent_grid", run, a, a.minutes / 2, "--camera", cam)
    fid = res / "fidelity.json"
    pair = ["--model", str(runs["top"] / "model"), "--side-model", str(runs["side"] / "model")]
    _steps([("fidelity", ["eval", "fidelity", *pair, "--data", str(a.heldout)])], {"fidelity": fid})
    trains = {f"train_{cam}": run / "train_all.json" for cam, run in runs.items()}
    return {**trains, "fidelity": fid}


def _train_cost(*plans: dict[str, Any]) -> dict[str, float | None]:
    if not plans:  # a given model: its cost is on its card
        return {"train_wall_s": None, "train_cpu_s": None}
    stages = [s for p in plans for s in p["stages"].values()]
    return {
        "train_wall_s": sum(s.get("wall_s", 0.0) for s in stages),
        "train_cpu_s": sum(s.get("metrics", {}).get("cpu_s", 0.0) for s in stages),
    }


def _fidelity_row(fid: dict[str, Any]) -> dict[str, Any]:
    hor, hold = fid["horizons"], fid.get("hold_still", {})
    row: dict[str, Any] = {"recon_of": fid.get("recon_of"), "recon_psnr": fid.get("recon_psnr")}
    for key in (
        "disc_iou_top",
        "copy_disc_iou_top",
        "disc_iou_side",
        "copy_disc_iou_side",
        "swept_err",
        "disc_err_px",
        "count_gap",
        "real_count_gap",
        "face_count_gap",
        "real_face_count_gap",
        "centroid_gap_px",
    ):
        row.update({f"{key}_h{h}": hor[h].get(key) for h in HORIZONS})  # fmt: skip
    row["hold_disc_drift_px_max"] = hold.get("disc_drift_px_max")
    row["hold_moved"] = hold.get("moved")
    row["hold_disc_iou_top_100"] = hold.get("disc_iou_top_100")
    return row


def summarise(files: dict[str, Path]) -> dict[str, Any]:
    """One kind's row from its result files."""
    r = {k: json.loads(p.read_text()) for k, p in files.items()}
    trains = [v for k, v in r.items() if k.startswith("train")]
    row = {**_train_cost(*trains), **_fidelity_row(r["fidelity"])}
    if "expert" in r:
        row["expert_model_success"] = r["expert"].get("success_rate")
        row["transfer_real_success"] = r["transfer"].get("real_success")
        row["real_given_model"] = r["transfer"].get("real_success_given_model_success")
        row["transfer_disc_px"] = r["transfer"].get("disc_err_px_median")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--heldout", type=Path, required=True)
    ap.add_argument("--minutes", type=float, default=55.0)
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=100000)
    ap.add_argument(
        "--object-set-model",
        type=Path,
        default=None,
        help="score this object_set model dir instead of training one (its cost: its card's)",
    )
    a = ap.parse_args()
    if a.object_set_model is not None and not (a.object_set_model / "config.json").is_file():
        raise SystemExit(f"--object-set-model {a.object_set_model}: no model directory there")
    rows = {
        "object_set": summarise(run_object_set(a)),
        "latent_grid": summarise(run_latent_grid(a)),
    }
    out = {"minutes": a.minutes, "data": str(a.data), "heldout": str(a.heldout), "kinds": rows}
    if a.object_set_model is not None:
        out["object_set_model"] = str(a.object_set_model)
    (a.work / "pile_kinds.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    print(table(rows))


if __name__ == "__main__":
    main()
