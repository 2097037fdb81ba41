"""The ``latent_grid`` world model: autoencoder, latent dynamics, state probe.

``load_model_dir(path)`` gives a :class:`WorldModel` whose ``start``/``step`` run batched
autoregressive rollouts. Checkpoints are safetensors + JSON (see ``checkpoint``).
"""

from factory.model.autoencoder import Autoencoder
from factory.model.checkpoint import (
    PARTS,
    build_part,
    load_model_dir,
    load_part,
    read_config,
    save_part,
)
from factory.model.config import (
    AutoencoderConfig,
    ConsistencyConfig,
    DynamicsConfig,
    ProbeConfig,
    WorldModelConfig,
)
from factory.model.dynamics import Dynamics
from factory.model.probe import StateProbe
from factory.model.world_model import StepOutput, WorldModel

__all__ = [
    "PARTS",
    "Autoencoder",
    "AutoencoderConfig",
    "ConsistencyConfig",
    "Dynamics",
    "DynamicsConfig",
    "ProbeConfig",
    "StateProbe",
    "StepOutput",
    "WorldModel",
    "WorldModelConfig",
    "build_part",
    "load_model_dir",
    "load_part",
    "read_config",
    "save_part",
]
