"""The world model inside lerobot (issue 13): the env plugin's cost and lerobot-record's pace.

    uv run python bench/lerobot_bench.py env --json        # env vs bare model, batch 10
    uv run python bench/lerobot_bench.py record --json     # lerobot's record loop, 10 fps, 10 min
    uv run python bench/lerobot_bench.py record --minutes 1 --json   # a one-minute check

``env``: frames/s of ``--env.type=demofactory``'s vector env stepped at batch 10 (what
``lerobot-eval --eval.batch_size=10`` drives: ``step`` with (10, 2) actions, observations
copied out) against the bare batched ``WorldModel.step`` at batch 10 on the same model
(``factory bench rollout``'s measurement), in the same process. Goal: ratio >= 0.7.

``record``: lerobot 0.6.1's own ``record_loop`` (the loop ``lerobot-record`` runs), with the
``demofactory`` robot (batch 1), a scripted teleoperator (a random walk of absolute (x, y)
targets: the keyboard teleoperator needs an X11 session) and a LeRobotDataset written as
``lerobot-record`` writes it (video, 4 image-writer threads), at 10 fps, in episodes of
``--episode-s`` seconds (encoding happens between episodes, as in lerobot-record). A frame
is on time when the loop period that ends it is within 10% of 1/fps. Goal: >= 99%.
Also reported: ``send_action`` (one model step + probe) ms p50/p99 and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def bench_env(model: str | None, device: str, steps: int, batch: int) -> dict[str, Any]:
    """Env frames/s vs bare-model frames/s at ``batch``."""
    from lerobot_env_demofactory import DemofactoryEnv

    from pipelines.bench_rollout import RolloutBenchRequest, run_rollout_bench

    bare = run_rollout_bench(
        RolloutBenchRequest(
            model=Path(model) if model else None, device=device, steps=steps, batches=(batch,)
        )
    )
    cfg = DemofactoryEnv(model=model, device=device, episode_length=steps + 20)
    env = cfg.create_envs(n_envs=batch)["demofactory"][0]
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    target = rng.uniform(100, 412, size=(batch, 2)).astype(np.float32)
    times = []
    for i in range(steps + 10):
        target = np.clip(target + rng.normal(0, 8, size=target.shape), 0, 512).astype(np.float32)
        t0 = time.perf_counter()
        env.step(target)
        if i >= 10:
            times.append(time.perf_counter() - t0)
    env.close()
    env_fps = batch * len(times) / float(np.sum(times))
    bare_fps = bare["throughput"][str(batch)]
    return {
        "model": bare["model"],
        "device": bare["device"],
        "batch": batch,
        "steps": steps,
        "bare_frames_per_s": bare_fps,
        "env_frames_per_s": env_fps,
        "ratio": env_fps / bare_fps,
        "goal_ratio": 0.7,
        "load_avg": os.getloadavg(),
    }


class _Scripted:
    """A scripted teleoperator: a random walk of absolute (x, y) targets."""

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)
        self.target = np.array([256.0, 256.0])

    def get_action(self) -> dict[str, float]:
        self.target = np.clip(self.target + self.rng.normal(0, 8, 2), 0, 512)
        return {"x": float(self.target[0]), "y": float(self.target[1])}


def _timed(robot: Any) -> tuple[list[float], list[float]]:
    """Wrap ``robot``'s observe and act: (observation start times, send_action seconds)."""
    starts: list[float] = []
    steps: list[float] = []
    observe, act = robot.get_observation, robot.send_action

    def timed_observe() -> dict[str, Any]:
        starts.append(time.perf_counter())
        return observe()

    def timed_act(action: dict[str, Any]) -> dict[str, Any]:
        t0 = time.perf_counter()
        out = act(action)
        steps.append(time.perf_counter() - t0)
        return out

    robot.get_observation, robot.send_action = timed_observe, timed_act
    return starts, steps


def _record_dataset(robot: Any, fps: int, root: Path) -> Any:
    """An empty video LeRobotDataset with ``robot``'s action and observation features."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.utils.feature_utils import combine_feature_dicts, hw_to_dataset_features

    features = combine_feature_dicts(
        hw_to_dataset_features(robot.action_features, "action", use_video=True),
        hw_to_dataset_features(robot.observation_features, "observation", use_video=True),
    )
    return LeRobotDataset.create(
        "local/record_bench",
        fps,
        root=root,
        robot_type=robot.name,
        features=features,
        use_videos=True,
        image_writer_threads=4,
    )


def bench_record(
    model: str | None, device: str, minutes: float, episode_s: float, fps: int
) -> dict[str, Any]:
    """lerobot's record_loop with the demofactory robot; frame pacing and step times."""
    from lerobot.processor import make_default_processors
    from lerobot.scripts.lerobot_record import record_loop
    from lerobot.teleoperators.teleoperator import Teleoperator
    from lerobot_robot_demofactory import DemofactoryRobot, DemofactoryRobotConfig

    root = Path(tempfile.mkdtemp(prefix="lerobot_record_bench_"))
    robot = DemofactoryRobot(
        DemofactoryRobotConfig(model=model, device=device, calibration_dir=root / "calib")
    )
    starts, steps = _timed(robot)
    ds = _record_dataset(robot, fps, root / "ds")
    Teleoperator.register(_Scripted)
    teleop = _Scripted()
    t, r, o = make_default_processors()
    events = {"exit_early": False, "rerecord_episode": False, "stop_recording": False}
    load_before = os.getloadavg()
    robot.connect()
    periods: list[float] = []
    for _ in range(max(1, round(minutes * 60 / episode_s))):
        starts.clear()
        record_loop(
            robot=robot,
            events=events,
            fps=fps,
            teleop_action_processor=t,
            robot_action_processor=r,
            robot_observation_processor=o,
            teleop=teleop,
            dataset=ds,
            control_time_s=episode_s,
            single_task="Push the T",
        )
        periods += np.diff(starts).tolist()
        ds.save_episode()
    ds.finalize()
    robot.disconnect()
    p = np.asarray(periods)
    ms = np.asarray(steps) * 1e3
    return {
        "model": model or "shipped",
        "fps": fps,
        "frames": int(ds.num_frames),
        "episodes": int(ds.num_episodes),
        "on_time_frac": float(np.mean(p <= 1.1 / fps)),
        "period_ms_p50": float(np.median(p) * 1e3),
        "period_ms_p99": float(np.percentile(p, 99) * 1e3),
        "send_action_ms_p50": float(np.median(ms)),
        "send_action_ms_p99": float(np.percentile(ms, 99)),
        "goal_on_time_frac": 0.99,
        "load_avg_before": load_before,
        "load_avg_after": os.getloadavg(),
        "dataset": str(root / "ds"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["env", "record"])
    parser.add_argument("--model", default=None, help="model directory (default: the shipped)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=300, help="env: steps per measurement")
    parser.add_argument("--batch", type=int, default=10, help="env: lerobot-eval's batch size")
    parser.add_argument("--minutes", type=float, default=10.0, help="record: total time")
    parser.add_argument("--episode-s", type=float, default=60.0, help="record: episode length")
    parser.add_argument("--fps", type=int, default=10, help="record: lerobot-record's fps")
    parser.add_argument("--json", action="store_true")
    a = parser.parse_args()
    if a.what == "env":
        result = bench_env(a.model, a.device, a.steps, a.batch)
    else:
        result = bench_record(a.model, a.device, a.minutes, a.episode_s, a.fps)
    print(json.dumps(result, indent=None if a.json else 2))


if __name__ == "__main__":
    main()
