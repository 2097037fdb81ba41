"""Typed configs of the ``object_state`` kind: one section per part, plus the whole model.

The world's state is low-dimensional: for PushT ``(agent x, y, block x, y, angle)`` in
board pixels and radians (the store's ``state`` + ``task_state``). ``agent_dim`` leading
entries are the robot, the next three one rigid object's pose.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from factory.model.config import FORMAT, FORMAT_VERSION

KIND = "object_state"


@dataclass(frozen=True)
class ObjectDynamicsConfig:
    """The object-frame MLP. ``scale`` px is the unit of relative positions (the T spans
    about 120 px); ``delta_scale`` px / ``angle_scale`` rad the units of its outputs.
    ``walls``: the board's inner faces (low, high) on both axes; within ``wall_range`` px
    of one, the block sees that wall's direction (GNS's boundary inputs), farther away
    nothing, so the board's centre (and the goal there) is invisible to it."""

    action_dim: int = 2
    agent_dim: int = 2
    hidden: int = 256
    layers: int = 3
    scale: float = 100.0
    delta_scale: float = 5.0
    angle_scale: float = 0.05
    gate_threshold: float = 0.5
    input_noise_px: float = 0.2
    walls: tuple[float, float] = (7.0, 504.0)
    wall_range: float = 150.0


@dataclass(frozen=True)
class RendererConfig:
    """Learned sprites in each object's own frame, composited over a learned background.

    ``board`` is the world's extent in state units (PushT: 512 px); each sprite covers
    ``[-extent, extent]^2`` of its object's frame (the block's origin is the T's bar, not
    its centre of gravity) at ``texels_per_unit``. ``binary_weight`` pulls each texel's
    opacity to 0 or 1: over a plain background a half-opaque darker sprite looks the same
    as an opaque one, and only the opaque one is right over the goal and the agent."""

    image_size: tuple[int, int] = (96, 96)
    board: float = 512.0
    agent_extent: float = 20.0
    block_extent: float = 130.0
    binary_weight: float = 0.1
    texels_per_unit: float = 1.0


@dataclass(frozen=True)
class ReaderConfig:
    """Frame -> state: a CNN's estimate, refined by fitting the learned renderer."""

    image_size: tuple[int, int] = (96, 96)
    width: int = 32
    refine_steps: int = 40
    refine_lr: float = 1.0


@dataclass(frozen=True)
class ObjectStateConfig:
    """The whole ``object_state`` model: per-part configs and the parts present."""

    dynamics: ObjectDynamicsConfig = field(default_factory=ObjectDynamicsConfig)
    renderer: RendererConfig = field(default_factory=RendererConfig)
    reader: ReaderConfig = field(default_factory=ReaderConfig)
    parts: tuple[str, ...] = ()
    fps: float = 10.0
    name: str = ""
    kind: str = KIND

    @property
    def cameras(self) -> tuple[str, ...]:
        """PushT's one camera, unnamed (``()``: the main camera only)."""
        return ()

    @property
    def image_shape(self) -> tuple[int, int, int]:
        h, w = self.renderer.image_size
        return (h, w, 3)

    @property
    def action_dim(self) -> int:
        return self.dynamics.action_dim

    @property
    def state_dim(self) -> int:
        """Robot dims plus one pose (x, y, angle)."""
        return self.dynamics.agent_dim + 3

    @property
    def context(self) -> int:
        """Past states the dynamics reads (the current one and one before it)."""
        return 2

    def with_parts(self, *parts: str) -> ObjectStateConfig:
        return dataclasses.replace(self, parts=tuple(sorted(set(self.parts) | set(parts))))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION}
        out.update(_jsonable(dataclasses.asdict(self)))
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ObjectStateConfig:
        """Parse :meth:`to_dict`'s output; unknown keys raise ``ValueError``."""
        body = {k: v for k, v in data.items() if k not in ("format", "version")}
        if body.get("kind") != KIND:
            raise ValueError(f"kind is {body.get('kind')!r}, expected {KIND!r}")
        sections = {"dynamics": ObjectDynamicsConfig, "renderer": RendererConfig}
        sections["reader"] = ReaderConfig
        kwargs: dict[str, Any] = {}
        for name, value in body.items():
            if name in sections:
                kwargs[name] = _section(sections[name], value)
            elif name not in {f.name for f in dataclasses.fields(cls)}:
                raise ValueError(f"unknown ObjectStateConfig key {name!r}")
            else:
                kwargs[name] = tuple(value) if isinstance(value, list) else value
        return cls(**kwargs)


def _section[T](cls: type[T], data: dict[str, Any]) -> T:
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys: {sorted(unknown)}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    return obj
