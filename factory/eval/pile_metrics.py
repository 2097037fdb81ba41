"""Pile fidelity metrics in pure numpy: disc masks, disc errors, cross-view consistency, drift.

Frames are ``(..., H, W, 3) uint8`` of one pile camera (``top`` or ``side``, see
:mod:`factory.envs.pile_render`); task states are every disc's centre flattened
``(..., 2 N)`` in board px (:mod:`factory.envs.pile_geometry`).

A pixel's *disc coverage* (:func:`disc_coverage`) reads its colour as a mix of the two
colours of its camera's palette (board, walls, goal, sky, the agent and the discs, with
their shaded puck sides in the side view) whose segment passes nearest it, so that an
anti-aliased edge, and roughly a learned renderer's blur, reads as part disc; a *disc
pixel* (:func:`disc_mask`) is at least half disc.

Discs are unordered: predicted discs are matched to true ones by the matching of least
total distance (:func:`match_discs`; scipy is not a dependency, so the Hungarian method
is here, in numpy: a greedy nearest match overstates the error once discs have moved
farther than half their spacing).

Counting from a frame alone (:func:`frame_discs`), in two ways:

- **By silhouettes** (the default): every pixel at least :data:`MEMBER` disc, and its 8
  neighbours (the faint rim), is worth its disc coverage divided by one disc's area at its
  place (the side camera's perspective makes a far disc smaller; :func:`disc_area_table`),
  and the count is their sum, rounded (a faint speck of disc colour far from any disc does
  not count). Two discs whose silhouettes touch form one 4-connected component but still
  count two by area. A disc under the agent is not seen, and in the side view the nearer
  pucks hide the silhouettes behind them, so on real frames the side view counts 2 to 3
  discs fewer than the top view.
- **By top faces** (``faces=True``): the same sum over each disc's top face only: from
  above the whole disc, from the side only the puck's lit top ellipse
  (:func:`face_coverage`; its shaded side is not face). Discs never overlap on the board,
  so their top faces, all at one height, never hide one another: a puck's side hides the
  pucks behind it only below their top faces. On real frames the two views then disagree
  by about half a disc. The price: the lit top is told from the shaded side by colour, and
  a soft render blends the shaded edges towards the lit colour, so it reads as more face
  (on dense piles of 30 discs, a 3 x 3 blur adds at least 3 discs to the face count and
  moves the silhouette count by under 2: ``tests/test_pile_metrics.py``).

Each counted pixel is mapped back to the board through the camera geometry (top: the
linear scale; side: its ray to the plane at half a disc's height for a silhouette pixel,
at a whole disc's height for a top-face pixel), and the view's disc centroid is the
worth-weighted mean of the silhouette pixels. This uses the renderer's known cameras,
which only an evaluation may do.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from factory.envs import pile_geometry as geo
from factory.envs import pile_render as pr

VIEWS = pr.VIEWS
_FLOOR = (pr.BOARD_RGB, pr.WALL_RGB, pr.GOAL_RGB)
_SHADED = tuple(tuple(c * pr.SHADE for c in rgb) for rgb in (pr.DISC_RGB, pr.AGENT_RGB))
PALETTES: dict[str, tuple[tuple[tuple[float, ...], ...], tuple[bool, ...]]] = {
    "top": ((*_FLOOR, pr.AGENT_RGB, pr.DISC_RGB), (False,) * 4 + (True,)),
    "side": (
        (*_FLOOR, pr.SKY_RGB, pr.AGENT_RGB, _SHADED[1], pr.DISC_RGB, _SHADED[0]),
        (False,) * 6 + (True, True),
    ),
}
"""Per camera: its colours and which of them are disc colours."""

FACE_PALETTES = PALETTES | {"side": (PALETTES["side"][0], (False,) * 6 + (True, False))}
"""Per camera: which colours are a disc's top face (the side view's lit top, not its
shaded side)."""


def _check_view(view: str) -> None:
    if view not in PALETTES:
        raise ValueError(f"unknown pile camera {view!r}; the cameras are {', '.join(VIEWS)}")


# -- disc masks ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def _segments(view: str, faces: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair of ``view``'s palette colours: starts (P, 3), directions (P, 3), and the
    disc weight (P, 2) of each end (1 for a disc colour, or with ``faces`` for a top-face
    colour)."""
    colours, is_disc = (FACE_PALETTES if faces else PALETTES)[view]
    pal, w = np.asarray(colours, np.float32), np.asarray(is_disc, np.float32)
    i, j = np.triu_indices(len(pal), k=1)
    return pal[i], pal[j] - pal[i], np.stack([w[i], w[j]], axis=-1)


def disc_coverage(frames: np.ndarray, view: str, faces: bool = False) -> np.ndarray:
    """How much of each pixel is disc, (..., H, W) float32 in [0, 1], of frames
    (..., H, W, 3) uint8 of camera ``view``.

    Each pixel is read as a mix of the two palette colours whose segment passes nearest
    its colour (an anti-aliased edge is such a mix, and so, roughly, is a blurred one):
    its disc weight is that mix's share of disc colour. A pure palette colour reads 0 or 1.
    With ``faces``, only a disc's top face is disc (:func:`face_coverage`).
    """
    _check_view(view)
    start, direction, weight = _segments(view, faces)
    f = np.asarray(frames, np.float32)  # (..., H, W, 3)
    dd = (direction * direction).sum(-1)  # (P,)
    rel_d = f @ direction.T - (start * direction).sum(-1)  # (f - start) . direction
    rel_2 = (f * f).sum(-1, keepdims=True) - 2.0 * (f @ start.T) + (start * start).sum(-1)
    t = np.clip(rel_d / dd, 0.0, 1.0)  # (..., H, W, P)
    resid = rel_2 - 2.0 * t * rel_d + t * t * dd  # squared distance to each segment
    best = np.argmin(resid, axis=-1)
    t = np.take_along_axis(t, best[..., None], axis=-1)[..., 0]
    return np.asarray(weight[best, 0] * (1.0 - t) + weight[best, 1] * t, np.float32)


def face_coverage(frames: np.ndarray, view: str) -> np.ndarray:
    """How much of each pixel is a disc's top face, (..., H, W) float32 in [0, 1], of
    frames (..., H, W, 3) uint8: the whole disc from above, the lit top from the side."""
    return disc_coverage(frames, view, faces=True)


def disc_mask(frames: np.ndarray, view: str) -> np.ndarray:
    """Disc pixels (..., H, W) bool of frames (..., H, W, 3): at least half disc."""
    return np.asarray(disc_coverage(frames, view) >= 0.5)


def mask_iou(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Per-frame IoU (...,) of masks (..., H, W); 1.0 where both are empty."""
    inter = np.logical_and(pred, true).sum(axis=(-2, -1))
    union = np.logical_or(pred, true).sum(axis=(-2, -1))
    return np.where(union > 0, inter / np.maximum(union, 1), 1.0)


def disc_iou(pred: np.ndarray, true: np.ndarray, view: str) -> np.ndarray:
    """Disc-mask IoU (...,) of predicted vs true frames (..., H, W, 3) of one camera."""
    return mask_iou(disc_mask(pred, view), disc_mask(true, view))


# -- disc states ---------------------------------------------------------------------------
def swept_fraction_error(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """|fraction of discs inside the goal, predicted - true| (...,) of task states
    (..., 2 N) and (..., 2 M) (the counts may differ: each is its own fraction)."""
    return np.abs(geo.fraction_inside(pred) - geo.fraction_inside(true))


def assignment(cost: np.ndarray) -> np.ndarray:
    """The minimum-cost assignment of the rows of ``cost`` (n, m), n <= m, to distinct
    columns: the column (n,) of each row (the Hungarian method, shortest augmenting
    paths with potentials, O(n^2 m))."""
    n, m = cost.shape
    u, v = np.zeros(n + 1), np.zeros(m + 1)
    owner = np.zeros(m + 1, np.int64)  # owner[j]: the row (1-based) holding column j
    way = np.zeros(m + 1, np.int64)
    for i in range(1, n + 1):
        owner[0], j0 = i, 0
        minv, used = np.full(m + 1, np.inf), np.zeros(m + 1, bool)
        while owner[j0] != 0 or j0 == 0:
            used[j0] = True
            free = ~used[1:]
            reduced = cost[owner[j0] - 1] - u[owner[j0]] - v[1:]
            better = free & (reduced < minv[1:])
            minv[1:][better], way[1:][better] = reduced[better], j0
            j1 = int(np.argmin(np.where(free, minv[1:], np.inf))) + 1
            delta = minv[j1]
            u[owner[used]] += delta
            v[used] -= delta
            minv[1:][free] -= delta
            j0 = j1
        while j0:  # flip the augmenting path
            owner[j0] = owner[way[j0]]
            j0 = way[j0]
    cols = np.empty(n, np.int64)
    held = np.nonzero(owner[1:])[0]
    cols[owner[1:][held] - 1] = held
    return cols


def match_discs(pred: np.ndarray, true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The matching of disc centres pred (N, 2) to true (M, 2) of least total distance:
    index arrays (K,), (K,) with K = min(N, M) (:func:`assignment`)."""
    d = np.linalg.norm(np.asarray(pred, np.float64)[:, None] - np.asarray(true)[None], axis=-1)
    if len(d) <= d.shape[1]:
        return np.arange(len(d), dtype=np.int64), assignment(d)
    return assignment(d.T), np.arange(d.shape[1], dtype=np.int64)


def matched_distances(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Distances (K,) in px of the matched pairs (:func:`match_discs`) of one frame's
    task states pred (2 N,) and true (2 M,)."""
    p, t = geo.discs_of(pred), geo.discs_of(true)
    rows, cols = match_discs(p, t)
    return np.asarray(np.linalg.norm(p[rows] - t[cols], axis=-1))


def disc_position_error(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Mean matched disc distance (...,) in px of task states (..., 2 N) and (..., 2 M)."""
    p, t = np.asarray(pred, np.float64), np.asarray(true, np.float64)
    lead = p.shape[:-1]
    flat_p, flat_t = p.reshape(-1, p.shape[-1]), t.reshape(-1, t.shape[-1])
    out = [matched_distances(a, b).mean() for a, b in zip(flat_p, flat_t, strict=True)]
    return np.asarray(out, np.float64).reshape(lead)


# -- counting and locating discs from a frame ----------------------------------------------
@dataclass(frozen=True)
class FrameDiscs:
    """What one frame shows: ``count`` discs (rounded), ``estimate`` the unrounded sum,
    ``centroid`` (2,) their mean centre in board px (NaN when none is seen),
    ``components`` how many 4-connected blobs the counted pixels form."""

    count: int
    estimate: float
    centroid: np.ndarray
    components: int


def components(mask: np.ndarray) -> tuple[np.ndarray, int]:
    """4-connected components of a mask (H, W) bool -> (labels (H, W) int64, -1 outside,
    0 .. n-1 inside; n)."""
    h, w = mask.shape
    big = h * w
    lab = np.where(mask, np.arange(big).reshape(h, w), big)
    while True:
        nxt = lab.copy()
        np.minimum(nxt[1:], lab[:-1], out=nxt[1:])
        np.minimum(nxt[:-1], lab[1:], out=nxt[:-1])
        np.minimum(nxt[:, 1:], lab[:, :-1], out=nxt[:, 1:])
        np.minimum(nxt[:, :-1], lab[:, 1:], out=nxt[:, :-1])
        nxt = np.where(mask, nxt, big)
        flat = nxt.ravel()
        nxt[mask] = flat[nxt[mask]]  # jump to the label's own label
        if np.array_equal(nxt, lab):
            break
        lab = nxt
    out = np.full((h, w), -1, np.int64)
    uniq, inverse = np.unique(lab[mask], return_inverse=True)
    out[mask] = inverse
    return out, len(uniq)


def pixel_to_board(
    pixels: np.ndarray, view: str, resolution: int, height: float = pr.DISC_HEIGHT / 2
) -> np.ndarray:
    """Image points (..., 2) (col, row; pixel centres at +0.5) -> board xy (..., 2): the
    top camera's scale, or the side camera's ray to the plane ``height`` board px above
    the floor (by default half a disc's height; the top faces are at a whole one)."""
    _check_view(view)
    px = np.asarray(pixels, np.float64)
    if view == "top":
        return px * (geo.BOARD_SIZE / resolution)
    cam = pr.side_camera(resolution)
    x = (px[..., 0] - cam.principal[0]) / cam.focal
    y = -(px[..., 1] - cam.principal[1]) / cam.focal
    rays = x[..., None] * cam.basis[0] + y[..., None] * cam.basis[1] + cam.basis[2]
    t = (height - cam.centre[2]) / rays[..., 2]
    return np.asarray(cam.centre[:2] + t[..., None] * rays[..., :2])


MEMBER = 0.25
"""A pixel at least this much disc (or top face) is counted, with its 8 neighbours."""


def _member_coverage(frame: np.ndarray, view: str, faces: bool) -> np.ndarray:
    """Top-face (``faces``) or whole-disc coverage (H, W) of one frame on the pixels at
    least :data:`MEMBER` covered and their 8 neighbours (the faint anti-aliased rim), zero
    elsewhere."""
    cover = disc_coverage(frame, view, faces)
    core = np.pad(cover >= MEMBER, 1)
    h, w = cover.shape
    near = np.zeros((h, w), bool)
    for dr in range(3):
        for dc in range(3):
            near |= core[dr : dr + h, dc : dc + w]
    return np.where(near, cover, 0.0)


@functools.lru_cache(maxsize=16)
def disc_area_table(
    view: str, resolution: int, faces: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """One disc's summed face (or whole-disc) coverage in px by board y: (ys (Y,), areas
    (Y,)), each the mean over three x positions of a lone disc rendered by
    :mod:`pile_render` (the agent far off), measured as :func:`frame_discs` measures it."""
    _check_view(view)
    lo, hi = geo.WALL + geo.DISC_RADIUS, geo.BOARD_SIZE - geo.WALL - geo.DISC_RADIUS
    ys = np.linspace(lo, hi, 17)
    agent = np.array([geo.BOARD_SIZE - 30.0, 30.0])
    render = pr.render_top if view == "top" else pr.render_side
    areas = [
        np.mean([_member_coverage(render(agent, np.array([[x, y]]), resolution), view, faces).sum()
                 for x in (180.0, 256.0, 332.0)])
        for y in ys
    ]  # fmt: skip
    return ys, np.asarray(areas, np.float64)


def _read(frame: np.ndarray, view: str, faces: bool) -> tuple[float, np.ndarray, int]:
    """The estimate, centroid (2,) and component count of one frame's face (``faces``) or
    silhouette coverage (see module)."""
    cover = _member_coverage(frame, view, faces)  # (R, R)
    res = cover.shape[0]
    _, n = components(cover > 0)
    if n == 0:
        return 0.0, np.full(2, np.nan), 0
    rows, cols = np.nonzero(cover > 0)
    height = pr.DISC_HEIGHT if faces else pr.DISC_HEIGHT / 2
    board = pixel_to_board(np.stack([cols + 0.5, rows + 0.5], -1), view, res, height)  # (P, 2)
    ys, areas = disc_area_table(view, res, faces)
    worth = cover[rows, cols] / np.interp(board[:, 1], ys, areas)  # discs per pixel
    estimate = float(worth.sum())
    return estimate, (worth[:, None] * board).sum(axis=0) / estimate, n


def frame_discs(frame: np.ndarray, view: str, faces: bool = False) -> FrameDiscs:
    """The discs one frame (R, R, 3) of ``view`` shows (see module): the count by their
    whole silhouettes (which the side view's nearer pucks hide) or, with ``faces``, by
    their top faces; the centroid and components always by silhouettes (a lone puck's lit
    top, read apart from its shaded side by colour, sits a few board px off its centre in
    the side view)."""
    whole, centroid, n = _read(frame, view, faces=False)
    estimate = _read(frame, view, faces=True)[0] if faces else whole
    return FrameDiscs(round(estimate), estimate, centroid, n)


def face_estimates(frames: np.ndarray, view: str) -> np.ndarray:
    """The unrounded top-face count (E,) of each frame (E, R, R, 3) of ``view`` (the
    ``estimate`` of :func:`frame_discs` with ``faces``)."""
    return np.asarray([_read(f, view, faces=True)[0] for f in frames], np.float64)


def cross_view(
    top: np.ndarray, side: np.ndarray, faces: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Per frame: |count_top - count_side| (E,) and the distance (E,) in board px between
    the centroids the two views imply (NaN where a view shows no disc), of matching
    frames top (E, R, R, 3) and side (E, R', R', 3), counted by :func:`frame_discs`."""
    gaps, dists = [], []
    for t, s in zip(top, side, strict=True):
        a, b = frame_discs(t, "top", faces), frame_discs(s, "side", faces)
        gaps.append(abs(a.count - b.count))
        dists.append(float(np.linalg.norm(a.centroid - b.centroid)))
    return np.asarray(gaps, np.float64), np.asarray(dists, np.float64)


# -- hold-still permanence -----------------------------------------------------------------
def pusher_clear(agent: np.ndarray, task_state: np.ndarray, margin: float) -> np.ndarray:
    """Whether the pusher is at least ``margin`` px clear of every disc (...,): agent
    (..., 2), task states (..., 2 N)."""
    return np.asarray(np.min(geo.agent_disc_gaps(agent, geo.discs_of(task_state)), -1) >= margin)


def hold_still_drift(task_state: np.ndarray, tol_px: float = 1.0) -> tuple[float, bool]:
    """Over a window's disc readings (T, 2 N), the first the start: the largest distance
    (px) of any disc from its start position at any step (discs matched to the start's,
    :func:`match_discs`), and whether it exceeds ``tol_px``."""
    start = task_state[0]
    largest = max((float(matched_distances(s, start).max()) for s in task_state[1:]), default=0.0)
    return largest, largest > tol_px
