"""The ground-truth PushT world: a batch of gym-pusht envs behind the ``World`` interface."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np

from factory.envs import pusht_geometry as geo
from factory.envs.checks import check_configs, check_seeds, check_target_actions
from factory.errors import FactoryError
from factory.world import WorldObs, WorldSpec

log = logging.getLogger(__name__)

CONFIG_DIM = 5
CONFIG_MEANING = "agent x, y, block x, y, angle"
CONTACT_MARGIN = 1.0  # pixels: the agent disk within this of the T counts as touching


def pusht_spec(resolution: int) -> WorldSpec:
    """The PushT world's spec at ``resolution`` pixels."""
    return WorldSpec(
        name="pusht",
        image_shape=(resolution, resolution, 3),
        action_dim=2,
        state_dim=2,
        fps=10.0,
        action_meaning="absolute agent target position (x, y) in board pixels, [0, 512]^2",
        action_low=(0.0, 0.0),
        action_high=(geo.BOARD_SIZE, geo.BOARD_SIZE),
        task_state_names=("block_x", "block_y", "block_angle"),
        config_names=("agent_x", "agent_y", "block_x", "block_y", "block_angle"),
        task="Push the T-shaped block onto the green T target.",
    )


def _make_env(resolution: int) -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        import gym_pusht  # noqa: F401  (registers gym_pusht/PushT-v0)
        import gymnasium as gym

        env = gym.make(
            "gym_pusht/PushT-v0",
            obs_type="pixels_agent_pos",
            render_mode="rgb_array",
            observation_width=resolution,
            observation_height=resolution,
        )
    # Step the raw env: the TimeLimit / order wrappers add nothing a World needs.
    return env.unwrapped


def legacy_reset_state(config: np.ndarray) -> np.ndarray:
    """The ``reset_to_state`` that lands the block at ``config``'s pose.

    gym-pusht sets the block's position while its angle is still 0 and then rotates it
    about the centre of gravity, which shifts the body origin. Pre-shifting the position by
    ``R(angle) @ cog - cog`` cancels that.
    """
    config = np.asarray(config, dtype=np.float64)
    angle = config[4]
    shift = geo.rotation(angle) @ geo.BLOCK_COG - geo.BLOCK_COG
    return np.array([config[0], config[1], *(config[2:4] + shift), angle])


class PushTWorld:
    """``batch_size`` gym-pusht envs stepped in lockstep.

    Observations: frames (B, R, R, 3) uint8, ``state`` the agent xy, ``task_state`` the
    block pose (x, y, angle wrapped to (-pi, pi]) as ``info["block_pose"]`` reports it,
    ``score`` the goal coverage, ``success`` coverage > 0.95, and ``info["contact"]`` whether
    the agent disk touches the block (within 1 px) after the step; ``info["block_pose"]``
    is the block pose in float64 and ``info["goal_pose"]`` the goal pose.
    """

    def __init__(self, batch_size: int = 1, resolution: int = 96) -> None:
        if int(batch_size) < 1:
            raise FactoryError(f"batch_size must be >= 1, got {batch_size}")
        if int(resolution) < 8:
            raise FactoryError(f"resolution must be >= 8 pixels, got {resolution}")
        self.batch_size = int(batch_size)
        self.resolution = int(resolution)
        self.spec = pusht_spec(self.resolution)
        self._envs = [_make_env(self.resolution) for _ in range(self.batch_size)]
        self._ready = False

    # -- reset ---------------------------------------------------------------------------
    def reset(self, seeds: np.ndarray | None = None, configs: np.ndarray | None = None) -> WorldObs:
        """Reset from ``seeds`` (B,) or ``configs`` (B, 5); with neither, random seeds."""
        if seeds is not None and configs is not None:
            raise FactoryError("reset takes seeds or configs, not both")
        if configs is not None:
            results = self._reset_configs(
                check_configs(configs, self.batch_size, CONFIG_DIM, CONFIG_MEANING)
            )
        else:
            if seeds is None:
                seeds = np.random.SeedSequence().generate_state(self.batch_size)
            checked = check_seeds(seeds, self.batch_size)
            results = [env.reset(seed=int(s)) for env, s in zip(self._envs, checked, strict=True)]
        self._ready = True
        return self._collect(results, coverage=None)

    def _reset_configs(self, configs: np.ndarray) -> list[tuple[Any, dict[str, Any]]]:
        results = []
        for env, config in zip(self._envs, configs, strict=True):
            obs, info = env.reset(options={"reset_to_state": legacy_reset_state(config)})
            pose = np.asarray(info["block_pose"], dtype=np.float64)
            if np.max(np.abs(pose - config[2:])) > 1e-9:
                # The first physics step moved the block (it overlapped the agent or a
                # wall): put it exactly where it was asked to be and re-render.
                log.debug("config %s: reset moved the block to %s; forcing it", config, pose)
                block = env.block
                block.angle = float(config[4])
                block.position = (float(config[2]), float(config[3]))
                block.velocity = (0.0, 0.0)
                block.angular_velocity = 0.0
                obs = env.get_obs()
                info = env._get_info()
            results.append((obs, info))
        return results

    # -- step ----------------------------------------------------------------------------
    def step(self, actions: np.ndarray) -> WorldObs:
        """Advance every episode by one 10 Hz step; actions (B, 2) are clipped to the board."""
        if not self._ready:
            raise FactoryError("step called before reset")
        acts = check_target_actions(actions, self.batch_size, geo.BOARD_SIZE)
        results = []
        for env, act in zip(self._envs, acts, strict=True):
            obs, _reward, _term, _trunc, info = env.step(act)
            results.append((obs, info))
        cov = np.array([r[1]["coverage"] for r in results], dtype=np.float32)
        return self._collect(results, coverage=cov)

    # -- observations --------------------------------------------------------------------
    def _collect(
        self, results: list[tuple[Any, dict[str, Any]]], coverage: np.ndarray | None
    ) -> WorldObs:
        frames = np.stack([r[0]["pixels"] for r in results]).astype(np.uint8, copy=False)
        agent = np.stack([np.asarray(r[0]["agent_pos"], dtype=np.float64) for r in results])
        poses = np.stack([np.asarray(r[1]["block_pose"], dtype=np.float64) for r in results])
        if coverage is None:
            coverage = np.array([geo.coverage(p) for p in poses], dtype=np.float32)
        contact = np.array(
            [
                geo.agent_block_contact(a, p, CONTACT_MARGIN)
                for a, p in zip(agent, poses, strict=True)
            ],
            dtype=bool,
        )
        task_state = np.column_stack([poses[:, :2], geo.wrap_angle(poses[:, 2])])
        return WorldObs(
            frames=frames,
            state=agent.astype(np.float32),
            task_state=task_state.astype(np.float32),
            score=coverage.astype(np.float32),
            success=coverage > geo.SUCCESS_THRESHOLD,
            info={
                "contact": contact,
                "block_pose": np.column_stack([poses[:, :2], geo.wrap_angle(poses[:, 2])]),
                "goal_pose": np.tile(geo.GOAL.astype(np.float32), (len(results), 1)),
            },
        )

    def close(self) -> None:
        """Close every env."""
        for env in self._envs:
            env.close()
        self._envs = []
        self._ready = False

    def __enter__(self) -> PushTWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
