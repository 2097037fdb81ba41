"""The compute device a command runs on."""

from __future__ import annotations

from factory.errors import FactoryError


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; ``cuda`` without CUDA is refused."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise FactoryError("--device cuda requested but CUDA is not available; use --device cpu")
    if device != "cpu" and not device.startswith("cuda"):
        raise FactoryError(f"unknown --device {device!r}; use auto, cpu or cuda[:N]")
    return device
