"""Benchmark the scripted generators in the ground-truth PushT env; prints one JSON object.

Expert: success rate (coverage > 0.95 within ``--steps``), mean final and max coverage and
mean steps to success over the ``--seeds`` range (keep it disjoint from tuning seeds).
Play: contact fraction and the spread of block poses over ``--play-episodes`` episodes.
Also the env's raw speed (steps/s with pixels) at batch 1 and 8.

    .venv/bin/python bench/expert_eval.py --seeds 100000:100100 --steps 300
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from factory.envs.pusht import PushTWorld
from factory.generators import make_generator


def eval_expert(world: PushTWorld, seeds: range, steps: int) -> dict[str, Any]:
    finals, maxes, to_success = [], [], []
    start = time.perf_counter()
    for seed in seeds:
        gen = make_generator("expert")
        obs = world.reset(seeds=np.array([seed]))
        gen.reset(seed, obs.item(0))
        best, first = 0.0, None
        for t in range(steps):
            obs = world.step(gen.act(obs.item(0))[None])
            best = max(best, float(obs.score[0]))
            if first is None and obs.success[0]:
                first = t + 1
        finals.append(float(obs.score[0]))
        maxes.append(best)
        if first is not None:
            to_success.append(first)
    n = len(finals)
    return {
        "episodes": n,
        "seeds": f"{seeds.start}:{seeds.stop}",
        "steps": steps,
        "success_rate": len(to_success) / n,
        "final_success_rate": float(np.mean(np.array(finals) > 0.95)),
        "mean_final_coverage": float(np.mean(finals)),
        "mean_max_coverage": float(np.mean(maxes)),
        "mean_steps_to_success": float(np.mean(to_success)) if to_success else None,
        "wall_s": round(time.perf_counter() - start, 1),
    }


def eval_play(world: PushTWorld, episodes: int, steps: int) -> dict[str, Any]:
    contacts, finals, poses = [], [], []
    for seed in range(episodes):
        gen = make_generator("play")
        obs = world.reset(seeds=np.array([seed]))
        gen.reset(seed, obs.item(0))
        for _ in range(steps):
            obs = world.step(gen.act(obs.item(0))[None])
            contacts.append(bool(obs.info["contact"][0]))
            poses.append(obs.task_state[0])
        finals.append(obs.task_state[0])
    fin, allp = np.array(finals), np.array(poses)
    names = ("block_x", "block_y", "block_angle")

    def stats(arr: np.ndarray) -> dict[str, dict[str, float]]:
        return {
            name: {
                "mean": round(float(arr[:, i].mean()), 3),
                "std": round(float(arr[:, i].std()), 3),
                "q05": round(float(np.quantile(arr[:, i], 0.05)), 3),
                "q95": round(float(np.quantile(arr[:, i], 0.95)), 3),
            }
            for i, name in enumerate(names)
        }

    return {
        "episodes": episodes,
        "steps": steps,
        "contact_fraction": float(np.mean(contacts)),
        "final_block_pose": stats(fin),
        "all_block_poses": stats(allp),
    }


def env_speed(resolution: int, batch: int, steps: int = 200) -> float:
    world = PushTWorld(batch_size=batch, resolution=resolution)
    world.reset(seeds=np.arange(batch))
    rng = np.random.default_rng(0)
    acts = rng.uniform(100, 412, size=(steps, batch, 2))
    start = time.perf_counter()
    for a in acts:
        world.step(a)
    world.close()
    return steps * batch / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="100000:100100", help="expert seeds, START:STOP")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--play-episodes", type=int, default=20)
    ap.add_argument("--play-steps", type=int, default=200)
    ap.add_argument("--resolution", type=int, default=96)
    ap.add_argument("--skip-play", action="store_true")
    args = ap.parse_args()
    lo, hi = (int(v) for v in args.seeds.split(":"))
    world = PushTWorld(batch_size=1, resolution=args.resolution)
    out: dict[str, Any] = {"expert": eval_expert(world, range(lo, hi), args.steps)}
    if not args.skip_play:
        out["play"] = eval_play(world, args.play_episodes, args.play_steps)
    world.close()
    out["env_steps_per_s"] = {f"batch{b}": round(env_speed(args.resolution, b), 1) for b in (1, 8)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
