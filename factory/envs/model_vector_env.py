"""``ModelVectorEnv``: the world model as a gymnasium ``VectorEnv`` shaped like gym-pusht.

All ``num_envs`` rows advance in one batched :class:`~factory.model.WorldModel` step (one
forward pass per ``step``), not N copies. Observations, spaces, rewards and infos follow
``gym_pusht/PushT-v0`` with ``obs_type="pixels_agent_pos"`` or
``"environment_state_agent_pos"``:

- ``pixels``: (B, H, W, 3) uint8 frames (the model's, resized to ``observation_size``);
- ``environment_state``: (B, 16) float64, the T's 8 keypoints in gym-pusht's order, from
  the model's own block pose (its state, or its reader's reading), never the ground truth;
- ``agent_pos``: (B, 2) float64, the agent xy in board pixels (the dynamics' state head,
  clipped to the board);
- reward ``clip(coverage / 0.95, 0, 1)``, ``terminated`` = success = coverage > 0.95, where
  the coverage comes from the model's own task-state reading (the state probe);
- ``truncated`` once an episode reaches ``episode_length`` steps;
- ``info["is_success"]`` (B,) bool and ``info["coverage"]`` (B,) float32.

Initial frames come from seeded ground-truth resets (:meth:`ModelWorld.reset`), as in
``factory generate``. A row whose episode ended is frozen: further steps replay its last
observation with reward 0 (lerobot's rollout ignores them), while the batch keeps stepping
in one pass until ``reset``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from factory.envs import pusht_geometry as geo
from factory.envs.model_world import ModelWorld
from factory.errors import FactoryError
from factory.world import WorldObs

PUSHT_GYM_ID = "PushT-v0"
OBS_TYPES = ("pixels_agent_pos", "environment_state_agent_pos")


@dataclass(frozen=True)
class VectorEnvOptions:
    """Episode length (steps), frame size (H, W) of ``pixels`` (None: the model's), the
    first-reset seed used when ``reset`` gets no seed, and gym-pusht's ``obs_type`` (one of
    :data:`OBS_TYPES`)."""

    episode_length: int = 300
    observation_size: tuple[int, int] | None = None
    seed: int = 0
    obs_type: str = "pixels_agent_pos"


def resize_nearest(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize: (B, h, w, 3) uint8 -> (B, H, W, 3) uint8 (a no-op at size)."""
    h, w = frames.shape[1:3]
    if (h, w) == tuple(size):
        return frames
    rows = np.arange(size[0]) * h // size[0]
    cols = np.arange(size[1]) * w // size[1]
    return np.ascontiguousarray(frames[:, rows][:, :, cols])


def pusht_reward(score: np.ndarray) -> np.ndarray:
    """gym-pusht's reward from the coverage (B,): ``clip(coverage / 0.95, 0, 1)``."""
    return np.clip(score / geo.SUCCESS_THRESHOLD, 0.0, 1.0).astype(np.float64)


class ModelVectorEnv(gym.vector.VectorEnv):
    """``world.batch_size`` PushT episodes inside the world model, stepped in one pass."""

    metadata: dict[str, Any] = {  # noqa: RUF012  (gymnasium's class attribute)
        "render_modes": ["rgb_array"],
        "render_fps": 10,
        "autoreset_mode": gym.vector.AutoresetMode.DISABLED,
    }

    def __init__(self, world: ModelWorld, options: VectorEnvOptions = VectorEnvOptions()) -> None:
        if options.episode_length < 1:
            raise FactoryError(f"episode_length must be >= 1, got {options.episode_length}")
        if world.spec.action_dim != 2 or not world.spec.name.startswith("pusht"):
            raise FactoryError(f"ModelVectorEnv is PushT's; got world {world.spec.name!r}")
        if options.obs_type not in OBS_TYPES:
            raise FactoryError(
                f"obs_type {options.obs_type!r} is not supported; use one of {', '.join(OBS_TYPES)}"
            )
        self.world = world
        self.options = options
        self.num_envs = world.batch_size
        self.render_mode = "rgb_array"
        self.task = world.spec.task
        self.task_description = world.spec.task
        self._max_episode_steps = options.episode_length
        size = options.observation_size or world.spec.image_shape[:2]
        self._size = (int(size[0]), int(size[1]))
        self._pixels = options.obs_type == "pixels_agent_pos"
        view = (
            {"pixels": spaces.Box(0, 255, (*self._size, 3), np.uint8)}
            if self._pixels
            else {"environment_state": spaces.Box(0.0, geo.BOARD_SIZE, (16,), np.float64)}
        )
        self.single_observation_space = spaces.Dict(
            {"agent_pos": spaces.Box(0.0, geo.BOARD_SIZE, (2,), np.float64), **view}
        )
        self.single_action_space = spaces.Box(0.0, geo.BOARD_SIZE, (2,), np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._seeds = np.random.default_rng(options.seed)
        self._obs: dict[str, np.ndarray] | None = None
        self._frames = np.zeros((self.num_envs, *self._size, 3), np.uint8)
        self._t = np.zeros(self.num_envs, np.int64)
        self._done = np.zeros(self.num_envs, bool)
        self._ended: tuple[np.ndarray, np.ndarray] = (
            np.zeros(self.num_envs, bool),
            np.zeros(self.num_envs, bool),
        )

    # -- gymnasium API ----------------------------------------------------------------------
    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Every row from a seeded ground-truth frame: ``seed`` an int (row i gets seed+i),
        a list of B ints, or None (seeds drawn from ``options.seed``'s generator)."""
        seeds = self._reset_seeds(seed)
        obs = self.world.reset(seeds=seeds)
        self._t[:] = 0
        self._done[:] = False
        self._ended = (np.zeros(self.num_envs, bool), np.zeros(self.num_envs, bool))
        self._obs = self._observation(obs)
        info = {"is_success": np.zeros(self.num_envs, bool), "coverage": obs.score.copy()}
        return self._copy_obs(), info

    def step(
        self, actions: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """actions (B, 2) board-pixel targets -> obs, reward (B,), terminated (B,),
        truncated (B,), info; one batched model step for all rows."""
        if self._obs is None:
            raise FactoryError("step called before reset")
        out = self.world.step(np.asarray(actions, np.float32).reshape(self.num_envs, 2))
        new = self._observation(out)
        live = ~self._done
        self._t[live] += 1
        reward = np.where(live, pusht_reward(out.score), 0.0)
        success = np.where(live, out.success, self._ended[0])
        terminated = np.where(live, out.success, self._ended[0])
        truncated = np.where(live, self._t >= self._max_episode_steps, self._ended[1])
        truncated &= ~terminated
        for key in self._obs:
            self._obs[key][live] = new[key][live]
        self._ended = (terminated.copy(), truncated.copy())
        self._done |= terminated | truncated
        info = {"is_success": success.astype(bool), "coverage": out.score.astype(np.float32)}
        return self._copy_obs(), reward, terminated.astype(bool), truncated.astype(bool), info

    def render(self) -> tuple[np.ndarray, ...]:
        """Each row's current frame (H, W, 3) uint8 (the model's, whatever ``obs_type``)."""
        if self._obs is None:
            raise FactoryError("render called before reset")
        return tuple(self._frames)

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Like ``SyncVectorEnv.call``: an attribute (or method result) for every row."""
        if name == "render":
            return self.render()
        if name not in {"task", "task_description", "_max_episode_steps", "render_mode"}:
            raise AttributeError(f"ModelVectorEnv rows have no attribute {name!r}")
        return (getattr(self, name),) * self.num_envs

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Like ``SyncVectorEnv.get_attr``."""
        return self.call(name)

    def close_extras(self, **kwargs: Any) -> None:
        self.world.close()

    # -- helpers ------------------------------------------------------------------------------
    def _reset_seeds(self, seed: int | list[int] | None) -> np.ndarray:
        if seed is None:
            return self._seeds.integers(0, 2**31 - 1, size=self.num_envs)
        if isinstance(seed, int | np.integer):
            return np.arange(int(seed), int(seed) + self.num_envs)
        arr = np.asarray(list(seed))
        if arr.shape != (self.num_envs,) or any(s is None for s in seed):
            raise FactoryError(f"reset needs {self.num_envs} integer seeds, got {list(seed)}")
        return arr.astype(np.int64)

    def _observation(self, obs: WorldObs) -> dict[str, np.ndarray]:
        frames = resize_nearest(obs.frames, self._size)
        self._frames[~self._done] = frames[~self._done]  # ended rows keep their last frame
        view = (
            {"pixels": frames}
            if self._pixels
            else {"environment_state": geo.keypoints(obs.task_state.astype(np.float64))}
        )
        return {"agent_pos": np.clip(obs.state.astype(np.float64), 0.0, geo.BOARD_SIZE), **view}

    def _copy_obs(self) -> dict[str, np.ndarray]:
        assert self._obs is not None
        return {k: v.copy() for k, v in self._obs.items()}
