"""What an episode's metadata says about where it started (light: no torch, no arrays)."""

from __future__ import annotations

from factory.store.schema import EpisodeMeta

SEEDED = ("seed", "config")  # ``extra.initial`` of episodes started from a ground-truth reset


def is_seeded(meta: EpisodeMeta) -> bool:
    """Generated inside the model from a seeded (or configured) ground-truth reset whose
    ``extra.initial_config`` was recorded, so it can be replayed in the ground truth."""
    extra = meta.extra
    if meta.source != "world_model" or extra.get("initial") not in SEEDED:
        return False
    if extra.get("initial_config") is None:
        return False
    return not (extra["initial"] == "seed" and meta.seed is None)
