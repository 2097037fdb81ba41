"""Where a learned pile renderer put its sprite layers, in the world's own geometry.

A camera of the ``object_set`` renderer draws each object kind as a stack of sprite
layers, each on a plane that its learned homography and lift place
(:class:`~factory.model.object_set.renderer.CameraRenderer`). Nothing tells it the
heights: the homography is fitted to where the agent's blob shows (a plane some way up
the agent, not the floor), and the layers' heights are learned. This module measures
them: for each layer, the height ``z`` (board px above the floor) whose plane the
world's side camera (:func:`factory.envs.pile_render.side_camera`) projects where the
layer's plane maps the board, fitted over a grid of board points, with the mean pixel
distance left (``fit_px``). The world's disc is a shaded floor ellipse under a lit top
at :data:`~factory.envs.pile_render.DISC_HEIGHT` board px. Only an evaluation may use the
world's camera, as here.
"""

from __future__ import annotations

import numpy as np
import torch

from factory.envs import pile_geometry as geo
from factory.envs import pile_render as pr
from factory.model.object_set.homography import apply
from factory.model.object_set.renderer import CameraRenderer, SetRenderer

HEIGHTS = np.linspace(-40.0, 60.0, 1001)
"""The plane heights tried (board px, 0.1 apart)."""


def _grid() -> np.ndarray:
    """(P, 2) board points over the playable board, 40 px apart."""
    lo, hi = geo.WALL + 40.0, geo.BOARD_SIZE - geo.WALL - 40.0
    axis = np.arange(lo, hi + 1e-9, 40.0)
    return np.stack(np.meshgrid(axis, axis), -1).reshape(-1, 2)


@torch.no_grad()
def layer_heights(cam: CameraRenderer, which: str = "disc") -> list[dict[str, float]]:
    """Per layer of ``cam``'s ``which`` sprite (bottom first): ``z``, the height (board px)
    of the world's side-camera plane nearest the layer's plane, and ``fit_px``, the mean
    distance (px) between the two over the board grid. ``cam`` renders the side camera at
    its ``image_size``."""
    points = _grid()
    res = cam.cfg.image_size[0]
    world = pr.side_camera(res)
    half = cam.cfg.board / 2
    shape = (len(HEIGHTS), len(points))
    heights = np.broadcast_to(HEIGHTS[:, None, None], (*shape, 1))
    xyz = np.concatenate([np.broadcast_to(points, (*shape, 2)), heights], axis=-1)  # (Z, P, 3)
    true_px, _ = world.project(xyz)  # (Z, P, 2)
    out = []
    for height, _ in cam.sprites(which):
        _, to_pixel = cam.plane(height)
        unit = torch.as_tensor(points / half - 1, dtype=torch.float32, device=cam.h_raw.device)
        mapped, _ = apply(to_pixel, unit)
        px = (mapped.cpu().numpy().astype(np.float64) + 1) / 2 * res  # (P, 2)
        err = np.linalg.norm(true_px - px[None], axis=-1).mean(-1)  # (Z,)
        best = int(np.argmin(err))
        out.append({"z": round(float(HEIGHTS[best]), 1), "fit_px": round(float(err[best]), 3)})
    return out


def side_layer_heights(model: object) -> dict[str, list[dict[str, float]]] | None:
    """Per object kind (disc, agent), :func:`layer_heights` of ``model``'s side camera
    (None: the model has no state renderer with a side camera)."""
    renderer = getattr(model, "renderer", None)
    if not isinstance(renderer, SetRenderer) or "side" not in renderer.cfg.cameras:
        return None
    cam = renderer.camera("side")
    return {which: layer_heights(cam, which) for which in ("disc", "agent")}
