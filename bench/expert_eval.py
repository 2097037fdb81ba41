"""Benchmark the scripted generators in a ground-truth env; prints one JSON object.

``--env pusht`` (default): ``expert`` and ``play``; ``--env pile``: ``pile_expert`` and
``pile_play``. Expert: success rate (the world's success within ``--steps``: PushT coverage
> 0.95, pile fraction of discs in the goal >= 0.9), mean final and max score and mean steps
to success over the ``--seeds`` range (keep it disjoint from tuning seeds). Play: contact
fraction and the spread of block poses (pile: of every disc's position) over
``--play-episodes`` episodes. Also the env's raw speed (steps/s with pixels) at batch 1
and 8. The episodes run in the episode runner (:class:`factory.record.EpisodeRunner`), one
batch row per seed.

    .venv/bin/python bench/expert_eval.py --seeds 100000:100100 --steps 300
    .venv/bin/python bench/expert_eval.py --env pile --seeds 100000:100100 --steps 400
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

from factory.envs import make_world
from factory.generators import make_generator
from factory.record import EpisodeResult
from factory.record.runner import EpisodeRunner, EpisodeSpec, StepHook
from factory.world import World, WorldObs

GENERATORS = {"pusht": ("expert", "play"), "pile": ("pile_expert", "pile_play")}
"""env -> (expert generator, play generator)."""
SUCCESS = {"pusht": lambda s: s > 0.95, "pile": lambda s: s >= 0.9 - 1e-6}
"""env -> success of final scores (N,) -> (N,) bool."""


def eval_expert(seeds: range, steps: int, resolution: int, env: str = "pusht") -> dict[str, Any]:
    """The expert on every seed at once (one batch row each, no stop on success)."""
    n = len(seeds)
    first = np.zeros(n, np.int64)  # each row's first successful step (1-based), 0: none

    def on_step(t: int, obs: WorldObs) -> None:
        first[(first == 0) & obs.success] = t + 1

    start = time.perf_counter()
    results = _run(env, GENERATORS[env][0], seeds, steps, resolution, on_step)
    finals = np.array([r.meta.score or 0.0 for r in results])
    to_success = first[first > 0]
    return {
        "episodes": n,
        "seeds": f"{seeds.start}:{seeds.stop}",
        "steps": steps,
        "success_rate": len(to_success) / n,
        "final_success_rate": float(np.mean(SUCCESS[env](finals))),
        "mean_final_coverage": float(np.mean(finals)),
        "mean_max_coverage": float(np.mean([r.meta.extra["max_score"] for r in results])),
        "mean_steps_to_success": float(np.mean(to_success)) if len(to_success) else None,
        "wall_s": round(time.perf_counter() - start, 1),
    }


def eval_play(episodes: int, steps: int, resolution: int, env: str = "pusht") -> dict[str, Any]:
    """Play on seeds ``0 .. episodes-1`` at once: contacts and block poses of every step."""
    contacts, poses = [], []

    def on_step(t: int, obs: WorldObs) -> None:
        contacts.append(obs.info["contact"].copy())
        poses.append(obs.task_state.copy())

    _run(env, GENERATORS[env][1], range(episodes), steps, resolution, on_step)
    fin, allp = poses[-1], np.concatenate(poses)
    names: tuple[str, ...] = ("block_x", "block_y", "block_angle")
    if env == "pile":  # every disc's position, pooled over the discs
        fin, allp = fin.reshape(-1, 2), allp.reshape(-1, 2)
        names = ("disc_x", "disc_y")

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
        "contact_fraction": float(np.mean(np.concatenate(contacts))),
        "final_block_pose": stats(fin),
        "all_block_poses": stats(allp),
    }


def _run(
    env: str, generator: str, seeds: range, steps: int, resolution: int, on_step: StepHook
) -> list[EpisodeResult]:
    """``generator`` for ``steps`` steps from every seed, one batch row each."""
    world = make_world(env, batch_size=len(seeds), resolution=resolution)
    try:
        runner = EpisodeRunner(world, source="real", record=False)
        policies = [make_generator(generator) for _ in seeds]
        return runner.run(policies, [EpisodeSpec(seed, steps) for seed in seeds], on_step)
    finally:
        world.close()


def env_speed(resolution: int, batch: int, steps: int = 200, env: str = "pusht") -> float:
    world: World = make_world(env, batch_size=batch, resolution=resolution)
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
    ap.add_argument("--env", default="pusht", choices=sorted(GENERATORS))
    ap.add_argument("--seeds", default="100000:100100", help="expert seeds, START:STOP")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--play-episodes", type=int, default=20)
    ap.add_argument("--play-steps", type=int, default=200)
    ap.add_argument("--resolution", type=int, default=96)
    ap.add_argument("--skip-play", action="store_true")
    args = ap.parse_args()
    lo, hi = (int(v) for v in args.seeds.split(":"))
    out: dict[str, Any] = {
        "expert": eval_expert(range(lo, hi), args.steps, args.resolution, args.env)
    }
    if not args.skip_play:
        out["play"] = eval_play(args.play_episodes, args.play_steps, args.resolution, args.env)
    out["env_steps_per_s"] = {
        f"batch{b}": round(env_speed(args.resolution, b, env=args.env), 1) for b in (1, 8)
    }
    if args.env != "pusht":
        out = {"env": args.env, **out}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
