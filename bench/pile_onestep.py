"""Where a pile dynamics errs: its one-step disc error, split by what the disc is doing.

``factory eval fidelity`` scores rollouts, where every error compounds and a chaotic
world amplifies it. This bench asks one step at a time. For every transition of a store
(frames t-1, t -> t+1, the stored states and actions), each model's dynamics predicts the
next state from the true one, and each disc that truly moved (more than ``--moved-px``) is
put in one class by what it did:

- ``sliding``: it moved in the last step too, no other disc within ``--touch-px`` of its
  centre, the agent farther than ``--near-agent-px`` (a free disc: the world's damping
  alone decides its step);
- ``sliding_in_pile``: it moved in the last step, the agent far, another disc near;
- ``pushed_by_agent``: the agent within ``--near-agent-px``;
- ``hit_by_disc``: at rest in the last step, the agent far (another disc set it moving).

Per class: the count, the mean true step (px), the model's mean and median error (px) and
its share of the summed squared error. Also the gate's mistakes: moving discs the model
kept still (``missed``) and still discs it moved (``false_moves``), and for the sliding
class the error of the best single factor on the last step (a least-squares floor that
needs no network). Run it on the training store as well as a held-out one: equal errors
mean the dynamics underfits, so more data would not help, more training might.

    .venv/bin/python bench/pile_onestep.py --data data/pile_heldout.zarr \\
        --model models/pile [--model runs/pile_v3 ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from factory.model.files import load_model
from factory.model.object_set.model import ObjectSetModel
from factory.store import EpisodeStore


def transitions(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The store's states (F, 2 + 2 N), actions (F, 2) and the frames t (T,) whose
    t-1 and t+1 lie in the same episode."""
    with EpisodeStore.open(path, mode="r") as store:
        d = store.load(["state", "task_state", "action"])
        ends = store.episode_ends
    states = np.concatenate([d["state"][:, :2], d["task_state"]], 1).astype(np.float32)
    starts = np.concatenate([[0], ends[:-1]])
    t = np.concatenate([np.arange(s + 1, e - 1) for s, e in zip(starts, ends, strict=True)])
    return states, d["action"].astype(np.float32), t


def _discs(s: torch.Tensor) -> torch.Tensor:
    return s[:, 2:].unflatten(1, (-1, 2))


def classes(
    prev: torch.Tensor, cur: torch.Tensor, nxt: torch.Tensor, args: argparse.Namespace
) -> dict[str, torch.Tensor]:
    """(T, N) bool masks of the moving discs' classes (module docstring)."""
    before, now = _discs(prev), _discs(cur)
    moved = (_discs(nxt) - now).norm(dim=-1) > args.moved_px
    was = (now - before).norm(dim=-1) > args.moved_px
    near_agent = (now - cur[:, None, :2]).norm(dim=-1) < args.near_agent_px
    gap = (now[:, :, None] - now[:, None]).norm(dim=-1)
    gap = gap + torch.eye(gap.shape[1]) * 1e6
    alone = gap.amin(-1) > args.touch_px
    far = moved & ~near_agent
    return {
        "sliding": far & was & alone,
        "sliding_in_pile": far & was & ~alone,
        "pushed_by_agent": moved & near_agent,
        "hit_by_disc": far & ~was,
    }


@torch.no_grad()
def score(model: ObjectSetModel, data: tuple[np.ndarray, ...], args: argparse.Namespace) -> dict:
    """The per-class one-step errors of ``model``'s dynamics on the transitions."""
    states, actions, t = data
    assert model.dynamics is not None
    prev, cur, nxt = (torch.from_numpy(states[t + k]) for k in (-1, 0, 1))
    pred, _, _ = model.dynamics(prev, cur, torch.from_numpy(actions[t - 1]),
                                torch.from_numpy(actions[t]))  # fmt: skip
    err = (_discs(pred) - _discs(nxt)).norm(dim=-1)
    true_step = (_discs(nxt) - _discs(cur)).norm(dim=-1)
    moved = true_step > args.moved_px
    pred_moved = (_discs(pred) - _discs(cur)).norm(dim=-1) > args.moved_px
    total = float((err**2).sum())
    out: dict[str, Any] = {
        "moving": {"n": int(moved.sum()), "err_mean_px": float(err[moved].mean()),
                   "err_median_px": float(err[moved].median())},
        "missed": int((moved & ~pred_moved).sum()),
        "false_moves": int((~moved & pred_moved).sum()),
        "still_sq_share": float((err[~moved] ** 2).sum()) / max(total, 1e-12),
    }  # fmt: skip
    for name, mask in classes(prev, cur, nxt, args).items():
        if not mask.any():
            out[name] = {"n": 0}
            continue
        out[name] = {
            "n": int(mask.sum()),
            "step_px": float(true_step[mask].mean()),
            "err_mean_px": float(err[mask].mean()),
            "err_median_px": float(err[mask].median()),
            "sq_share": float((err[mask] ** 2).sum()) / max(total, 1e-12),
        }
    return out


def sliding_floor(data: tuple[np.ndarray, ...], args: argparse.Namespace) -> dict:
    """The least-squares factor on the last step over the sliding discs and its error."""
    states, _, t = data
    prev, cur, nxt = (torch.from_numpy(states[t + k]) for k in (-1, 0, 1))
    mask = classes(prev, cur, nxt, args)["sliding"]
    last = (_discs(cur) - _discs(prev))[mask]
    step = (_discs(nxt) - _discs(cur))[mask]
    k = float((last * step).sum() / (last**2).sum().clamp_min(1e-12))
    return {"factor": k, "err_mean_px": float((k * last - step).norm(dim=-1).mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="a pile store (real episodes)")
    ap.add_argument("--model", type=Path, action="append", required=True,
                    help="an object_set model directory (repeatable)")  # fmt: skip
    ap.add_argument("--moved-px", type=float, default=0.01)
    ap.add_argument("--near-agent-px", type=float, default=40.0)
    ap.add_argument("--touch-px", type=float, default=24.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for m in args.model:
        if not (m / "config.json").is_file():
            ap.error(f"{m} is not a model directory (no config.json)")
    if not args.data.is_dir():
        ap.error(f"{args.data} is not a store")
    data = transitions(args.data)
    models = {}
    for m in args.model:
        model, model_id = load_model(m, parts=("dynamics",))
        if not isinstance(model, ObjectSetModel):
            ap.error(f"{m} is a {model.kind} model, not object_set")
        models[str(m)] = {"id": model_id, **score(model, data, args)}
    report = {"data": str(args.data), "transitions": len(data[2]),
              "sliding_floor": sliding_floor(data, args), "models": models}  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
