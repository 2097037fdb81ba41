"""Pack a shippable model directory from trained parts.

Training directories carry optimiser state, latent caches and checkpoints; a shipped
model needs only ``config.json``, the parts' ``*.safetensors`` and ``provenance.json``.
Parts may come from different training directories (e.g. the probe trained beside the
dynamics): each part's weights and config section are taken from its source, and the
result is loaded once to prove that the parts fit together.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path

from factory.errors import ModelError
from factory.model.checkpoint import (
    CONFIG_FILE,
    PART_FIELDS,
    PARTS,
    PROVENANCE_FILE,
    load_model_dir,
    read_config,
    read_provenance,
    write_config,
)
from factory.model.config import WorldModelConfig


def pack_model(sources: dict[str, Path], out: Path, overwrite: bool = False) -> Path:
    """Write a model directory at ``out`` with ``sources[part]``'s weights for each part.

    Raises :class:`ModelError` for an unknown part, a source without that part, parts
    that do not fit together, or an existing ``out`` without ``overwrite``.
    """
    unknown = set(sources) - set(PARTS)
    if unknown:
        raise ModelError(f"unknown model part(s) {sorted(unknown)}; expected {', '.join(PARTS)}")
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ModelError(f"{out} already exists; pass --overwrite to replace it")
    base = None
    provenance: dict[str, object] = {"packed_from": {}, "parts": {}}
    for part, src in sorted(sources.items()):
        cfg = read_config(src)
        if part not in cfg.parts:
            raise ModelError(f"{src} has no trained {part} part (it has {list(cfg.parts)})")
        fields = {name: getattr(cfg, name) for name in PART_FIELDS[part]}
        base = dataclasses.replace(base or cfg, **fields)
        prov = read_provenance(src)
        provenance["packed_from"][part] = {  # type: ignore[index]
            "dir": str(src),
            "data": prov.get("data"),
            "git_commit": prov.get("git_commit"),
        }
        provenance["parts"][part] = prov.get("parts", {}).get(part, {})  # type: ignore[index]
    assert base is not None
    config = dataclasses.replace(base, parts=tuple(sorted(sources)))
    check_parts_fit(config)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for part, src in sources.items():
            shutil.copy2(src / f"{part}.safetensors", tmp / f"{part}.safetensors")
        write_config(tmp, config)
        (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2, sort_keys=True))
        load_model_dir(tmp)  # shapes and config must agree, or this raises ModelError
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / CONFIG_FILE


def check_parts_fit(config: WorldModelConfig) -> None:
    """Raise :class:`ModelError` unless the listed parts agree on frame and latent shapes."""
    ae, dyn, probe = config.autoencoder, config.dynamics, config.probe
    both = {"probe", "autoencoder"} <= set(config.parts)
    if both and tuple(probe.image_size) != tuple(ae.image_size):
        raise ModelError(
            f"probe expects {probe.image_size} frames, the autoencoder makes {ae.image_size}"
        )
    if "dynamics" in config.parts and "autoencoder" in config.parts:
        fits = ae.latent_channels == dyn.latent_channels and ae.latent_size == dyn.latent_size
        if not fits:
            raise ModelError(
                f"dynamics expects {dyn.latent_channels}x{dyn.latent_size} latents, the "
                f"autoencoder makes {ae.latent_channels}x{ae.latent_size}"
            )
