"""Old key names (``gt_state``): read as renamed, renamed on disk by a writer or ``factory
migrate``, with nothing lost at any step; and which task states may train a model."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from factories import assert_one_line_error
from store_factories import make_episode, make_schema
from typer.testing import CliRunner

from factory.errors import FactoryError
from factory.store import EpisodeMeta, EpisodeStore, KeySpec, StoreSchema, merge_stores
from factory.store.renames import migrate_store
from factory.train.data import load_episode_data
from pipelines.cli import app

runner = CliRunner()
NAMES = ["block_x", "block_y", "block_angle"]


def _episode(i: int, key: str) -> dict[str, np.ndarray]:
    ep = make_episode(i, 5 + i)
    ep[key] = np.arange(3 * (5 + i), dtype=np.float32).reshape(-1, 3) + 100 * i
    return ep


def _store(path: Path, key: str, sources: list[str]) -> Path:
    """A store with the task state under ``key`` ("gt_state": as written before the rename,
    made by turning a current store's names back on disk)."""
    schema = StoreSchema({**make_schema().keys, "task_state": KeySpec((3,), "float32")})
    attrs = {"env": "pusht", "task_state_names": NAMES}
    with EpisodeStore.create(path, schema, fps=10, action_meaning="xy", attrs=attrs) as store:
        for i, source in enumerate(sources):
            model = "m@1" if source == "world_model" else None
            meta = EpisodeMeta(source=source, generator="g", seed=i, model_id=model)
            store.append_episode(_episode(i, "task_state"), meta)
    if key == "gt_state":
        os.rename(path / "data" / "task_state", path / "data" / "gt_state")
        group = zarr.open_group(path, mode="r+", use_consolidated=False)
        old: dict[str, Any] = dict(group.attrs)
        old["schema"] = {k.replace("task_state", "gt_state"): v for k, v in old["schema"].items()}
        old["gt_state_names"] = old.pop("task_state_names")
        group.attrs.put(old)
    return path


def _files(path: Path) -> dict[str, float]:
    return {str(p.relative_to(path)): p.stat().st_mtime for p in path.rglob("*") if p.is_file()}


def test_old_store_reads_as_renamed_and_changes_nothing(tmp_path: Path) -> None:
    old = _store(tmp_path / "old.zarr", "gt_state", ["real", "real"])
    before = _files(old)
    with EpisodeStore.open(old) as store:
        assert list(store.schema.keys) == ["image", "action", "state", "task_state"]
        assert store.attrs["task_state_names"] == NAMES and "gt_state_names" not in store.attrs
        np.testing.assert_array_equal(store.episode(1)["task_state"], _episode(1, "x")["x"])
        assert "gt_state" not in store.load()
    assert migrate_store(old, dry_run=True) == [
        "data/gt_state -> data/task_state",
        "attr gt_state_names -> task_state_names",
    ]
    assert _files(old) == before  # reading and a dry run touch no file


def test_a_writer_renames_on_disk_and_appends(tmp_path: Path) -> None:
    old = _store(tmp_path / "old.zarr", "gt_state", ["real", "real"])
    with EpisodeStore.open(old, mode="a") as store:
        store.append_episode(_episode(2, "task_state"), EpisodeMeta(source="real", generator="g"))
    assert (old / "data" / "task_state").is_dir() and not (old / "data" / "gt_state").exists()
    attrs = json.loads((old / "zarr.json").read_text())["attributes"]
    assert "task_state" in attrs["schema"] and "gt_state" not in attrs["schema"]
    assert attrs["task_state_names"] == NAMES and "gt_state_names" not in attrs
    with EpisodeStore.open(old) as store:
        assert store.n_episodes == 3
        for i in range(3):
            np.testing.assert_array_equal(store.episode(i)["task_state"], _episode(i, "x")["x"])
    assert migrate_store(old) == []


def test_a_store_caught_between_the_two_steps_reads_and_migrates(tmp_path: Path) -> None:
    """A crash after the directory rename, before the root zarr.json's: still whole."""
    old = _store(tmp_path / "old.zarr", "gt_state", ["real"])
    os.rename(old / "data" / "gt_state", old / "data" / "task_state")
    with EpisodeStore.open(old) as store:
        np.testing.assert_array_equal(store.episode(0)["task_state"], _episode(0, "x")["x"])
    assert migrate_store(old) == [
        "data/gt_state -> data/task_state",
        "attr gt_state_names -> task_state_names",
    ]
    with EpisodeStore.open(old) as store:
        np.testing.assert_array_equal(store.episode(0)["task_state"], _episode(0, "x")["x"])


def test_old_and_new_stores_merge(tmp_path: Path) -> None:
    old = _store(tmp_path / "old.zarr", "gt_state", ["real"])
    new = _store(tmp_path / "new.zarr", "task_state", ["world_model"])
    with merge_stores([old, new], tmp_path / "m.zarr") as merged:
        assert merged.n_episodes == 2 and "task_state" in merged.schema.keys
        np.testing.assert_array_equal(merged.episode(1)["task_state"], _episode(0, "x")["x"])
        assert [m.task_state_source for m in merged.all_meta()] == ["ground_truth", "model"]


def test_cli_migrate(tmp_path: Path) -> None:
    old = _store(tmp_path / "old.zarr", "gt_state", ["real"])
    result = runner.invoke(app, ["migrate", str(old), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["renamed"][0] == "data/gt_state -> data/task_state"
    again = runner.invoke(app, ["migrate", str(old)])
    assert again.exit_code == 0 and "up to date" in again.output
    assert_one_line_error(runner.invoke(app, ["migrate", str(tmp_path / "nope.zarr")]))


def test_task_state_source() -> None:
    assert EpisodeMeta(source="real", generator="g").task_state_source == "ground_truth"
    assert EpisodeMeta(source="world_model", generator="g").task_state_source == "model"
    teleop_in_model = EpisodeMeta(source="teleop", generator="keyboard", model_id="m@1")
    assert teleop_in_model.task_state_source == "model"
    assert EpisodeMeta(source="teleop", generator="keyboard").task_state_source == "ground_truth"


def test_model_readings_never_train_the_task_state(tmp_path: Path) -> None:
    mixed = _store(tmp_path / "mixed.zarr", "task_state", ["real", "world_model"])
    with pytest.raises(FactoryError, match="1 of its 2 episodes hold a world model's reading"):
        load_episode_data(mixed, need_task_state=True)
    assert load_episode_data(mixed).task_state is None  # not a label where it is optional
    real = _store(tmp_path / "real.zarr", "gt_state", ["real", "real"])
    data = load_episode_data(real, need_task_state=True)
    assert data.task_state is not None and data.task_state.shape == (11, 3)
