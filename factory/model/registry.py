"""Model kinds: ``config.json``'s ``kind`` picks the parts, configs and builders.

A kind is registered once by name (as lerobot registers its configs). Everything that
loads, packs or trains a model directory goes through :func:`kind_of` or :func:`get_kind`,
so a new kind needs no change in any consumer: they all use the rollout protocol
(:mod:`factory.model.protocol`).

- ``latent_grid``: frozen image autoencoder -> 2D latent grid, a U-Net dynamics on the
  latents with state and task heads, an optional image probe. Needs only frames and
  actions (plus the task state for its heads).
- ``object_state``: the world's low-dimensional state (agent xy, block pose), an
  object-frame MLP dynamics, a sprite renderer state -> frame and a reader frame -> state.
  Needs the object state in the training data (``task_state``).
- ``object_set``: a set of identical discs (pile): agent xy + every disc's xy, an
  interaction-network dynamics over the set, a homography sprite renderer per camera and
  a heatmap reader. Needs the disc positions in the training data (``task_state``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from factory.errors import ModelError

DEFAULT_KIND = "latent_grid"


@dataclass(frozen=True)
class ModelKind:
    """What a kind is made of.

    ``parts``: the part names a directory may hold; ``part_fields``: the config sections
    that belong to each part (packing takes them with the part); ``config_from_dict``
    parses ``config.json``; ``default_config()`` a fresh config; ``build_part(name, cfg)``
    a fresh part; ``check_parts_fit(cfg, parts)`` raises ModelError for parts that cannot
    work together; ``assemble(cfg, parts)`` the rollout model from loaded parts;
    ``rollout_parts``: the parts a rollout needs; ``resized(cfg, (H, W))``."""

    name: str
    parts: tuple[str, ...]
    part_fields: dict[str, tuple[str, ...]]
    config_from_dict: Callable[[dict[str, Any]], Any]
    default_config: Callable[[], Any]
    build_part: Callable[[str, Any], nn.Module]
    check_parts_fit: Callable[[Any, tuple[str, ...]], None]
    assemble: Callable[[Any, dict[str, nn.Module]], Any]
    rollout_parts: tuple[str, ...]
    resized: Callable[[Any, tuple[int, int]], Any]
    """The same architecture for frames of another (H, W), no parts listed."""
    task_reader_missing: Callable[[Any], str | None] = lambda config: None
    """What a rollout lacks to read the task state, or None."""
    description: str = ""

    def missing_for_rollout(self, config: Any) -> list[str]:
        """The parts a rollout that scores episodes needs and ``config`` does not list."""
        missing = [p for p in self.rollout_parts if p not in config.parts]
        reader = self.task_reader_missing(config)
        return missing + ([reader] if reader else [])


_KINDS: dict[str, ModelKind] = {}


def register_kind(kind: ModelKind) -> ModelKind:
    _KINDS[kind.name] = kind
    return kind


def kind_names() -> tuple[str, ...]:
    _load_builtin()
    return tuple(sorted(_KINDS))


def get_kind(name: str) -> ModelKind:
    """The registered kind ``name``; ModelError naming the known kinds otherwise."""
    _load_builtin()
    if name not in _KINDS:
        raise ModelError(
            f"unknown model kind {name!r}; expected one of {', '.join(sorted(_KINDS))}"
        )
    return _KINDS[name]


def kind_of(config: Any) -> ModelKind:
    """The kind of a parsed config (its ``kind`` field)."""
    return get_kind(getattr(config, "kind", DEFAULT_KIND))


def world_of(config: Any) -> str:
    """The ground-truth world a model of ``config`` simulates (its ``world`` field; kinds
    without one model PushT)."""
    return str(getattr(config, "world", "pusht"))


def _load_builtin() -> None:
    if not _KINDS:
        from factory.model import kinds  # noqa: F401  (registers the built-in kinds)
