"""A grid path planner for the pile scripted generators: go around discs, not through them.

The board is cut into square cells; a cell whose centre lies within ``inflate`` px of a disc
centre is *crowded*. Entering a cell costs its step length (1 or sqrt 2 cells), times
``penalty`` in a crowded cell, so paths keep clear of discs where they can and still exist
where they cannot (a start or an end among discs). :meth:`GridPlanner.field` computes the
cost of the cheapest path from one point to every cell (vectorised Bellman-Ford relaxation
over the 8 neighbours); :meth:`GridPlanner.path` reads a path back from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from factory.envs import pile_geometry as geo

_OFFSETS = [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if (dr, dc) != (0, 0)]


@dataclass(frozen=True)
class CostField:
    """Path costs (G, G) in px from ``source`` (2,), rows = y cells, columns = x cells."""

    cost: np.ndarray
    source: np.ndarray
    cell: float

    def at(self, xy: np.ndarray) -> np.ndarray:
        """The cost (...,) of reaching board points (..., 2) (their cells')."""
        idx = cell_index(xy, self.cell, self.cost.shape[0])
        return np.asarray(self.cost[idx[..., 1], idx[..., 0]])


def cell_index(xy: np.ndarray, cell: float, size: int) -> np.ndarray:
    """Board points (..., 2) -> their cells (..., 2) int (x cell, y cell), clipped."""
    return np.clip((np.asarray(xy, dtype=np.float64) // cell).astype(np.int64), 0, size - 1)


class GridPlanner:
    """Cheapest paths on a ``cell`` px grid of the board around crowded cells."""

    def __init__(self, cell: float = 8.0, inflate: float = 30.0, penalty: float = 20.0) -> None:
        self.cell, self.inflate, self.penalty = float(cell), float(inflate), float(penalty)
        self.size = int(np.ceil(geo.BOARD_SIZE / self.cell))

    def crowded(self, discs: np.ndarray) -> np.ndarray:
        """Cells (G, G) bool within ``inflate`` px of any disc centre (N, 2)."""
        g = self.size
        out = np.zeros((g, g), dtype=bool)
        if len(discs) == 0:
            return out
        reach = int(np.ceil(self.inflate / self.cell)) + 1
        off = np.arange(-reach, reach + 1)
        base = cell_index(discs, self.cell, g)  # (N, 2)
        cx = base[:, 0, None, None] + off[None, None, :]  # (N, 1, W)
        cy = base[:, 1, None, None] + off[None, :, None]  # (N, W, 1)
        d2 = ((cx + 0.5) * self.cell - np.asarray(discs)[:, 0, None, None]) ** 2
        d2 = d2 + ((cy + 0.5) * self.cell - np.asarray(discs)[:, 1, None, None]) ** 2
        hit = (d2 < self.inflate**2) & (cx >= 0) & (cx < g) & (cy >= 0) & (cy < g)
        n, rows, cols = np.nonzero(hit)
        out[cy[n, rows, 0], cx[n, 0, cols]] = True
        return out

    def field(self, source: np.ndarray, crowded: np.ndarray) -> CostField:
        """The cheapest-path cost from ``source`` (2,) to every cell (G, G)."""
        g = self.size
        weight = np.where(crowded, self.penalty, 1.0) * self.cell
        steps = [weight * (np.sqrt(2.0) if dr and dc else 1.0) for dr, dc in _OFFSETS]
        cost = np.full((g + 2, g + 2), np.inf)
        sx, sy = cell_index(source, self.cell, g)
        cost[sy + 1, sx + 1] = 0.0
        for _ in range(4 * g):
            inner = cost[1:-1, 1:-1]
            best = inner.copy()
            for (dr, dc), step in zip(_OFFSETS, steps, strict=True):
                np.minimum(best, cost[1 + dr : g + 1 + dr, 1 + dc : g + 1 + dc] + step, out=best)
            if np.array_equal(best, inner):
                break
            cost[1:-1, 1:-1] = best
        return CostField(cost[1:-1, 1:-1].copy(), np.asarray(source, np.float64), self.cell)

    def path(self, field: CostField, target: np.ndarray) -> np.ndarray:
        """Waypoints (P, 2) from the field's source to ``target`` (2,): the cell centres of
        the cheapest path, with the exact target as the last one."""
        g = self.size
        cost = np.pad(field.cost, 1, constant_values=np.inf)
        x, y = (int(v) + 1 for v in cell_index(target, self.cell, g))
        sx, sy = (int(v) + 1 for v in cell_index(field.source, self.cell, g))
        cells = []
        for _ in range(g * g):
            if (x, y) == (sx, sy) or not np.isfinite(cost[y, x]):
                break
            cells.append((x, y))
            window = cost[y - 1 : y + 2, x - 1 : x + 2]
            dy, dx = np.unravel_index(int(np.argmin(window)), (3, 3))
            if (dx, dy) == (1, 1):  # no cheaper neighbour: the field has not converged
                break
            x, y = x + int(dx) - 1, y + int(dy) - 1
        pts = (np.array(cells[::-1], dtype=np.float64).reshape(-1, 2) - 0.5) * self.cell
        return np.vstack([pts[:-1], np.asarray(target, np.float64)[None]])

    def clear(self, a: np.ndarray, b: np.ndarray, crowded: np.ndarray) -> bool:
        """Whether the straight segment from ``a`` (2,) to ``b`` (2,) avoids crowded cells
        (sampled every half cell; the cells of its two ends do not count)."""
        n = max(int(np.linalg.norm(b - a) / (0.5 * self.cell)), 1)
        pts = a + (b - a) * (np.arange(1, n) / n)[:, None]
        idx = cell_index(pts, self.cell, self.size)
        ends = cell_index(np.stack([a, b]), self.cell, self.size)
        inner = ~np.all(idx == ends[0], axis=1) & ~np.all(idx == ends[1], axis=1)
        return not bool(np.any(crowded[idx[inner, 1], idx[inner, 0]]))

    def carrot(
        self, path: np.ndarray, agent: np.ndarray, lead: float, crowded: np.ndarray
    ) -> np.ndarray:
        """The farthest waypoint (2,) of ``path`` (P, 2) within ``lead`` px of the agent
        that it can reach in a straight line clear of crowded cells (else the first)."""
        near = np.linalg.norm(path - agent, axis=1) <= lead
        last = int(np.argmin(near)) - 1 if not near.all() else len(path) - 1
        for k in range(last, 0, -1):
            if self.clear(agent, path[k], crowded):
                return np.asarray(path[k])
        return np.asarray(path[0])
