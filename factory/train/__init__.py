"""Training stages of the world model (CPU-friendly; all resumable).

1. :func:`train_autoencoder` — frames -> latents, on ground-truth frames.
2. :func:`train_dynamics` — the latent dynamics (autoencoder frozen), by its objective.
3. :func:`finetune_decoder` — the decoder on the dynamics' own predicted latents.
Plus :func:`train_probe` — the frame -> task-state probe.

Each takes an :class:`EpisodeData`, a model directory, a :class:`Budget` and an optional
``on_progress(step, total_or_None, metrics)`` callback, and returns a metrics dict.

The names below are imported on first use, so that a torch-free submodule
(:mod:`factory.train.recipe_table`, which the command line's help reads) loads without
torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from factory.train.autoencoder import train_autoencoder
    from factory.train.data import EpisodeData, WindowSampler
    from factory.train.decoder import DecoderTrainOptions, finetune_decoder
    from factory.train.dynamics import DynamicsTrainOptions, train_dynamics
    from factory.train.loop import Budget, TrainConfig
    from factory.train.probe import train_probe

_HOMES = {
    "Budget": "loop",
    "DecoderTrainOptions": "decoder",
    "DynamicsTrainOptions": "dynamics",
    "EpisodeData": "data",
    "TrainConfig": "loop",
    "WindowSampler": "data",
    "finetune_decoder": "decoder",
    "train_autoencoder": "autoencoder",
    "train_dynamics": "dynamics",
    "train_probe": "probe",
}

__all__ = [
    "Budget",
    "DecoderTrainOptions",
    "DynamicsTrainOptions",
    "EpisodeData",
    "TrainConfig",
    "WindowSampler",
    "finetune_decoder",
    "train_autoencoder",
    "train_dynamics",
    "train_probe",
]


def __getattr__(name: str) -> Any:
    """``factory.train.<name>`` from its home module, imported now."""
    if name not in _HOMES:
        raise AttributeError(f"module 'factory.train' has no attribute {name!r}")
    return getattr(importlib.import_module(f"factory.train.{_HOMES[name]}"), name)
