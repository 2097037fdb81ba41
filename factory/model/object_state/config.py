"""Typed configs of the ``object_state`` kind: one section per part, plus the whole model.

The world's state is low-dimensional: for PushT ``(agent x, y, block x, y, angle)`` in
board pixels and radians (the store's ``state`` + ``task_state``). ``agent_dim`` leading
entries are the robot, the next three one rigid object's pose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from factory.model.config_io import KindConfig

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
class ObjectStateConfig(KindConfig):
    """The whole ``object_state`` model: per-part configs and the parts present."""

    KIND: ClassVar[str] = KIND
    SECTIONS: ClassVar[dict[str, type]] = {
        "dynamics": ObjectDynamicsConfig,
        "renderer": RendererConfig,
        "reader": ReaderConfig,
    }

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
