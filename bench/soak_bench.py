"""Soak the teleop recording node: 9000 frames (10 minutes at 15 FPS), scripted device,
headless, on the shipped model unless ``--model DIR`` (or ``--world pusht``) says otherwise.

    uv run python bench/soak_bench.py
    uv run python bench/soak_bench.py --model runs/v2
    uv run python bench/soak_bench.py --model runs/v2 --frames 900     # a one-minute check

Prints one JSON object: the node's summary (episodes, frames, achieved_fps, late_frac,
latency_ms_p99, rss_growth_mb, ...) and the goals of issue 4: at least 99% of frames on
deadline, RSS growth under 50 MB, every episode committed. Baselines, in the same run:

- the world's unpaced step time at batch 1 under the same generator
  (``step_ms_p50_unpaced``); ``headroom_x`` is the loop period over it;
- an empty loop at the same fps in a sibling process for the whole soak
  (``empty_loop_late_frac``): the share of its ticks that the OS woke past their
  deadline, i.e. the lateness that the machine's load alone causes;
- the load average before and after, and the RSS at each commit, from which
  ``rss_mb_per_episode`` (a least-squares slope over the second half) tells a steady
  state from a leak.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from factory.errors import FactoryError
from factory.generators import make_generator
from factory.store import EpisodeStore
from pipelines.teleop import TeleopConfig, build_world, run_teleop


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model dir (default: shipped)")
    parser.add_argument("--world", default=None, help="soak the ground truth instead (pusht)")
    parser.add_argument("--frames", type=int, default=9000)
    parser.add_argument("--steps", type=int, default=300, help="frames per episode")
    parser.add_argument("--fps", type=float, default=15.0)
    parser.add_argument("--generator", default="play")
    parser.add_argument("--resolution", type=int, default=96, help="--world only")
    parser.add_argument("--compute", default="cpu", help="model device: cpu | cuda | auto")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--baseline-steps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None, help="store (default: a temp dir)")
    return parser.parse_args(argv)


def unpaced_step_ms(cfg: TeleopConfig, steps: int) -> np.ndarray:
    """Milliseconds per world step (steps,), batch 1, no pacing, generator in the loop."""
    world, _ = build_world(cfg)
    try:
        generator = make_generator(cfg.generator)
        obs = world.reset(seeds=np.array([cfg.seed]))
        generator.reset(cfg.seed, obs.item(0))
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            action = np.asarray(generator.act(obs.item(0)), np.float32)
            obs = world.step(action[None])
            times.append((time.perf_counter() - start) * 1e3)
    finally:
        world.close()
    return np.asarray(times[min(10, steps // 2) :])  # the first steps warm up


EMPTY_LOOP = """
import json, signal, sys, time
period, late, ticks, stop = 1.0 / float(sys.argv[1]), 0, 0, []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
deadline = time.perf_counter() + period
while not stop:
    now = time.perf_counter()
    if now > deadline:
        late, deadline = late + 1, now + period
    else:
        time.sleep(deadline - now)
        deadline += period
    ticks += 1
print(json.dumps({"ticks": ticks, "late": late}))
"""


def start_empty_loop(fps: float) -> subprocess.Popen[str]:
    """An empty fixed-rate loop in a sibling process (stopped by :func:`stop_empty_loop`)."""
    cmd = [sys.executable, "-c", EMPTY_LOOP, str(fps)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def stop_empty_loop(proc: subprocess.Popen[str]) -> float:
    """The share of the empty loop's ticks that were late."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    stats = json.loads(out)
    return float(stats["late"]) / max(1, int(stats["ticks"]))


def rss_slope(out: Path) -> float:
    """MB per episode of the RSS at commit, fitted over the second half of the episodes."""
    with EpisodeStore.open(out) as store:
        rss = [float(m.extra.get("rss_mb", np.nan)) for m in store.all_meta()]
    half = np.asarray(rss[len(rss) // 2 :])
    if len(half) < 2 or not np.all(np.isfinite(half)):
        return 0.0
    return float(np.polyfit(np.arange(len(half)), half, 1)[0])


def soak(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    episodes = max(1, args.frames // args.steps)
    cfg = TeleopConfig(
        out=out,
        device="scripted",
        model=args.model,
        world=args.world,
        fps=args.fps,
        episodes=episodes,
        steps=args.steps,
        headless=True,
        generator=args.generator,
        resolution=args.resolution,
        compute=args.compute,
        threads=args.threads,
        task="soak",
    )
    step_ms = float(np.median(unpaced_step_ms(cfg, args.baseline_steps)))
    load_before = os.getloadavg()
    empty = start_empty_loop(args.fps)
    try:
        summary = run_teleop(cfg)
    finally:
        empty_late = stop_empty_loop(empty)
    load_after = os.getloadavg()
    with EpisodeStore.open(out) as store:
        stored, lengths = store.n_episodes, store.episode_lengths.tolist()
    committed = stored == episodes and summary["discarded"] == 0 and set(lengths) == {args.steps}
    goals = {
        "on_deadline_ge_99pct": 1.0 - summary["late_frac"] >= 0.99,
        "rss_growth_lt_50mb": summary["rss_growth_mb"] < 50.0,
        "all_committed": committed,
    }
    return {
        "bench": "soak",
        "cpus": os.cpu_count(),
        "model": str(args.model) if args.model else ("" if args.world else "shipped"),
        **summary,
        "step_ms_p50_unpaced": step_ms,
        "headroom_x": (1e3 / args.fps) / step_ms,
        "empty_loop_late_frac": empty_late,
        "loadavg_1m_before_after": [load_before[0], load_after[0]],
        "rss_mb_per_episode": rss_slope(out),
        "expected_episodes": episodes,
        "all_committed": committed,
        "goals": goals,
        "goals_met": all(goals.values()),
    }


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.frames < 1 or args.steps < 1:
        print("--frames and --steps must be >= 1", file=sys.stderr)
        return 2
    try:
        if args.out is not None:
            result = soak(args, args.out)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                result = soak(args, Path(tmp) / "soak.zarr")
    except FactoryError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
