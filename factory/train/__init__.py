"""Training stages of the world model (CPU-friendly; all resumable).

1. :func:`train_autoencoder` — frames -> latents, on ground-truth frames.
2. :func:`train_dynamics` — consistency-trained latent dynamics (autoencoder frozen).
3. :func:`finetune_decoder` — the decoder on the dynamics' own predicted latents.
Plus :func:`train_probe` — the frame -> task-state probe.

Each takes an :class:`EpisodeData`, a model directory, a :class:`Budget` and an optional
``on_progress(step, total_or_None, metrics)`` callback, and returns a metrics dict.
"""

from factory.train.autoencoder import train_autoencoder
from factory.train.data import EpisodeData, WindowSampler
from factory.train.decoder import DecoderTrainOptions, finetune_decoder
from factory.train.dynamics import DynamicsTrainOptions, train_dynamics
from factory.train.loop import Budget, TrainConfig
from factory.train.probe import train_probe

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
