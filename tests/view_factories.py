"""Stores for the data view tests: PushT episodes with known answers.

``view_store`` writes three episodes at ``RES`` px:

0. ``real``: the ground truth itself from ``START`` (its coverage is the env's score);
1. ``world_model`` from a configured reset (``initial: "config"``): the ground truth of
   the same start and actions, but its frames are the *negative* of the real ones and its
   block readings are the real poses shifted by ``OFFSET`` (so the side-by-side view must
   show two different streams, and the block error is ``|OFFSET|`` at every frame);
2. ``teleop``, unknown outcome, no seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from factory.envs import pusht_geometry as geo
from factory.envs.pusht import PushTWorld, pusht_spec
from factory.record import open_output
from factory.store import EpisodeMeta, EpisodeStore

RES = 32
STEPS = 12
OFFSET = np.array([3.0, 4.0, 0.0], np.float32)  # 5 px off, same angle
# agent xy, block pose: the block half on the goal; the agent's push moves it off a little
START = np.array([150.0, 400.0, geo.GOAL[0] + 30, geo.GOAL[1] + 15, geo.GOAL[2] + 0.4])


def run_world(config: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
    """The ground truth from ``config`` (5,) under ``actions`` (T, 2): frame ``t`` after
    ``t`` actions (the engine's alignment), plus ``score`` (T,) the env's coverage."""
    world = PushTWorld(1, RES)
    try:
        obs = world.reset(configs=config[None])
        frames, state, pose, score = [], [], [], []
        for action in actions:
            frames.append(obs.frames[0])
            state.append(obs.state[0])
            pose.append(obs.task_state[0])
            score.append(obs.score[0])
            obs = world.step(action[None])
    finally:
        world.close()
    return {
        "image": np.stack(frames),
        "action": actions.astype(np.float32),
        "state": np.stack(state).astype(np.float32),
        "task_state": np.stack(pose).astype(np.float32),
        "score": np.array(score, np.float32),
    }


def push_actions(config: np.ndarray, steps: int = STEPS) -> np.ndarray:
    """(steps, 2) targets that walk the agent straight onto the block's centre."""
    line = np.linspace(0.0, 1.0, steps)[:, None]
    return (config[:2] + line * (config[2:4] - config[:2])).astype(np.float32)


def view_store(path: Path) -> dict[str, Any]:
    """Write the three episodes (see the module docstring) to ``path``; returns the
    ground-truth arrays (``real``) and the generated episode (``generated``)."""
    config = START
    real = run_world(config, push_actions(config))
    score = real.pop("score")
    generated = {**real, "image": 255 - real["image"], "task_state": real["task_state"] + OFFSET}
    extra = {"world": "pusht-model", "initial": "config", "initial_config": config.tolist()}
    metas = [
        EpisodeMeta("real", "play", seed=7, success=False, score=float(score[-1])),
        EpisodeMeta("world_model", "expert", seed=7, model_id="tiny@x", success=True, extra=extra),
        EpisodeMeta("teleop", "keyboard", task="push"),
    ]
    with open_output(path, pusht_spec(RES), RES, append=False) as store:
        store.append_episode(real, metas[0])
        store.append_episode(generated, metas[1])
        store.append_episode({k: v[:5] for k, v in real.items()}, metas[2])
    return {"real": real, "score": score, "generated": generated, "config": config}


def many_store(path: Path, episodes: int) -> EpisodeStore:
    """``episodes`` tiny (2-frame, 8 x 8) episodes; episode i's block sits at x = i, on
    the goal's y and angle (so episode 256's is exactly on the goal)."""
    from factory.store import KeySpec, StoreSchema

    schema = StoreSchema(
        {
            "image": KeySpec((8, 8, 3), "uint8"),
            "action": KeySpec((2,), "float32"),
            "task_state": KeySpec((3,), "float32"),
        }
    )
    store = EpisodeStore.create(path, schema, fps=10.0, action_meaning="xy", attrs={"env": "pusht"})
    for i in range(episodes):
        pose = np.tile(np.array([i, geo.GOAL[1], geo.GOAL[2]], np.float32), (2, 1))
        data = {
            "image": np.full((2, 8, 8, 3), i % 256, np.uint8),
            "action": np.zeros((2, 2), np.float32),
            "task_state": pose,
        }
        store.append_episode(data, EpisodeMeta("real", "play", seed=i, success=i % 2 == 0))
    store.close()
    return EpisodeStore.open(path)
