"""``--env.type=demofactory``: lerobot's PushT env, played inside the demofactory world model.

lerobot 0.6.1's ``register_third_party_plugins()`` imports every installed distribution
whose name starts with ``lerobot_env_``; importing this package registers
:class:`DemofactoryEnv` with lerobot's ``EnvConfig`` choice registry, so

    lerobot-eval --policy.path=CKPT --env.type=demofactory --eval.n_episodes=50 \\
        --eval.batch_size=10

scores a checkpoint inside the model, and the same command with ``--env.type=pusht``
scores it in the ground truth. Features, feature map, observation keys and dtypes are
lerobot's ``pusht`` env's (``pixels`` -> ``observation.image``, ``agent_pos`` ->
``observation.state``; with ``--env.obs_type=environment_state_agent_pos``,
``environment_state`` -> ``observation.environment_state``, the T's keypoints from the
model's own block pose); all ``--eval.batch_size`` rows step in one batched model pass in
this process, whatever ``--eval.use_async_envs`` says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from lerobot.configs import FeatureType, PolicyFeature
from lerobot.envs.configs import EnvConfig
from lerobot.utils.constants import ACTION, OBS_ENV_STATE, OBS_IMAGE, OBS_STATE

ENV_TYPE = "demofactory"


def _features() -> dict[str, PolicyFeature]:
    return {
        ACTION: PolicyFeature(type=FeatureType.ACTION, shape=(2,)),
        "agent_pos": PolicyFeature(type=FeatureType.STATE, shape=(2,)),
    }


def _features_map() -> dict[str, str]:
    return {
        ACTION: ACTION,
        "agent_pos": OBS_STATE,
        "environment_state": OBS_ENV_STATE,
        "pixels": OBS_IMAGE,
    }


@EnvConfig.register_subclass(ENV_TYPE)
@dataclass
class DemofactoryEnv(EnvConfig):
    """PushT inside a world model.

    ``model``: a world-model directory (default: the shipped ``models/pusht``);
    ``episode_length``: steps before truncation; ``seed``: the model's sampling noise and
    the initial seeds when lerobot passes none (``lerobot-eval`` passes ``--seed`` + i);
    ``device``: ``auto``, ``cpu`` or ``cuda[:N]``; ``image_size``: the side of the
    ``pixels`` frames (None: the model's own, 96 for the shipped one, as gym-pusht renders
    them; other sizes are resized).

    ``observation_height/width`` only feed ``features``, exactly as in lerobot's ``pusht``
    config: lerobot 0.6.1 does not pass them to gym-pusht, whose frames stay 96 x 96.
    """

    task: str | None = "PushT-v0"
    fps: int = 10
    model: str | None = None
    episode_length: int = 300
    seed: int = 0
    device: str = "auto"
    obs_type: str = "pixels_agent_pos"
    observation_height: int = 384
    observation_width: int = 384
    image_size: int | None = None
    features: dict[str, PolicyFeature] = field(default_factory=_features)
    features_map: dict[str, str] = field(default_factory=_features_map)

    def __post_init__(self) -> None:
        if self.obs_type == "pixels_agent_pos":
            self.features["pixels"] = PolicyFeature(
                type=FeatureType.VISUAL, shape=(self.observation_height, self.observation_width, 3)
            )
        elif self.obs_type == "environment_state_agent_pos":
            self.features["environment_state"] = PolicyFeature(type=FeatureType.ENV, shape=(16,))

    @property
    def gym_kwargs(self) -> dict[str, Any]:
        return {
            "obs_type": self.obs_type,
            "max_episode_steps": self.episode_length,
            "model": self.model,
            "device": self.device,
        }

    def create_envs(
        self, n_envs: int, use_async_envs: bool = False
    ) -> dict[str, dict[int, gym.vector.VectorEnv]]:
        """``{"demofactory": {0: env}}``: one :class:`ModelVectorEnv` of ``n_envs`` rows.

        ``use_async_envs`` is accepted and ignored: the rows are one batched model in this
        process. Bad input exits with one line (:class:`PluginInputError`).
        """
        from exporters.lerobot_plugin import PluginInputError, open_world
        from factory.envs.model_vector_env import OBS_TYPES, ModelVectorEnv, VectorEnvOptions
        from factory.errors import FactoryError

        if self.obs_type not in OBS_TYPES:
            kinds = ", ".join(OBS_TYPES)
            raise PluginInputError(f"env.obs_type={self.obs_type!r} is not supported; use {kinds}")
        if n_envs < 1 or self.episode_length < 1:
            raise PluginInputError(
                f"need n_envs >= 1 and env.episode_length >= 1, got {n_envs}, {self.episode_length}"
            )
        if self.image_size is not None and self.image_size < 8:
            raise PluginInputError(f"env.image_size must be >= 8 pixels, got {self.image_size}")
        world = open_world(self.model, self.device, n_envs, seed=self.seed)
        size = None if self.image_size is None else (self.image_size, self.image_size)
        options = VectorEnvOptions(
            episode_length=self.episode_length,
            observation_size=size,
            seed=self.seed,
            obs_type=self.obs_type,
        )
        try:
            env = ModelVectorEnv(world, options)
        except FactoryError as err:
            world.close()
            raise PluginInputError(str(err)) from None
        env.metadata = {**env.metadata, "render_fps": self.fps}
        return {self.type: {0: env}}


__all__ = ["ENV_TYPE", "DemofactoryEnv"]
