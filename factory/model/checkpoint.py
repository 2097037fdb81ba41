"""Model directories: safetensors weights + JSON config and provenance. No pickle.

A model directory holds::

    config.json                 the kind's config (format and kind keys, per-part configs,
                                parts list); see factory.model.registry
    <part>.safetensors          weights and buffers of each present part
    provenance.json             data path, git commit, steps and wall time per part
    <part>.optim.safetensors    training state for resume: optimiser tensors, torch RNG
    <part>.state.json           step, elapsed time, optimiser param groups, numpy RNG

Every refusal is a one-line :class:`~factory.errors.ModelError`.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from factory.errors import ModelError
from factory.model.config import FORMAT
from factory.model.registry import DEFAULT_KIND, get_kind, kind_of

log = logging.getLogger(__name__)

PARTS = ("autoencoder", "dynamics", "probe", "reader", "renderer")
"""Every part name any registered kind uses (each kind's own list: ``kind_of(cfg).parts``)."""
CONFIG_FILE = "config.json"
PROVENANCE_FILE = "provenance.json"


def build_part(name: str, config: Any) -> nn.Module:
    """A freshly initialised part module of the config's kind."""
    return kind_of(config).build_part(name, config)


def part_fields(config: Any, part: str) -> tuple[str, ...]:
    """The config sections that belong to ``part`` in the config's kind."""
    fields = kind_of(config).part_fields
    if part not in fields:
        raise ModelError(
            f"unknown {kind_of(config).name} part {part!r}; expected one of "
            f"{', '.join(sorted(fields))}"
        )
    return fields[part]


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(text)
    os.replace(tmp, path)


def _atomic_save_tensors(
    path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]
) -> None:
    tmp = path.with_name(path.name + ".partial")
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata)
    os.replace(tmp, path)


def read_config(model_dir: str | Path) -> Any:
    """The directory's config (its kind's config class); ModelError when missing or
    foreign. A config without ``kind`` is a ``latent_grid`` one (written before kinds)."""
    d = Path(model_dir)
    if not d.exists():
        raise ModelError(f"model directory {d} does not exist")
    if not d.is_dir():
        raise ModelError(f"{d} is not a directory")
    path = d / CONFIG_FILE
    if not path.is_file():
        raise ModelError(f"{d} is not a model directory (no {CONFIG_FILE})")
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ModelError(f"{path} is not readable JSON: {err}") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise ModelError(f"{d} is not a model directory (format {found!r}, expected {FORMAT!r})")
    kind = get_kind(str(data.get("kind", DEFAULT_KIND)))
    try:
        return kind.config_from_dict(data)
    except (ValueError, TypeError) as err:
        raise ModelError(f"{path}: {err}") from err


def write_config(model_dir: str | Path, config: Any) -> None:
    d = Path(model_dir)
    d.mkdir(parents=True, exist_ok=True)
    _atomic_write_text(d / CONFIG_FILE, config.to_json())


def git_commit() -> str:
    """``git rev-parse HEAD`` of this source tree, or "unknown"."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else "unknown"


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def read_provenance(model_dir: str | Path) -> dict[str, Any]:
    path = Path(model_dir) / PROVENANCE_FILE
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else {}


def update_provenance(model_dir: str | Path, part: str, **fields: Any) -> None:
    """Record ``fields`` (steps, wall_s, data path, ...) for ``part`` in provenance.json.

    A part that came packed (``packed_from``) and is trained further here now comes from
    this directory: its packed origin and that origin's record (steps, wall time) move to
    the part's ``init_from``, the weights this training started from."""
    d = Path(model_dir)
    prov = read_provenance(d)
    _trained_here(prov, part)
    prov.setdefault("created", _now())
    prov["git_commit"] = git_commit()
    if fields.get("data") is not None:
        prov["data"] = str(fields["data"])
    entry = prov.setdefault("parts", {}).setdefault(part, {})
    entry.update({k: v for k, v in fields.items() if k != "data" and v is not None})
    entry["saved_at"] = _now()
    _atomic_write_text(d / PROVENANCE_FILE, json.dumps(prov, indent=2, sort_keys=True))


def _trained_here(prov: dict[str, Any], part: str) -> None:
    """Move a packed part's origin to ``parts[part]["init_from"]`` (in place)."""
    packed = prov.get("packed_from", {})
    if part not in packed:
        return
    origin = dict(packed.pop(part))
    if not packed:
        del prov["packed_from"]
    before = prov.setdefault("parts", {}).pop(part, {})
    origin.update({k: v for k, v in before.items() if k != "init_from"})
    prov["parts"][part] = {"init_from": origin}


def save_part(
    model_dir: str | Path,
    name: str,
    module: nn.Module,
    config: Any,
    **provenance: Any,
) -> Any:
    """Write ``<name>.safetensors``, list the part in config.json, update provenance.

    Returns the config as written (with ``name`` in ``parts``).
    """
    part_fields(config, name)  # refuses a part the config's kind does not have
    d = Path(model_dir)
    d.mkdir(parents=True, exist_ok=True)
    _atomic_save_tensors(
        d / f"{name}.safetensors", dict(module.state_dict()), {"format": FORMAT, "part": name}
    )
    config = config.with_parts(name)
    write_config(d, config)
    update_provenance(d, name, **provenance)
    log.info("saved %s to %s", name, d)
    return config


def _check_shapes(path: Path, module: nn.Module) -> None:
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    try:
        with safe_open(str(path), framework="pt") as f:
            found = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    except Exception as err:  # safetensors raises its own error types
        raise ModelError(f"{path} is not a readable safetensors file: {err}") from err
    missing = sorted(set(expected) - set(found))
    if missing:
        raise ModelError(f"{path.name}: tensor {missing[0]!r} is missing")
    extra = sorted(set(found) - set(expected))
    if extra:
        raise ModelError(f"{path.name}: unexpected tensor {extra[0]!r} (config mismatch)")
    for k, shape in expected.items():
        if found[k] != shape:
            raise ModelError(
                f"{path.name}: tensor {k!r} has shape {found[k]} but the config expects {shape}"
            )


def load_part(
    model_dir: str | Path,
    name: str,
    config: Any = None,
    device: str | torch.device = "cpu",
) -> nn.Module:
    """Build part ``name`` from the config and load its weights (shape-checked first)."""
    d = Path(model_dir)
    config = config or read_config(d)
    if name not in config.parts:
        raise ModelError(f"{d} has no {name} part (it holds: {', '.join(config.parts) or 'none'})")
    path = d / f"{name}.safetensors"
    if not path.is_file():
        raise ModelError(f"{d} lists a {name} part but {path.name} is missing")
    module = build_part(name, config)
    _check_shapes(path, module)
    module.load_state_dict(load_file(str(path)), strict=True)
    return module.to(device).eval()


def check_parts_fit(config: Any, parts: tuple[str, ...] | list[str]) -> None:
    """Raise :class:`ModelError` unless ``parts`` fit together (the kind decides how)."""
    kind_of(config).check_parts_fit(config, tuple(parts))


def load_model_dir(
    path: str | Path,
    parts: tuple[str, ...] | list[str] | None = None,
    device: str | torch.device = "cpu",
) -> Any:
    """Load the rollout model of the directory's kind in one call (a :class:`WorldModel`
    for ``latent_grid``); ``parts`` None: every part present."""
    config = read_config(path)
    wanted = tuple(parts) if parts is not None else config.parts
    check_parts_fit(config, wanted)
    loaded: dict[str, nn.Module] = {n: load_part(path, n, config, device) for n in wanted}
    model = kind_of(config).assemble(config, loaded)
    return model.to(device).eval()


def _flatten_optimizer(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, entry in state["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{pid}.{key}"] = value
            else:
                scalars.setdefault(str(pid), {})[key] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if not name.startswith("state."):
            continue
        _, pid, key = name.split(".", 2)
        state.setdefault(int(pid), {})[key] = value
    for pid, entry in meta.get("scalars", {}).items():
        state.setdefault(int(pid), {}).update(entry)
    return {"state": state, "param_groups": meta["param_groups"]}


def save_training_state(
    model_dir: str | Path,
    part: str,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    generator: torch.Generator | None = None,
) -> None:
    """Write ``<part>.optim.safetensors`` and ``<part>.state.json`` (JSON-able ``state``)."""
    d = Path(model_dir)
    tensors, meta = _flatten_optimizer(optimizer.state_dict())
    if generator is not None:
        tensors["rng.torch"] = generator.get_state()
    _atomic_save_tensors(d / f"{part}.optim.safetensors", tensors, {"format": FORMAT})
    body = dict(state)
    body["optimizer"] = meta
    _atomic_write_text(d / f"{part}.state.json", json.dumps(body))


def load_training_state(
    model_dir: str | Path,
    part: str,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator | None = None,
) -> dict[str, Any] | None:
    """Restore the optimiser (and generator); the saved ``state`` dict, or None if absent."""
    d = Path(model_dir)
    jpath, tpath = d / f"{part}.state.json", d / f"{part}.optim.safetensors"
    if not (jpath.is_file() and tpath.is_file()):
        return None
    body = json.loads(jpath.read_text())
    tensors = load_file(str(tpath))
    try:
        optimizer.load_state_dict(_unflatten_optimizer(tensors, body.pop("optimizer")))
    except (ValueError, KeyError) as err:
        raise ModelError(f"{tpath.name} does not match the model being trained: {err}") from err
    if generator is not None and "rng.torch" in tensors:
        generator.set_state(tensors["rng.torch"])
    return dict(body)
