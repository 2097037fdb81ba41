"""The output episode store of a recording command (collect, generate, teleop).

:func:`check_output` validates an output before anything is created; :func:`open_output`
then creates it (or reopens it with ``append``). Commands check everything first and
create the store only once the work can start, so a refused run leaves nothing behind.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from factory.errors import FactoryError
from factory.store import EpisodeStore, KeySpec, StoreSchema
from factory.world import WorldSpec


def view_key(camera: str) -> str:
    """The store key of a camera after the main one (``side`` -> ``image_side``)."""
    return f"image_{camera}"


def store_schema(spec: WorldSpec, labelled: bool = False) -> StoreSchema:
    """The episode-store schema that a world's episodes are recorded with: ``image`` the
    main camera and ``image_<cam>`` (same shape) for every camera after it; with
    ``labelled`` (a DART generator, :func:`~factory.generators.labels_actions`) also
    ``action_label``, the clean action beside the executed ``action``."""
    image = KeySpec(shape=spec.image_shape, dtype="uint8")
    action = KeySpec(shape=(spec.action_dim,), dtype="float32")
    return StoreSchema(
        keys={
            "image": image,
            "action": action,
            **({"action_label": action} if labelled else {}),
            "state": KeySpec(shape=(spec.state_dim,), dtype="float32"),
            "task_state": KeySpec(shape=(len(spec.task_state_names),), dtype="float32"),
            **{view_key(cam): image for cam in spec.extra_cameras},
        }
    )


def store_attrs(spec: WorldSpec, resolution: int) -> dict[str, Any]:
    """Store attributes that an ``--append`` must match (``cameras``, the list, only for a
    world with named cameras)."""
    attrs: dict[str, Any] = {"env": spec.name, "resolution": resolution}
    if spec.cameras:
        attrs["cameras"] = list(spec.cameras)
    return attrs


def check_output(
    out: Path, spec: WorldSpec, resolution: int, append: bool, labelled: bool = False
) -> None:
    """Refuse an output that :func:`open_output` would refuse, creating nothing.

    An existing store is opened read-only to check that it fits (and that no other writer
    holds it is checked again when :func:`open_output` takes the lock).
    """
    if not out.exists():
        parent = out.resolve().parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise FactoryError(f"cannot create {out}: {parent} is not a directory")
        return
    if not append:
        raise FactoryError(f"{out} already exists; pass --append to add to it")
    with EpisodeStore.open(out, mode="r") as store:
        store.check_compatible(store_schema(spec, labelled), store_attrs(spec, resolution))


def open_output(
    out: Path,
    spec: WorldSpec,
    resolution: int,
    append: bool,
    fsync: bool = False,
    labelled: bool = False,
) -> EpisodeStore:
    """Create ``out``, or (with ``append``) reopen and check it fits this world (and
    ``labelled``: whether its episodes carry ``action_label``, see :func:`store_schema`).

    ``fsync`` (``--fsync``): the store is durable, created so or marked so once it fits;
    every commit is fsynced and survives a power cut (:mod:`factory.store.durable`).
    """
    schema = store_schema(spec, labelled)
    attrs = store_attrs(spec, resolution)
    if out.exists():
        if not append:
            raise FactoryError(f"{out} already exists; pass --append to add to it")
        store = EpisodeStore.open(out, mode="a")
        try:
            store.check_compatible(schema, attrs)
            if fsync:
                store.make_durable()
        except Exception:
            store.close()
            raise
        return store
    return EpisodeStore.create(
        out,
        schema,
        fps=spec.fps,
        action_meaning=spec.action_meaning,
        attrs={
            **attrs,
            "task": spec.task,
            "state_names": ["agent_x", "agent_y"],
            "task_state_names": list(spec.task_state_names),
        },
        durable=fsync,
    )


def done_episodes(out: Path) -> set[tuple[str, int | None]]:
    """(generator, seed) of every episode already in ``out`` (empty if it does not exist):
    the episodes an ``--append`` rerun skips."""
    if not out.exists():
        return set()
    with EpisodeStore.open(out, mode="r") as store:
        return {(m.generator, m.seed) for m in store.all_meta()}


def close_output(store: EpisodeStore, created: bool, failed: bool) -> None:
    """Close a recording command's output store. One that this run ``created`` and left
    without an episode when it ``failed`` is removed, so a run that fails before its first
    commit leaves nothing behind (a rerun needs no ``--append``); committed episodes are
    always kept."""
    path, empty = store.path, store.n_episodes == 0
    store.close()
    if created and failed and empty:
        shutil.rmtree(path, ignore_errors=True)
