"""Keys and attrs renamed since format-1 stores were first written, and their migration.

``gt_state`` held the world's task state (PushT: block x, y, angle). In a collected store
that is the simulator's ground truth, but in a generated one it is the world model's own
reading, so the name said more than it held. It is now ``task_state``, the name the world
contract (:class:`factory.world.Observation`) already used; where it came from is the
episode's provenance (:func:`factory.store.provenance.task_state_source`).

A store written with an old name reads as if written with the new one (:func:`current_view`,
used by :func:`factory.store.layout.open_layout`), so every reader keeps working. Its writer
renames it on disk (:func:`migrate`) when it opens the store for append, under the writer
lock; ``factory migrate STORE`` does just that. The rename is two steps (the array
directory, then the root ``zarr.json`` whose schema names it), each atomic, and a store
caught between them reads correctly, so a crash at any point loses nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import zarr

logger = logging.getLogger(__name__)

RENAMED_KEYS = {"gt_state": "task_state"}  # data key: old -> new
RENAMED_ATTRS = {"gt_state_names": "task_state_names"}  # free attr: old -> new


def _schema_of(attrs: Mapping[str, Any]) -> Mapping[str, Any]:
    schema = attrs.get("schema")
    return schema if isinstance(schema, Mapping) else {}


def _array_dir(path: Path, key: str) -> Path:
    return path / "data" / key


def current_view(
    schema_json: Mapping[str, Any], attrs: Mapping[str, Any], path: Path
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """The store's schema and attrs under today's names, and ``on_disk``: for each data key
    whose array directory still has its old name, that name (new key -> old directory)."""
    schema = {RENAMED_KEYS.get(k, k): v for k, v in schema_json.items()}
    view = {RENAMED_ATTRS.get(k, k): v for k, v in attrs.items()}
    view["schema"] = schema
    on_disk = {
        new: old
        for old, new in RENAMED_KEYS.items()
        if new in schema and not (_array_dir(path, new) / "zarr.json").exists()
    }
    return schema, view, on_disk


def pending(path: Path, schema_json: Mapping[str, Any], attrs: Mapping[str, Any]) -> list[str]:
    """What :func:`migrate` would rename in this store ("data/gt_state -> data/task_state",
    ...); empty for a current store."""
    keys = [f"data/{o} -> data/{n}" for o, n in RENAMED_KEYS.items() if o in schema_json]
    keys += [
        f"data/{o} -> data/{n}"
        for o, n in RENAMED_KEYS.items()
        if o not in schema_json and (_array_dir(path, o) / "zarr.json").exists()
    ]
    return keys + [f"attr {o} -> {n}" for o, n in RENAMED_ATTRS.items() if o in attrs]


def migrate(path: Path, durable: bool) -> list[str]:
    """Rename the old keys and attrs of the store at ``path`` in place; the caller holds the
    writer lock. Returns what was renamed (empty: nothing to do). Directory first, then the
    root ``zarr.json`` (zarr writes it to a temp file and renames it); ``durable`` fsyncs
    each step before the next."""
    from factory.store import durable as dur

    group = zarr.open_group(path, mode="r+", use_consolidated=False)
    attrs: dict[str, Any] = dict(group.attrs)
    schema_json = _schema_of(attrs)
    done = pending(path, schema_json, attrs)
    if not done:
        return []
    for old, new in RENAMED_KEYS.items():
        src, dst = _array_dir(path, old), _array_dir(path, new)
        if src.is_dir() and not dst.exists():
            os.rename(src, dst)
            if durable:
                dur.fsync_dir(path / "data")
    _schema, view, _ = current_view(schema_json, attrs, path)
    group.attrs.put(view)  # one write of the root zarr.json: schema and attrs together
    if durable:
        dur.fsync_file(path / "zarr.json")
        dur.fsync_dir(path)
    logger.info("%s: renamed %s", path, ", ".join(done))
    return done


def migrate_store(path: str | Path, dry_run: bool = False) -> list[str]:
    """``factory migrate``: rename the store's old keys and attrs in place, taking the
    writer lock (``StoreLockedError`` while another writer holds it). Returns what was (with
    ``dry_run``: would be) renamed; empty for a current store."""
    from factory.store.layout import open_layout
    from factory.store.lock import StoreLock

    path = Path(path)
    raw: dict[str, Any] = dict(open_layout(path, writable=False).group.attrs)  # validates
    todo = pending(path, _schema_of(raw), raw)
    if dry_run or not todo:
        return todo
    lock = StoreLock.acquire(path)
    try:
        return migrate(path, durable=bool(raw.get("durable")))
    finally:
        lock.release()
