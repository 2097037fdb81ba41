"""The ceiling of the pile's open-loop transfer: the ground truth replayed against itself.

``factory eval transfer`` replays a demo's actions open loop in the real env and asks
whether it still succeeds. For the pile that is asked of a chaotic system: a disc pushed by
another disc goes where a fraction of a pixel of contact geometry sends it. This bench
measures how much of that any model could reach. It runs the scripted ``pile_expert``
closed loop in the ground truth (no pixels) from each seed until its score first reaches
``stop`` (the demo's end, as ``factory generate`` ends one at the model's success reading,
``--success-score`` for a stricter one), then replays the same actions open loop in the
ground truth from the same start with every disc moved by Gaussian noise of ``sigma`` px
per axis (``--replays`` draws each). ``sigma`` 0 must replay every success (the sim is
deterministic); a larger ``sigma`` is a model exact except for that much error in where it
saw the discs at the start.

Per stop score and sigma: the fraction of replays that succeed (score >= 0.9 at some
step) given the demo succeeded, and the median mean disc distance at the end (discs matched
by least total distance).

    .venv/bin/python bench/pile_chaos.py --seeds 300000:300050 --sigmas 0,0.01,0.1,1 \\
        --stops 0.9,1.0 --replays 4 [--param depth=40]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from factory.envs import pile_geometry as geo
from factory.envs.pile_sim import PileParams, PileSim, pile_layout
from factory.eval.pile_metrics import disc_position_error
from factory.generators import make_generator
from factory.world import Observation

BLANK = np.zeros((1, 1, 3), np.uint8)


def _obs(sim: PileSim) -> Observation:
    discs = sim.disc_xy().ravel().astype(np.float32)
    score = float(geo.fraction_inside(discs))
    return Observation(BLANK, sim.agent_xy().astype(np.float32), discs, score, score >= 0.9)


def expert_demo(
    seed: int, steps: int, stop: float, n_discs: int, params: dict[str, str]
) -> dict[str, Any]:
    """The expert (its knobs ``params``, as ``factory generate --param``) from ``seed``
    until its score first reaches ``stop`` (at most ``steps`` actions): the start (agent
    (2,), discs (N, 2)), the actions (T, 2) and whether it stopped there."""
    sim = PileSim(PileParams(n_discs))
    agent, discs = pile_layout(seed, n_discs)
    sim.reset(seed)
    policy = make_generator("pile_expert", **params)
    obs = _obs(sim)
    policy.reset(seed, obs)
    actions = []
    reached = False
    for _ in range(steps):
        action = np.asarray(policy.act(obs), np.float64)
        actions.append(action)
        sim.step(action)
        obs = _obs(sim)
        if obs.score >= stop - 1e-9:
            reached = True
            break
    return {"agent": agent, "discs": discs, "actions": np.array(actions), "reached": reached}


def replay(agent: np.ndarray, discs: np.ndarray, actions: np.ndarray) -> tuple[bool, np.ndarray]:
    """Open-loop replay from the given start: (success at some step, final discs (N, 2))."""
    sim = PileSim(PileParams(len(discs)))
    sim.reset_to(agent, np.clip(discs, geo.WALL + geo.DISC_RADIUS, geo.BOARD_SIZE - 15.0))
    success = False
    for action in actions:
        sim.step(action)
        success = success or bool(geo.fraction_inside(sim.disc_xy().ravel()) >= 0.9 - 1e-9)
    return success, sim.disc_xy()


def measure(
    demos: list[dict[str, Any]], sigmas: list[float], replays: int, seed: int
) -> dict[str, Any]:
    """Replay every demo that reached its stop ``replays`` times per sigma."""
    rng = np.random.default_rng(seed)
    done = [d for d in demos if d["reached"]]
    # the real end each perturbed replay is compared with: the unperturbed replay's
    ends = [replay(d["agent"], d["discs"], d["actions"])[1] for d in done]
    out: dict[str, Any] = {}
    for sigma in sigmas:
        wins, errs = [], []
        for d, end in zip(done, ends, strict=True):
            for _ in range(1 if sigma == 0 else replays):
                start = d["discs"] + rng.normal(0.0, sigma, d["discs"].shape)
                ok, final = replay(d["agent"], start, d["actions"])
                wins.append(ok)
                errs.append(disc_position_error(final.ravel(), end.ravel()))
        out[f"{sigma:g}"] = {
            "replays": len(wins),
            "real_success_given_success": float(np.mean(wins)) if wins else None,
            "final_disc_err_px_median": float(np.median(errs)) if errs else None,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="300000:300050", help="expert seeds, START:STOP")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--stops", default="0.9,1.0", help="scores that end a demo, comma-separated")
    ap.add_argument("--sigmas", default="0,0.01,0.1,1", help="start noise (px), comma-separated")
    ap.add_argument("--replays", type=int, default=4, help="noisy replays per demo and sigma")
    ap.add_argument("--n-discs", type=int, default=30)
    ap.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pile_expert knob, as `factory generate --param` (repeatable)",
    )
    args = ap.parse_args()
    if bad := [item for item in args.param if "=" not in item]:
        ap.error(f"--param takes KEY=VALUE, got {bad[0]!r}")
    params = dict(item.split("=", 1) for item in args.param)
    lo, hi = (int(v) for v in args.seeds.split(":"))
    sigmas = [float(s) for s in args.sigmas.split(",")]
    start = time.perf_counter()
    result: dict[str, Any] = {
        "seeds": args.seeds,
        "steps": args.steps,
        "sigmas": sigmas,
        "params": params,
    }
    for stop in (float(s) for s in args.stops.split(",")):
        demos = [expert_demo(s, args.steps, stop, args.n_discs, params) for s in range(lo, hi)]
        reached = [d for d in demos if d["reached"]]
        result[f"stop_{stop:g}"] = {
            "demos": len(demos),
            "reached": len(reached),
            "mean_steps": float(np.mean([len(d["actions"]) for d in reached])) if reached else None,
            "by_sigma": measure(demos, sigmas, args.replays, seed=lo),
        }
    result["wall_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
