"""Typed configs of the ``object_set`` kind: one section per part, plus the whole model.

The world's state is the agent's x, y then ``n_discs`` disc centres ``x0, y0, x1, y1, ...``
in board px (the store's ``state`` + ``task_state``): K = 2 N task-state entries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from factory.model.config_io import KindConfig

KIND = "object_set"


@dataclass(frozen=True)
class SetDynamicsConfig:
    """The interaction network over the discs (all lengths in board px, per 10 Hz step).

    ``radius``: disc-disc edges join discs closer than this; ``agent_radius``: agent->disc
    edges join a disc to an agent closer than this now or at its next position. Relative
    positions are in units of ``radius``, velocities of ``vel_scale``, outputs of
    ``delta_scale``. ``hidden`` is the latent width of every shared MLP (``mlp_layers``
    hidden layers each), ``message_steps`` the rounds of message passing.

    Stillness: a disc is *active* when it moved in the last step, when the agent's path to
    its next position passes within ``reach_agent`` of it, or (``hops`` times over) when
    an active disc lies within ``reach_disc``. Only active discs may move, and only when
    their learned gate says so (``gate_threshold``); every other disc keeps its position
    bit for bit. ``moved_px``: a disc that moved more than this is "moving" for the gate.

    ``walls``: the board's inner faces (low, high) on both axes; within ``wall_range`` px
    of one a disc sees how near it is (GNS's boundary inputs), farther away nothing.
    ``input_noise_px``: training jitter of the input positions (against drift).

    ``coast``: each moving disc's step is a learned multiple of its last step (one scalar,
    fitted by least squares when the part is new, then trained) plus the network's
    output; without it (the default) the network's output is the whole step. It makes a
    freely sliding disc's step exact but did not improve rollouts at 4,031 steps of
    training (docs/MODEL_CARD_pile.md, "And the dynamics?"), so it is off unless set
    (``--set dynamics.coast=true``).

    ``edge_frames``: every edge reads its inputs in its own pair's frame and sends back
    ``vectors`` (at least 2) vector channels in it
    (:mod:`factory.model.object_set.frames`), so one
    contact law serves every direction; False (the default): inputs in board axes, the
    network of every model before 2026-12-07."""

    action_dim: int = 2
    agent_dim: int = 2
    hidden: int = 64
    mlp_layers: int = 2
    message_steps: int = 2
    radius: float = 60.0
    agent_radius: float = 90.0
    vel_scale: float = 10.0
    delta_scale: float = 5.0
    reach_agent: float = 30.0
    reach_disc: float = 24.0
    hops: int = 6
    gate_threshold: float = 0.5
    moved_px: float = 0.01
    input_noise_px: float = 0.2
    coast: bool = False
    edge_frames: bool = False
    vectors: int = 4

    def __post_init__(self) -> None:
        if not (isinstance(self.vectors, int) and self.vectors >= 2):
            raise ValueError(
                "dynamics.vectors must be an integer >= 2 (a disc's velocity and wall "
                f"vector channels), got {self.vectors!r}"
            )

    walls: tuple[float, float] = (5.0, 507.0)
    wall_range: float = 40.0


@dataclass(frozen=True)
class SetRendererConfig:
    """One learned camera per name in ``cameras`` (the main one first).

    Each camera has a background image, a homography from its pixels to the board plane
    (8 parameters, moved in steps of ``homography_step`` per unit of its raw parameters)
    and RGBA sprites of a disc and of the agent in board-plane coordinates around each
    object's centre, covering ``[-extent, extent]^2`` at ``texels_per_unit``.
    ``binary_weight`` pulls every texel's opacity to 0 or 1.

    ``supersample``: each output pixel averages ``supersample``^2 samples of the scene
    (composited at that many times the resolution, then box-filtered), so a pixel whose
    footprint on the board is wider than a sprite texel (the side camera's far rows) gets
    the object's coverage, not one point of it. ``layers``: each sprite is a stack of that
    many RGBA layers on planes at evenly spaced heights above the board plane, the higher
    drawn nearer the camera (or as ``order_by_rise`` orders them); every camera learns
    how a unit of height moves its image (its projection's third column, ``lift``), so a
    layer's shift varies over the board as the camera's perspective does; what each
    layer holds is learned. ``layers`` 1 is a flat
    sprite on the plane. ``supersample`` 1 and ``layers`` 1 are the version-1 renderer
    (``models/pile`` before 2026-12-04).

    ``lift_start``: board px; a fresh camera's top layer starts that far above its bottom
    one, up being toward the camera as a pinhole fitted to its homography has it
    (:func:`~factory.model.object_set.homography.vertical_lift`); 0 starts every layer on
    one plane (the renderers before 2026-12-07), whose lift may then learn either way.
    ``fg_weight``: the loss weighs a camera's pixels that differ from its background, and
    their 8 neighbours, ``1 + fg_weight`` times the rest (0: plain MSE); a pile's discs
    cover a few hundredths of a frame. ``learn_heights``: each kind of object (disc,
    agent) learns its own layers' heights, in units of the lift, from 0 .. 1 evenly;
    False: every kind's layers at 0 .. 1 (the renderers before 2026-12-07), so a disc's
    top layer and the agent's share one plane whatever their heights. ``order_by_rise``:
    within an object, its layers are composited in the order the learned geometry shows
    them, the one shown highest up the image nearest (a camera looking down on the board
    sees what is higher over what is lower), so a layer whose plane the lift puts below
    the bottom layer's is drawn under it; False: the higher index nearer, wherever the
    lift puts it (the renderers before 2026-12-07)."""

    image_size: tuple[int, int] = (96, 96)
    board: float = 512.0
    cameras: tuple[str, ...] = ("top", "side")
    disc_extent: float = 24.0
    agent_extent: float = 44.0
    texels_per_unit: float = 0.5
    binary_weight: float = 0.1
    homography_step: float = 0.01
    supersample: int = 1
    layers: int = 1
    lift_start: float = 0.0
    fg_weight: float = 0.0
    learn_heights: bool = False
    order_by_rise: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.supersample, int) and self.supersample >= 1):
            raise ValueError(
                f"renderer.supersample must be an integer >= 1, got {self.supersample!r}"
            )
        if not (isinstance(self.layers, int) and self.layers >= 1):
            raise ValueError(f"renderer.layers must be an integer >= 1, got {self.layers!r}")
        for name in ("lift_start", "fg_weight"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"renderer.{name} must be a number >= 0, got {value!r}")


@dataclass(frozen=True)
class SetReaderConfig:
    """Top frame -> agent xy and the disc set: a fully convolutional heatmap net.

    ``width`` channels, ``layers`` 3x3 convolutions at full resolution (dilations cycle
    1, 2); ``sigma`` px is the width of the training heatmaps' peaks."""

    image_size: tuple[int, int] = (96, 96)
    width: int = 32
    layers: int = 4
    sigma: float = 1.0


@dataclass(frozen=True)
class ObjectSetConfig(KindConfig):
    """The whole ``object_set`` model: per-part configs, the parts present, the world."""

    KIND: ClassVar[str] = KIND
    SECTIONS: ClassVar[dict[str, type]] = {
        "dynamics": SetDynamicsConfig,
        "renderer": SetRendererConfig,
        "reader": SetReaderConfig,
    }

    dynamics: SetDynamicsConfig = field(default_factory=SetDynamicsConfig)
    renderer: SetRendererConfig = field(default_factory=SetRendererConfig)
    reader: SetReaderConfig = field(default_factory=SetReaderConfig)
    parts: tuple[str, ...] = ()
    n_discs: int = 30
    world: str = "pile"
    fps: float = 10.0
    name: str = ""
    kind: str = KIND

    @property
    def image_shape(self) -> tuple[int, int, int]:
        h, w = self.renderer.image_size
        return (h, w, 3)

    @property
    def action_dim(self) -> int:
        return self.dynamics.action_dim

    @property
    def state_dim(self) -> int:
        """Agent xy plus every disc's xy."""
        return self.dynamics.agent_dim + 2 * self.n_discs

    @property
    def context(self) -> int:
        """Past states the dynamics reads (the current one and one before it)."""
        return 2

    @property
    def cameras(self) -> tuple[str, ...]:
        """The cameras the renderer draws, the main one first."""
        return self.renderer.cameras
