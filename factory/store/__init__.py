"""Crash-safe Zarr v3 episode store: typed schema, per-episode provenance, one writer."""

from factory.store.episode import Episode
from factory.store.episode_store import EpisodeStore
from factory.store.layout import COMPRESSIONS, FORMAT, FORMAT_VERSION
from factory.store.lock import StoreLock
from factory.store.merge import merge_stores
from factory.store.schema import SOURCES, EpisodeMeta, KeySpec, StoreSchema

__all__ = [
    "COMPRESSIONS",
    "FORMAT",
    "FORMAT_VERSION",
    "SOURCES",
    "Episode",
    "EpisodeMeta",
    "EpisodeStore",
    "KeySpec",
    "StoreLock",
    "StoreSchema",
    "merge_stores",
]
