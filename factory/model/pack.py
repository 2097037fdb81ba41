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
    PARTS,
    PROVENANCE_FILE,
    load_model_dir,
    part_fields,
    read_config,
    read_provenance,
    write_config,
)


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
    packed_from: dict[str, dict[str, object]] = {}
    part_provenance: dict[str, object] = {}
    for part, src in sorted(sources.items()):
        cfg = read_config(src)
        if base is not None and base.kind != cfg.kind:
            raise ModelError(f"{src} is a {cfg.kind} model; the other parts are {base.kind}")
        if part not in cfg.parts:
            raise ModelError(f"{src} has no trained {part} part (it has {list(cfg.parts)})")
        fields = {name: getattr(cfg, name) for name in part_fields(cfg, part)}
        base = dataclasses.replace(base or cfg, **fields)
        prov = read_provenance(src)
        packed_from[part] = prov.get("packed_from", {}).get(part) or {
            "dir": str(src),
            "data": prov.get("data"),
            "git_commit": prov.get("git_commit"),
        }  # a packed model's part keeps the training directory it came from
        part_provenance[part] = prov.get("parts", {}).get(part, {})
    assert base is not None
    config = dataclasses.replace(base, parts=tuple(sorted(sources)))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for part, src in sources.items():
            shutil.copy2(src / f"{part}.safetensors", tmp / f"{part}.safetensors")
        write_config(tmp, config)
        (tmp / PROVENANCE_FILE).write_text(
            json.dumps(
                {"packed_from": packed_from, "parts": part_provenance}, indent=2, sort_keys=True
            )
        )
        load_model_dir(tmp)  # shapes and parts must fit together, or this raises ModelError
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / CONFIG_FILE
