"""Factories for tests: tiny world models (32 px, random weights) and their directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from factory.model import (
    Autoencoder,
    AutoencoderConfig,
    ConsistencyConfig,
    Dynamics,
    DynamicsConfig,
    ProbeConfig,
    StateProbe,
    WorldModel,
    WorldModelConfig,
    save_part,
)


def tiny_config(context: int = 3, action_dim: int = 2, size: int = 32) -> WorldModelConfig:
    """A world-model config small enough to run a step in milliseconds."""
    lat = size // 4
    return WorldModelConfig(
        autoencoder=AutoencoderConfig(image_size=(size, size), channels=(8, 16), blocks=(1, 1)),
        dynamics=DynamicsConfig(
            latent_size=(lat, lat),
            context=context,
            channels=(16, 24),
            emb_dim=32,
            state_head_channels=8,
            action_dim=action_dim,
        ),
        probe=ProbeConfig(image_size=(size, size), channels=(8, 16), keypoints=4, hidden=32),
        consistency=ConsistencyConfig(s0=4, s1=8, sigma_max=20.0),
        name="tiny",
    )


def tiny_world_model(context: int = 3, seed: int = 0, action_dim: int = 2) -> WorldModel:
    """A :class:`WorldModel` with random, non-degenerate weights."""
    torch.manual_seed(seed)
    cfg = tiny_config(context, action_dim).with_parts("autoencoder", "dynamics", "probe")
    dyn = Dynamics(cfg.dynamics, cfg.consistency)
    ae = Autoencoder(cfg.autoencoder)
    for p in [*dyn.parameters(), *ae.decoder.out.parameters()]:  # no zero-init outputs
        torch.nn.init.normal_(p, std=0.05)
    return WorldModel(cfg, ae, dyn, StateProbe(cfg.probe)).eval()


def write_tiny_model_dir(path: Path, context: int = 3, action_dim: int = 2) -> Path:
    """Save a tiny model's three parts into ``path`` (a loadable model directory)."""
    wm = tiny_world_model(context, action_dim=action_dim)
    cfg = wm.config
    parts = {"autoencoder": wm.autoencoder, "dynamics": wm.dynamics, "probe": wm.probe}
    for name, module in parts.items():
        assert module is not None
        cfg = save_part(path, name, module, cfg, steps=1, wall_s=0.0, data="tests")
    return path


def assert_one_line_error(result: Any, *needles: str) -> None:
    """A CLI result (typer's CliRunner) is exit code 2 with one line, no traceback, and
    every ``needle`` in it."""
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    for needle in needles:
        assert needle in text, text
