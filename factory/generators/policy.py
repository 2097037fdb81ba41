"""Run a LeRobot policy checkpoint as an action generator.

``path`` is a ``pretrained_model`` directory as ``lerobot-train`` writes it (config.json,
model.safetensors and, when present, policy_preprocessor.json / policy_postprocessor.json
with their normalisation stats). lerobot is imported lazily, on the first load.

Observations map onto the policy's input features: each VISUAL feature gets the frame
((1, 3, H, W) float in [0, 1], resized when the checkpoint was trained at another size),
``observation.state`` the robot state (agent xy) and ``observation.environment_state`` the
task state (the block pose: ground truth in the real env, the probe's inside the model).
The loaded weights are shared by every instance (one per rollout slot); each instance has
its own action queue. Stochastic policies draw from torch's global RNG, so ``seed`` is
recorded but does not make their sampling repeatable.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from factory.errors import FactoryError
from factory.world import Observation

log = logging.getLogger(__name__)

STATE_KEY = "observation.state"
ENV_STATE_KEY = "observation.environment_state"


@dataclass(frozen=True)
class LoadedPolicy:
    """A loaded checkpoint: the policy module, its processors and its input features.

    ``preprocess`` maps a batch dict to the policy's input; ``postprocess`` maps the policy's
    (1, A) action tensor back to raw action units. ``images`` maps each VISUAL input key to
    its (3, H, W) shape.
    """

    policy: Any
    preprocess: Any
    postprocess: Any
    images: dict[str, tuple[int, ...]]
    inputs: frozenset[str]
    action_dim: int
    policy_type: str
    weights_sha256: str


def read_policy_config(path: str | Path) -> dict[str, Any]:
    """The checkpoint's config.json (no lerobot import); FactoryError when it is not one."""
    p = Path(path)
    cfg_file = p / "config.json"
    if not cfg_file.is_file() or not (p / "model.safetensors").is_file():
        raise FactoryError(
            f"{p} is not a LeRobot policy checkpoint (needs config.json and model.safetensors; "
            "pass the pretrained_model folder of a lerobot-train checkpoint)"
        )
    try:
        data = json.loads(cfg_file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise FactoryError(f"{cfg_file} is not readable JSON: {err}") from None
    if not isinstance(data, dict) or "type" not in data:
        raise FactoryError(f"{cfg_file} has no policy 'type'; is it a LeRobot checkpoint?")
    return data


def policy_action_dim(path: str | Path) -> int:
    """The action dimension a checkpoint outputs (from config.json, no lerobot import)."""
    feats = read_policy_config(path).get("output_features", {})
    shape = feats.get("action", {}).get("shape") if isinstance(feats, dict) else None
    if not shape:
        raise FactoryError(f"{path}/config.json has no output feature 'action'")
    return int(np.prod(shape))


@functools.lru_cache(maxsize=4)
def load_policy(path: str, device: str = "cpu") -> LoadedPolicy:
    """Load a checkpoint once per process (cached): weights, processors, features."""
    read_policy_config(path)
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.configs.types import FeatureType
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors

    cfg = PreTrainedConfig.from_pretrained(path)
    cfg.device = device
    with contextlib.redirect_stdout(io.StringIO()):  # lerobot prints while loading
        policy = get_policy_class(cfg.type).from_pretrained(path, config=cfg)
    if (Path(path) / "policy_preprocessor.json").is_file():
        pre, post = make_pre_post_processors(cfg, pretrained_path=path)
    else:
        log.warning("%s has no policy_preprocessor.json: inputs are not normalised", path)
        pre, post = (lambda batch: batch), (lambda action: action)
    images = {
        k: tuple(f.shape) for k, f in cfg.input_features.items() if f.type is FeatureType.VISUAL
    }
    unknown = sorted(set(cfg.input_features) - set(images) - {STATE_KEY, ENV_STATE_KEY})
    if unknown:
        raise FactoryError(
            f"policy {path} needs inputs {unknown} that a world cannot provide "
            f"(supported: camera images, {STATE_KEY}, {ENV_STATE_KEY})"
        )
    digest = hashlib.sha256((Path(path) / "model.safetensors").read_bytes()).hexdigest()
    return LoadedPolicy(
        policy=policy.eval(),
        preprocess=pre,
        postprocess=post,
        images=images,
        inputs=frozenset(cfg.input_features),
        action_dim=int(np.prod(cfg.output_features["action"].shape)),
        policy_type=str(cfg.type),
        weights_sha256=digest[:16],
    )


class PolicyGenerator:
    """Closed-loop actions from a LeRobot policy (``select_action`` on one observation).

    ``label`` is what provenance records as the checkpoint (default: ``path``), e.g. the
    driver's path when the checkpoint was copied to a worker.
    """

    name = "policy"

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        label: str | None = None,
        loaded: LoadedPolicy | None = None,
    ) -> None:
        self.path = str(path)
        self.label = label or self.path
        self.device = device
        self.loaded = loaded or load_policy(self.path, device)
        shared = {id(t): t for t in self.loaded.policy.state_dict(keep_vars=True).values()}
        self._policy = copy.deepcopy(self.loaded.policy, memo=shared)  # own queues, same weights

    def params(self) -> dict[str, Any]:
        return {
            "checkpoint": self.label,
            "policy_type": self.loaded.policy_type,
            "weights_sha256": self.loaded.weights_sha256,
        }

    def reset(self, seed: int, obs: Observation) -> None:
        self._policy.reset()

    def act(self, obs: Observation) -> np.ndarray:
        import torch

        batch = self.loaded.preprocess(self._batch(obs))
        with torch.inference_mode():
            action = self.loaded.postprocess(self._policy.select_action(batch))
        out = np.asarray(action.detach().float().cpu().numpy(), np.float32).reshape(-1)
        if out.shape != (self.loaded.action_dim,) or not np.isfinite(out).all():
            raise FactoryError(f"policy {self.label} returned a bad action {out.tolist()}")
        return out

    def _batch(self, obs: Observation) -> dict[str, Any]:
        import torch
        import torch.nn.functional as F

        batch: dict[str, Any] = {}
        frame = torch.from_numpy(np.ascontiguousarray(obs.frame)).permute(2, 0, 1)[None]
        frame = frame.float().div(255.0)
        for key, shape in self.loaded.images.items():
            img = frame
            if tuple(img.shape[1:]) != tuple(shape):
                img = F.interpolate(img, size=tuple(shape[1:]), mode="bilinear", antialias=True)
            batch[key] = img.to(self.device)
        if STATE_KEY in self.loaded.inputs:
            batch[STATE_KEY] = torch.as_tensor(obs.state, dtype=torch.float32)[None]
        if ENV_STATE_KEY in self.loaded.inputs:
            batch[ENV_STATE_KEY] = torch.as_tensor(obs.task_state, dtype=torch.float32)[None]
        return batch
