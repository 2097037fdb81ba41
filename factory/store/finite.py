"""Which episodes of a store hold a NaN or inf: the check every command that replays,
trains on or exports a store's numbers makes before it starts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def non_finite_episodes(values: np.ndarray, episode_ends: Sequence[int] | np.ndarray) -> list[int]:
    """The sorted indices of the episodes whose frames of ``values`` (N, ...) hold a NaN or
    inf; ``episode_ends`` (E,) are the store's exclusive cumulative ends (its commit
    point), so frame ``f`` belongs to the first episode whose end exceeds ``f``."""
    bad = ~np.isfinite(np.asarray(values).reshape(len(values), -1)).all(axis=1)
    if not bad.any():
        return []
    ends = np.asarray(episode_ends)
    return sorted({int(i) for i in np.searchsorted(ends, np.flatnonzero(bad), side="right")})


def shown(episodes: Sequence[int], limit: int = 10) -> str:
    """Episode indices for a one-line message: the first ``limit``, then an ellipsis."""
    head = ", ".join(map(str, episodes[:limit]))
    return head + (" ..." if len(episodes) > limit else "")
