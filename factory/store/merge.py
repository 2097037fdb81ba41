"""Merge several episode stores into a new one (e.g. per-worker shards of a batch run)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from factory.errors import SchemaMismatchError, StoreError
from factory.store.episode_store import EpisodeStore

logger = logging.getLogger(__name__)


def _check_same(first: EpisodeStore, other: EpisodeStore) -> None:
    diff = first.schema.describe_difference(other.schema)
    if diff:
        raise SchemaMismatchError(
            f"cannot merge {other.path} into stores like {first.path}: different schema "
            f"({diff}); merge only stores with the same keys, shapes and dtypes"
        )
    for name in ("fps", "action_meaning"):
        a, b = getattr(first, name), getattr(other, name)
        if a != b:
            raise SchemaMismatchError(
                f"cannot merge {other.path}: {name}={b!r} but {first.path} has {a!r}"
            )


def merge_stores(
    sources: Sequence[str | Path],
    out: str | Path,
    *,
    attrs: Mapping[str, Any] | None = None,
    episodes: Sequence[Sequence[int] | None] | None = None,
) -> EpisodeStore:
    """Copy every episode of ``sources`` (in order, with its meta) into a new store ``out``.

    ``episodes``, one entry per source, takes only those episode indices of that source
    (in the order given; ``None``: all of it). All sources must share schema, fps and
    action meaning (:class:`SchemaMismatchError` otherwise). ``out`` gets the first
    source's chunking, compression, durability and free attrs, updated with ``attrs`` and a
    ``merged_from`` list. Returns ``out`` opened read-only.
    """
    if not sources:
        raise StoreError("merge needs at least one source store")
    if episodes is not None and len(episodes) != len(sources):
        raise StoreError(f"merge got {len(episodes)} episode selections for {len(sources)} sources")
    out = Path(out)
    resolved = {Path(s).resolve() for s in sources}
    if out.resolve() in resolved:
        raise StoreError(f"merge output {out} is also a source; choose a new output path")
    opened = [EpisodeStore.open(s, mode="r") for s in sources]
    try:
        first = opened[0]
        for other in opened[1:]:
            _check_same(first, other)
        merged_attrs = {**first.attrs, "merged_from": [str(s.path) for s in opened]}
        merged_attrs.update(attrs or {})
        with EpisodeStore.create(
            out,
            first.schema,
            fps=first.fps,
            action_meaning=first.action_meaning,
            attrs=merged_attrs,
            chunk_frames=first.chunk_frames,
            compression=first.compression,
            durable=first.durable,
        ) as dst:
            for k, src in enumerate(opened):
                pick = episodes[k] if episodes is not None else None
                chosen = range(src.n_episodes) if pick is None else pick
                for i in chosen:
                    ep = src.episode(i)
                    dst.append_episode(ep.to_dict(), ep.meta)
                logger.info("merged %d episodes from %s", len(chosen), src.path)
    finally:
        for s in opened:
            s.close()
    return EpisodeStore.open(out, mode="r")
