"""Numpy rasterisation of the pile scene from two cameras, ``top`` and ``side``.

``top`` looks straight down like PushT's view (column = x R / 512, row = y R / 512): a
white board with grey walls, the goal square shaded light green, the discs one colour and
the agent (RoyalBlue, as in PushT) drawn over them. ``side`` is a fixed perspective camera
above the board's bottom edge (top-view y = 512), tilted 40 degrees down towards the board's
centre: the floor (board, walls and goal square) is the projected floor polygon, and every
disc and the agent are short pucks, each drawn as projected ellipses from its bottom
(shaded) to its top, far to near.

Every shape is an anti-aliased ellipse stamp; all stamps of a frame are composited with the
"over" operator in one vectorised pass (:func:`_composite`), and the static floor of each
camera is rendered once per resolution (4x supersampled) and cached.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from factory.envs import pile_geometry as geo

BOARD_RGB = (255.0, 255.0, 255.0)
WALL_RGB = (211.0, 211.0, 211.0)  # LightGray
GOAL_RGB = (144.0, 238.0, 144.0)  # LightGreen
DISC_RGB = (210.0, 105.0, 30.0)  # Chocolate
AGENT_RGB = (65.0, 105.0, 225.0)  # RoyalBlue
SKY_RGB = (46.0, 46.0, 56.0)  # beyond the board in the side view
SHADE = 0.6  # a puck's bottom ellipse is its colour times this
DISC_HEIGHT, AGENT_HEIGHT = 8.0, 20.0  # puck heights (board px) in the side view
ELEVATION = np.deg2rad(40.0)  # the side camera's tilt below the horizontal
DISTANCE = 750.0  # the side camera's distance from the board centre (board px)
SUPERSAMPLE = 4


# -- the side camera ----------------------------------------------------------------------
@dataclass(frozen=True)
class Camera:
    """A pinhole camera: centre (3,), orthonormal right / up / forward (3,) rows of
    ``basis`` (3, 3), focal length and principal point in pixels."""

    centre: np.ndarray
    basis: np.ndarray
    focal: float
    principal: tuple[float, float]

    def project(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """World points (..., 3) -> (pixel (col, row) (..., 2), depth (...,))."""
        q = (np.asarray(points, dtype=np.float64) - self.centre) @ self.basis.T  # (..., 3)
        depth = q[..., 2]
        col = self.principal[0] + self.focal * q[..., 0] / depth
        row = self.principal[1] - self.focal * q[..., 1] / depth
        return np.stack([col, row], axis=-1), depth

    def floor_points(self, pixels: np.ndarray) -> np.ndarray:
        """Where the rays through pixel positions (..., 2) meet the floor z = 0 (..., 2)
        (NaN where a ray misses it)."""
        px = np.asarray(pixels, dtype=np.float64)
        x = (px[..., 0] - self.principal[0]) / self.focal
        y = -(px[..., 1] - self.principal[1]) / self.focal
        rays = x[..., None] * self.basis[0] + y[..., None] * self.basis[1] + self.basis[2]
        t = -self.centre[2] / rays[..., 2]
        t = np.where(t > 0, t, np.nan)
        return self.centre[:2] + t[..., None] * rays[..., :2]


@functools.lru_cache(maxsize=8)
def side_camera(resolution: int) -> Camera:
    """The side camera at ``resolution`` px, its focal length fitted to show the board."""
    half = geo.BOARD_SIZE / 2
    target = np.array([half, half, 0.0])
    centre = target + DISTANCE * np.array([0.0, np.cos(ELEVATION), np.sin(ELEVATION)])
    fwd = (target - centre) / np.linalg.norm(target - centre)
    right = np.cross(np.array([0.0, 0.0, 1.0]), fwd)  # +x of the board to the image's right
    right = right / np.linalg.norm(right)
    up = np.cross(fwd, right)
    unit = Camera(centre, np.stack([right, up, fwd]), 1.0, (0.0, 0.0))
    corners = np.array([[0, 0, 0], [geo.BOARD_SIZE, 0, 0], [0, geo.BOARD_SIZE, 0]], float)
    corners = np.vstack([corners, [[geo.BOARD_SIZE, geo.BOARD_SIZE, 0]]])
    px, _ = unit.project(corners)
    lo, hi = px.min(axis=0), px.max(axis=0)
    focal = 0.94 * resolution / float(np.max(hi - lo))
    mid = (lo + hi) / 2 * focal
    principal = (resolution / 2 - float(mid[0]), resolution / 2 - float(mid[1]))
    return Camera(centre, unit.basis, focal, principal)


# -- the static floors --------------------------------------------------------------------
def _floor_colour(xy: np.ndarray) -> np.ndarray:
    """The floor's colour (..., 3) at board points (..., 2) (NaN: off the board)."""
    x, y = xy[..., 0], xy[..., 1]
    out = np.empty((*xy.shape[:-1], 3))
    out[...] = SKY_RGB
    on = (x >= 0) & (x <= geo.BOARD_SIZE) & (y >= 0) & (y <= geo.BOARD_SIZE)
    out[on] = WALL_RGB
    inner = on & (np.minimum(x, y) >= geo.WALL) & (np.maximum(x, y) <= geo.BOARD_SIZE - geo.WALL)
    out[inner] = BOARD_RGB
    out[geo.inside_goal(np.nan_to_num(xy, nan=-1.0)) & on] = GOAL_RGB
    return out


def _supersampled_pixels(resolution: int) -> np.ndarray:
    """Sample positions (R, R, S*S, 2) in pixel units (col, row) inside every pixel."""
    sub = (np.arange(SUPERSAMPLE) + 0.5) / SUPERSAMPLE
    grid = np.arange(resolution)
    cols = grid[None, :, None, None] + sub[None, None, None, :]
    rows = grid[:, None, None, None] + sub[None, None, :, None]
    pts = np.stack(np.broadcast_arrays(cols, rows), axis=-1)  # (R, R, S, S, 2)
    return pts.reshape(resolution, resolution, SUPERSAMPLE * SUPERSAMPLE, 2)


@dataclass(frozen=True)
class Floor:
    """A camera's empty scene at one resolution: ``rgb`` (R, R, 3) float64 and the same
    rounded, ``image`` (R, R, 3) uint8."""

    rgb: np.ndarray
    image: np.ndarray

    @classmethod
    def of(cls, rgb: np.ndarray) -> Floor:
        """A floor from its colours (read-only: the floors are cached and shared)."""
        image = np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
        rgb.setflags(write=False)
        image.setflags(write=False)
        return cls(rgb, image)


@functools.lru_cache(maxsize=8)
def top_floor(resolution: int) -> Floor:
    """The top camera's empty floor."""
    xy = _supersampled_pixels(resolution) * (geo.BOARD_SIZE / resolution)
    return Floor.of(_floor_colour(xy).mean(axis=2))


@functools.lru_cache(maxsize=8)
def side_floor(resolution: int) -> Floor:
    """The side camera's empty floor."""
    xy = side_camera(resolution).floor_points(_supersampled_pixels(resolution))
    return Floor.of(_floor_colour(np.nan_to_num(xy, nan=-1.0)).mean(axis=2))


# -- stamps and compositing ---------------------------------------------------------------
def _stamps(
    centres: np.ndarray, axes: np.ndarray, resolution: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Anti-aliased coverage of ellipses ``centre + axes @ (cos t, sin t)``.

    centres (M, 2) and axes (M, 2, 2) (columns: the two semi-axis vectors) in pixel units
    (col, row) -> (stamp index (E,), flat pixel index (E,), alpha (E,)) of every pixel in
    each ellipse's window with positive coverage.
    """
    half = int(np.ceil(np.max(np.hypot(axes[:, :, 0], axes[:, :, 1])) + 1.0))  # bounding box
    off = np.arange(-half, half + 1)
    base = np.floor(centres).astype(np.int64)  # (M, 2)
    cols = base[:, 0, None] + np.tile(off, len(off))[None]  # (M, P)
    rows = base[:, 1, None] + np.repeat(off, len(off))[None]
    dx = cols + (0.5 - centres[:, 0, None])
    dy = rows + (0.5 - centres[:, 1, None])
    a, b, c, d = (axes[:, i, j, None] for i, j in ((0, 0), (0, 1), (1, 0), (1, 1)))
    det = a * d - b * c
    wx, wy = (d * dx - b * dy) / det, (a * dy - c * dx) / det  # unit-circle coordinates
    norm = np.sqrt(wx * wx + wy * wy)
    # the ellipse's radius along the ray to the pixel is |rel| / norm, so the pixel lies
    # (1 - norm) |rel| / norm px inside the edge
    inside = np.sqrt(dx * dx + dy * dy) * (1.0 - norm) / np.maximum(norm, 1e-12)
    alpha = np.clip(np.where(norm > 1e-9, inside, 1.0) + 0.5, 0.0, 1.0)
    keep = (alpha > 0) & (cols >= 0) & (cols < resolution) & (rows >= 0) & (rows < resolution)
    idx = np.nonzero(keep)
    return idx[0], rows[idx] * resolution + cols[idx], alpha[idx]


Layer = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""Ellipse stamps: centres (M, 2), axes (M, 2, 2), colours (M, 3), order (M,)."""


def _composite(floor: Floor, layers: list[Layer]) -> np.ndarray:
    """Composite ellipse stamps back to front over ``floor`` -> (R, R, 3) uint8.

    A larger ``order`` is nearer the camera. Per pixel, ``colour = sum_k c_k a_k
    prod_{j nearer} (1 - a_j) + background prod_j (1 - a_j)``, from sorted cumulative sums.
    """
    res = floor.rgb.shape[0]
    centres, axes, colours, orders = (np.concatenate(parts) for parts in zip(*layers, strict=True))
    s, p, a = _stamps(centres, axes, res)
    o = orders[s]
    sort = np.lexsort((-o, p))  # by pixel, near to far within each
    s, p, a = s[sort], p[sort], np.minimum(a[sort], 1.0 - 1e-6)
    log_t = np.log1p(-a)
    cum = np.cumsum(log_t) - log_t  # exclusive
    start = np.ones(len(p), dtype=bool)
    start[1:] = p[1:] != p[:-1]
    group = np.cumsum(start) - 1
    weight = a * np.exp(cum - cum[start][group])  # times the transmittance in front
    touched = p[start]  # (G,) the pixels any stamp covers
    value = (
        floor.rgb.reshape(res * res, 3)[touched]
        * np.exp(np.bincount(group, weights=log_t))[:, None]
    )
    c = colours[s]
    for ch in range(3):
        value[:, ch] += np.bincount(group, weights=weight * c[:, ch])
    img = floor.image.reshape(res * res, 3).copy()
    img[touched] = np.clip(np.rint(value), 0, 255).astype(np.uint8)
    return img.reshape(res, res, 3)


# -- the two views ------------------------------------------------------------------------
def _circle_axes(radii: np.ndarray) -> np.ndarray:
    """Axis-aligned circle axes (M, 2, 2) of pixel radii (M,)."""
    return radii[:, None, None] * np.eye(2)[None]


def render_top(agent: np.ndarray, discs: np.ndarray, resolution: int = 96) -> np.ndarray:
    """The top view (R, R, 3) uint8 of agent xy (2,) and disc centres (N, 2)."""
    scale = resolution / geo.BOARD_SIZE
    n = len(discs)
    disc_layer = (
        np.asarray(discs, np.float64) * scale,
        _circle_axes(np.full(n, geo.DISC_RADIUS * scale)),
        np.tile(np.array(DISC_RGB), (n, 1)),
        np.zeros(n),
    )
    agent_layer = (
        np.asarray(agent, np.float64)[None] * scale,
        _circle_axes(np.array([geo.AGENT_RADIUS * scale])),
        np.array([AGENT_RGB]),
        np.ones(1),
    )
    return _composite(top_floor(resolution), [disc_layer, agent_layer])


def _puck_layer(
    cam: Camera, xy: np.ndarray, radius: float, height: float, rgb: tuple[float, ...], levels: int
) -> Layer:
    """Pucks at floor points (M, 2) as ``levels`` ellipses each (L M stamps), evenly from
    the bottom to the top; all but the top one shaded."""
    m = len(xy)
    pts = np.zeros((5, levels, m, 3))  # centre, +-x, +-y; at each level
    pts[..., :2] = xy
    pts[..., 2] = np.linspace(0.0, height, levels)[:, None]
    for k, sign, axis in ((1, 1, 0), (2, -1, 0), (3, 1, 1), (4, -1, 1)):
        pts[k, ..., axis] += sign * radius
    px, depth = cam.project(pts)  # (5, L, M, 2), (5, L, M)
    axes = np.stack([px[1] - px[2], px[3] - px[4]], axis=-1) / 2  # (L, M, 2, 2)
    colours = np.empty((levels, m, 3))
    colours[:-1], colours[-1] = np.array(rgb) * SHADE, rgb
    order = -depth[0, 0] + 1e-3 * np.arange(levels)[:, None]  # nearer: larger; up the puck
    return px[0].reshape(-1, 2), axes.reshape(-1, 2, 2), colours.reshape(-1, 3), order.ravel()


def render_side(agent: np.ndarray, discs: np.ndarray, resolution: int = 96) -> np.ndarray:
    """The side view (R, R, 3) uint8 of agent xy (2,) and disc centres (N, 2)."""
    cam = side_camera(resolution)
    layers = [
        _puck_layer(cam, np.asarray(discs, np.float64), geo.DISC_RADIUS, DISC_HEIGHT, DISC_RGB, 2),
        _puck_layer(
            cam, np.asarray(agent, np.float64)[None], geo.AGENT_RADIUS, AGENT_HEIGHT, AGENT_RGB, 3
        ),
    ]
    return _composite(side_floor(resolution), layers)


VIEWS = ("top", "side")


def render_views(scene: np.ndarray, resolution: int = 96) -> dict[str, np.ndarray]:
    """Every camera's view of a scene: ``scene`` (2 + 2 N,) is the agent xy then every
    disc's xy (the world's config convention) -> {"top": (R, R, 3), "side": (R, R, 3)} uint8.
    """
    scene = np.asarray(scene, dtype=np.float64)
    agent, discs = scene[:2], scene[2:].reshape(-1, 2)
    return {
        "top": render_top(agent, discs, resolution),
        "side": render_side(agent, discs, resolution),
    }
