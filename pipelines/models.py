"""Where models live and how the CLI loads them: the shipped default and ``--model DIR``."""

from __future__ import annotations

import hashlib
from pathlib import Path

from factory.errors import ModelError
from factory.model import WorldModel, load_model_dir

DEFAULT_MODEL = Path(__file__).resolve().parents[1] / "models" / "pusht"
"""The shipped PushT world model, used whenever ``--model`` is omitted."""


def load_model(
    path: Path | None, device: str = "cpu", parts: tuple[str, ...] | None = None
) -> tuple[WorldModel, str]:
    """The model at ``path`` (default: the shipped one) and its id.

    The id (:func:`model_identity`) covers the config and the weights, so episodes record
    exactly which model made them. A missing default says how to train one.
    """
    model_dir = path or DEFAULT_MODEL
    if path is None and not (model_dir / "config.json").exists():
        raise ModelError(
            f"no shipped model at {model_dir}; train one (docs/MODEL_CARD.md) or pass --model"
        )
    model = load_model_dir(model_dir, parts=parts, device=device)
    return model, model_identity(model_dir)


def model_identity(model_dir: Path) -> str:
    """``<dir name>@<sha256 of config and weights, 12 hex>``: the id episodes record."""
    digest = hashlib.sha256()
    for f in [*sorted(model_dir.glob("*.safetensors")), model_dir / "config.json"]:
        if f.name.endswith(".optim.safetensors") or f.name.startswith("latents."):
            continue
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    return f"{model_dir.name}@{digest.hexdigest()[:12]}"
