"""Which files make up a model directory, where the shipped model lives, and model ids.

A model directory (shipped or a training directory) holds ``config.json``, one
``<part>.safetensors`` per part listed in the config, and ``provenance.json``. Training
directories also hold optimiser state, resume state and latent caches; none of those is
part of the model. :func:`model_files` is the one place that decides: the model id, the
copies shipped to generation workers and packing all go by it. :func:`is_training_state`
is the one list of the training state, for copies of a whole directory but that state
(the batch search's scratch copy).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from factory.errors import ModelError
from factory.model.checkpoint import CONFIG_FILE, PROVENANCE_FILE, load_model_dir, read_config

if TYPE_CHECKING:
    from factory.model.protocol import RolloutModel

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
"""Where the shipped models live: one directory per ground-truth world."""
DEFAULT_MODEL = MODELS_DIR / "pusht"
"""The shipped PushT world model, used whenever ``--model`` is omitted."""
SHIPPED_MODELS: dict[str, Path] = {"pusht": DEFAULT_MODEL, "pile": MODELS_DIR / "pile"}
"""World name -> its shipped model's directory (``models/<world>``), which may be absent."""


TRAINING_STATE_SUFFIXES = (".optim.safetensors", ".state.json", ".partial")
"""Endings of the files a training directory holds that no model (nor a copy of one)
needs: ``<part>.optim.safetensors`` and ``<part>.state.json`` (resume state,
:mod:`factory.model.checkpoint`) and ``*.partial`` (a write in progress)."""
TRAIN_ALL_FILE = "train_all.json"
"""``factory train all``'s plan and progress in its training directory: training state too."""


def is_training_state(name: str) -> bool:
    """Whether the file called ``name`` is training state rather than part of a model."""
    return name.endswith(TRAINING_STATE_SUFFIXES) or name == TRAIN_ALL_FILE


def part_file(part: str) -> str:
    """The weights file of ``part`` in a model directory."""
    return f"{part}.safetensors"


def shipped_model(world: str = "pusht") -> Path:
    """The directory of ``world``'s shipped model (it may not exist: see
    :func:`model_dir_or_default`); an unknown world raises :class:`ModelError`."""
    try:
        return SHIPPED_MODELS[world]
    except KeyError:
        raise ModelError(
            f"no shipped model for world {world!r}; shipped: {', '.join(sorted(SHIPPED_MODELS))}"
        ) from None


def model_dir_or_default(path: Path | None, world: str = "pusht") -> Path:
    """``path``, or ``world``'s shipped model; a missing shipped model says how to get one."""
    if path is not None:
        return path
    model_dir = shipped_model(world)
    if not (model_dir / CONFIG_FILE).exists():
        if world == "pusht":
            how = "train one (docs/MODEL_CARD.md) or pass --model"
        else:
            how = (
                f"pass --model DIR/model (made by `factory train all --data <a {world} store> "
                f"--out DIR`), or put a {world} model there"
            )
        raise ModelError(f"no shipped {world} model at {model_dir}; {how}")
    return model_dir


def model_files(model_dir: Path, parts: tuple[str, ...] | None = None) -> list[Path]:
    """The files of the model in ``model_dir`` (of ``parts``, default all it lists):
    the part weights in name order, then ``config.json``, then ``provenance.json`` if any."""
    config = read_config(model_dir)
    wanted = config.parts if parts is None else parts
    weights = sorted(model_dir / part_file(p) for p in wanted)
    missing = [f.name for f in weights if not f.is_file()]
    if missing:
        raise ModelError(f"model {model_dir} lists part file(s) {', '.join(missing)} it lacks")
    extra = [model_dir / PROVENANCE_FILE] if (model_dir / PROVENANCE_FILE).is_file() else []
    return [*weights, model_dir / CONFIG_FILE, *extra]


def model_identity(model_dir: Path) -> str:
    """``<dir name>@<sha256 of config and weights, 12 hex>``: the id episodes record."""
    digest = hashlib.sha256()
    for f in model_files(model_dir):
        if f.name == PROVENANCE_FILE:
            continue
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    return f"{model_dir.name}@{digest.hexdigest()[:12]}"


def load_model(
    path: Path | None, device: str = "cpu", parts: tuple[str, ...] | None = None
) -> tuple[RolloutModel, str]:
    """The model at ``path`` (default: the shipped one) and its id (:func:`model_identity`,
    covering the config and the weights, so episodes record exactly which model made them)."""
    model_dir = model_dir_or_default(path)
    model = load_model_dir(model_dir, parts=parts, device=device)
    return model, model_identity(model_dir)
