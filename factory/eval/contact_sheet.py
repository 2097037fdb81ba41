"""A contact sheet of stored episodes: one row of evenly spaced frames per episode, as a
PNG, to see at a glance what a store holds (e.g. what the model rendered in generated
demonstrations)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from factory.store import EpisodeStore


def contact_sheet(store: Path, out: Path, rows: int = 10, cols: int = 6, scale: int = 2) -> int:
    """The first ``rows`` episodes of ``store``, one row each of ``cols`` frames evenly
    spaced from first to last, ``scale`` times enlarged, written to ``out``; returns the
    rows drawn (0: an empty store, and nothing written).

    The sheet is (rows * H * scale, cols * W * scale, 3) pixels for (H, W, 3) frames.
    """
    from PIL import Image

    strips = []
    with EpisodeStore.open(store) as st:
        for i in range(min(rows, st.n_episodes)):
            frames = st.episode(i)["image"]  # (T, H, W, 3) uint8
            idx = np.linspace(0, len(frames) - 1, cols).round().astype(int)
            strips.append(np.concatenate([frames[j] for j in idx], axis=1))
    if not strips:
        return 0
    sheet = Image.fromarray(np.concatenate(strips, axis=0))
    sheet = sheet.resize((sheet.width * scale, sheet.height * scale), Image.Resampling.NEAREST)
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out)
    return len(strips)
