"""A model directory (or a policy checkpoint) as bytes in memory, and back on disk.

Generation workers may run on machines without the driver's files: the driver sends
them the model as ``{relative path: bytes}`` (:func:`model_bytes`, :func:`pack_dir`) and
each worker writes its copy into a directory of its own (:func:`unpack_dir`).
"""

from __future__ import annotations

from pathlib import Path

from factory.model.files import TRAINING_STATE_SUFFIXES, model_files


def pack_dir(path: Path) -> dict[str, bytes]:
    """The files of a (flat or nested) directory as {relative path: bytes}, minus
    training state (:data:`~factory.model.files.TRAINING_STATE_SUFFIXES`); used for
    policy checkpoints."""
    return {
        str(f.relative_to(path)): f.read_bytes()
        for f in sorted(path.rglob("*"))
        if f.is_file() and not f.name.endswith(TRAINING_STATE_SUFFIXES)
    }


def model_bytes(model_dir: Path) -> dict[str, bytes]:
    """The model's own files (:func:`factory.model.files.model_files`) as {name: bytes}:
    a training directory's optimiser state and latent caches stay behind."""
    return {f.name: f.read_bytes() for f in model_files(model_dir)}


def unpack_dir(files: dict[str, bytes], dest: Path) -> Path:
    """Write ``files`` ({relative path: bytes}) under ``dest``; returns ``dest``."""
    for rel, data in files.items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return dest
