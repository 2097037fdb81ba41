"""``--robot.type=demofactory``: a lerobot ``Robot`` whose hardware is the world model.

lerobot 0.6.1's ``register_third_party_plugins()`` imports every installed distribution
whose name starts with ``lerobot_robot_``; importing this package registers
:class:`DemofactoryRobotConfig` with lerobot's ``RobotConfig`` registry, and lerobot's
``make_robot_from_config`` finds :class:`DemofactoryRobot` here by name. Then

    lerobot-teleoperate --robot.type=demofactory --teleop.type=keyboard --display_data=true
    lerobot-record --robot.type=demofactory --teleop.type=keyboard \\
        --dataset.repo_id=local/pusht_in_model --dataset.single_task="Push the T" ...

drive PushT inside the model: ``connect`` loads it and resets from a seeded ground-truth
frame, ``get_observation`` returns the frame (camera ``image``) and the agent xy,
``send_action`` steps the model (batch 1) towards an (x, y) target mapped from the
teleoperator's action (:mod:`lerobot_robot_demofactory.mapping`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from lerobot.robots.config import RobotConfig
from lerobot.robots.robot import Robot

from lerobot_robot_demofactory.mapping import TargetMapper, TargetMapping

log = logging.getLogger(__name__)

ROBOT_TYPE = "demofactory"
CAMERA = "image"


@RobotConfig.register_subclass(ROBOT_TYPE)
@dataclass(kw_only=True)
class DemofactoryRobotConfig(RobotConfig):
    """``model``: world-model directory (default: the shipped one); ``device``: auto, cpu
    or cuda[:N]; ``seed``: the first reset's seed (each reset takes the next);
    ``max_steps``: reset to the next seed after this many steps (0: never);
    ``reset_on_success``: reset once the model reads coverage > 0.95; ``image_height`` /
    ``image_width``: the camera frame size; ``threads``: torch CPU threads for a CPU model
    (1, as ``factory teleop``: at batch 1 more threads spin-wait on each other; 0 leaves
    torch's setting); ``mapping`` ... ``key_step``: how a teleoperator's action becomes
    the target (:mod:`lerobot_robot_demofactory.mapping`).
    """

    model: str | None = None
    device: str = "auto"
    seed: int = 0
    max_steps: int = 300
    reset_on_success: bool = True
    image_height: int = 96
    image_width: int = 96
    threads: int = 1
    mapping: str = "auto"
    target_keys: list[str] = field(default_factory=lambda: ["x", "y"])
    target_scale: list[float] = field(default_factory=lambda: [1.0, 1.0])
    target_offset: list[float] = field(default_factory=lambda: [0.0, 0.0])
    key_step: float = 8.0


class ModelCamera:
    """Stands in lerobot's ``robot.cameras`` for the model's rendered frame."""

    def __init__(self, height: int, width: int) -> None:
        self.height, self.width, self.fps = height, width, 10


class DemofactoryRobot(Robot):
    """PushT inside the world model, at batch 1."""

    config_class = DemofactoryRobotConfig
    name = ROBOT_TYPE

    def __init__(self, config: DemofactoryRobotConfig) -> None:
        from exporters.lerobot_plugin import PluginInputError, check_device, check_model_dir

        super().__init__(config)
        self.config = config
        check_model_dir(config.model)  # fail before lerobot-record creates a dataset
        check_device(config.device)
        pairs = (config.target_keys, config.target_scale, config.target_offset)
        if any(len(p) != 2 for p in pairs):
            raise PluginInputError("robot.target_keys, target_scale, target_offset need 2 entries")
        try:
            mapping = TargetMapping(
                mode=config.mapping,
                keys=(str(config.target_keys[0]), str(config.target_keys[1])),
                scale=(float(config.target_scale[0]), float(config.target_scale[1])),
                offset=(float(config.target_offset[0]), float(config.target_offset[1])),
                key_step=float(config.key_step),
            )
        except ValueError as err:
            raise PluginInputError(f"robot.{err}") from None
        self.mapper = TargetMapper(mapping)
        self.cameras = {CAMERA: ModelCamera(config.image_height, config.image_width)}
        self.world: Any = None
        self._frame: np.ndarray | None = None
        self._agent: np.ndarray = np.zeros(2, np.float32)
        self._next_seed = int(config.seed)
        self.steps = 0
        self.resets = 0

    @property
    def observation_features(self) -> dict[str, Any]:
        size = (self.config.image_height, self.config.image_width, 3)
        return {"agent_x": float, "agent_y": float, CAMERA: size}

    @property
    def action_features(self) -> dict[str, Any]:
        return {"x": float, "y": float}

    @property
    def is_connected(self) -> bool:
        return self.world is not None

    @property
    def is_calibrated(self) -> bool:
        return True

    def connect(self, calibrate: bool = True) -> None:
        """Load the model (one-line exit on bad input) and reset from a seeded frame."""
        from lerobot.utils.errors import DeviceAlreadyConnectedError

        from exporters.lerobot_plugin import open_world

        if self.world is not None:
            raise DeviceAlreadyConnectedError(f"{self} is already connected")
        self.world = open_world(self.config.model, self.config.device, 1, seed=self.config.seed)
        if self.world.model.device.type == "cpu" and self.config.threads > 0:
            import torch

            torch.set_num_threads(self.config.threads)
        self.reset()
        log.info("%s connected to model %s", self, self.world.model_id)

    def calibrate(self) -> None:
        """Nothing to calibrate."""

    def configure(self) -> None:
        """Nothing to configure."""

    def reset(self, seed: int | None = None) -> None:
        """A new episode from the ground-truth frame of ``seed`` (default: the next seed)."""
        world = self._require()
        seed = self._next_seed if seed is None else int(seed)
        self._next_seed = seed + 1
        self._set(world.reset(seeds=np.array([seed])))
        self.mapper.reset(self._agent)
        self.steps = 0
        self.resets += 1

    def get_observation(self) -> dict[str, Any]:
        """``{"agent_x", "agent_y": float, "image": (H, W, 3) uint8}``."""
        self._require()
        assert self._frame is not None
        return {
            "agent_x": float(self._agent[0]),
            "agent_y": float(self._agent[1]),
            CAMERA: self._frame,
        }

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        """Map ``action`` to a target, step the model once, and return ``{"x", "y"}``.

        ``action`` is rewritten in place to the target sent: lerobot-record stores the
        teleoperator's (identity-processed) action dict, so the dataset then holds the
        (x, y) targets the model actually got, whatever teleoperator produced them.
        """
        world = self._require()
        target = self.mapper.update(action)
        out = world.step(target[None])
        self._set(out)
        self.steps += 1
        sent = {"x": float(target[0]), "y": float(target[1])}
        action.clear()
        action.update(sent)
        done_success = self.config.reset_on_success and bool(out.success[0])
        if done_success or 0 < self.config.max_steps <= self.steps:
            log.info("%s: episode end after %d steps (success %s)", self, self.steps, done_success)
            self.reset()
        return dict(sent)

    def disconnect(self) -> None:
        """Release the model."""
        from lerobot.utils.errors import DeviceNotConnectedError

        if self.world is None:
            raise DeviceNotConnectedError(f"{self} is not connected")
        self.world.close()
        self.world = None

    def _require(self) -> Any:
        if self.world is None:
            from lerobot.utils.errors import DeviceNotConnectedError

            raise DeviceNotConnectedError(f"{self} is not connected; call connect() first")
        return self.world

    def _set(self, obs: Any) -> None:
        from factory.envs.model_vector_env import resize_nearest

        size = (self.config.image_height, self.config.image_width)
        self._frame = resize_nearest(obs.frames, size)[0]
        self._agent = np.asarray(obs.state[0], np.float32)


__all__ = ["ROBOT_TYPE", "DemofactoryRobot", "DemofactoryRobotConfig"]
