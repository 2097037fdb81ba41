"""Our LeRobot exports under lerobot's own dataset tools, and their ``next.*`` columns.

``lerobot-edit-dataset`` runs ``delete_episodes``, ``split`` and ``merge`` (a ground-truth
export merged with a world-model one) on tiny exports, and ``LeRobotDataset`` loads each
result. The CLI runs in this process (its ``main``, with ``sys.argv`` set as the shell
would: importing lerobot costs ~20 s per process on 2 cores); the ``slow`` variant runs the
installed ``.venv/bin/lerobot-edit-dataset`` binary itself.

Stores: 2 replayed episodes of 6 steps at 32 px, in the ground-truth env and in a tiny
world model: the agent drives down through the block, which starts on the goal (in the
ground truth: success for two steps, then pushed off it) or away from it. The world's
coverage after every step is kept as the known answer of ``next.reward`` / ``next.success``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import tiny_world_model
from typer.testing import CliRunner

from factory.envs import pusht_geometry as geo
from factory.envs.model_vector_env import pusht_reward
from factory.envs.model_world import ModelWorld
from factory.envs.pusht import PushTWorld, pusht_spec
from factory.generators import make_generator
from factory.record import open_output
from factory.record.runner import EpisodeRunner, EpisodeSpec
from factory.store import EpisodeStore
from factory.world import World, WorldObs
from pipelines.cli import app

pytest.importorskip("lerobot.datasets.lerobot_dataset")
from lerobot.datasets.lerobot_dataset import LeRobotDataset

runner = CliRunner()
RES, STEPS = 32, 6
CONFIGS = np.array([[256.0, 150.0, *geo.GOAL], [300.0, 120.0, 300.0, 200.0, 0.5]])
PUSH = np.arange(1, STEPS + 1)[:, None] * np.array([0.0, 60.0])  # (STEPS, 2) downwards
EDIT_BIN = Path(sys.executable).parent / "lerobot-edit-dataset"
HOW = ["main", pytest.param("binary", marks=pytest.mark.slow)]


def _record(world: World, out: Path, source: str) -> np.ndarray:
    """The two replays of ``world`` into the new store ``out``; returns the world's
    coverage after each step, (2, STEPS)."""
    scores: list[np.ndarray] = []

    def keep(t: int, obs: WorldObs) -> None:
        scores.append(np.asarray(obs.score, np.float32).copy())

    policies = [make_generator("replay", actions=c[:2] + PUSH, config=c) for c in CONFIGS]
    episodes = [EpisodeSpec(seed=i, steps=STEPS, config=c) for i, c in enumerate(CONFIGS)]
    results = EpisodeRunner(world, source=source, model_id="tiny").run(policies, episodes, keep)
    with open_output(out, pusht_spec(RES), RES, append=False) as store:
        for r in results:
            store.append_episode(r.data, r.meta)
    return np.stack(scores, axis=1)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, np.ndarray]]:
    """``{"real": (store, coverage), "world_model": (store, coverage)}``."""
    root = tmp_path_factory.mktemp("edit")
    real = _record(PushTWorld(batch_size=2, resolution=RES), root / "real.zarr", "real")
    model = ModelWorld(tiny_world_model(), batch_size=2, seed=0)
    generated = _record(model, root / "gen.zarr", "world_model")
    return {"real": (root / "real.zarr", real), "world_model": (root / "gen.zarr", generated)}


def _export(store: Path, out: Path) -> Path:
    result = runner.invoke(app, ["export", "lerobot", str(store), str(out), "--repo-id", "local/x"])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def exports(stores: dict[str, tuple[Path, np.ndarray]]) -> dict[str, Path]:
    """Each store exported with the defaults (AV1 video, every key)."""
    return {k: _export(path, path.parent / f"{k}_lerobot") for k, (path, _) in stores.items()}


def _edit(how: str, *args: str) -> None:
    """``lerobot-edit-dataset ARGS``: its ``main`` in this process, or the binary."""
    if how == "binary":
        done = subprocess.run([str(EDIT_BIN), *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        return
    import lerobot.scripts.lerobot_edit_dataset as edit

    argv, log_setup = sys.argv, edit.init_logging
    sys.argv = [str(EDIT_BIN), *args]
    edit.init_logging = lambda *a, **k: None  # type: ignore[assignment]  # leave pytest's
    try:
        edit.main()
    finally:
        sys.argv, edit.init_logging = argv, log_setup


def _column(ds: LeRobotDataset, key: str) -> np.ndarray:
    return np.asarray(ds.hf_dataset.with_format("numpy")[key])


def _metas(ds: LeRobotDataset) -> list[dict[str, Any]]:
    """Each episode's provenance meta, in dataset order."""
    prov = _column(ds, "provenance")
    firsts = [int(ds.meta.episodes[i]["dataset_from_index"]) for i in range(ds.num_episodes)]
    return [json.loads(str(prov[i]))["meta"] for i in firsts]


def _lengths(ds: LeRobotDataset) -> list[int]:
    return [int(ds.meta.episodes[i]["length"]) for i in range(ds.num_episodes)]


def _assert_done_on_last_frames(ds: LeRobotDataset) -> None:
    done = _column(ds, "next.done").reshape(-1)
    last = np.zeros(ds.num_frames, bool)
    last[np.cumsum(_lengths(ds)) - 1] = True
    np.testing.assert_array_equal(done, last)


# ------------------------------------------------------------ next.* against known answers


@pytest.mark.parametrize("source", ["real", "world_model"])
def test_next_columns_are_the_worlds_answers(
    source: str, stores: dict[str, tuple[Path, np.ndarray]], exports: dict[str, Path]
) -> None:
    """Frame t's next.reward is gym-pusht's reward of the coverage the world reported
    after action t; next.success that coverage > 0.95; next.done the last frame only."""
    path, coverage = stores[source]
    ds = LeRobotDataset("local/x", root=exports[source])
    info = ds.meta.features
    assert info["next.reward"] == {"dtype": "float32", "shape": (1,), "names": None}
    assert info["next.success"]["dtype"] == info["next.done"]["dtype"] == "bool"
    assert info["action"]["names"] == ["x", "y"]
    assert info["observation.state"]["names"] == ["agent_x", "agent_y"]
    assert ds.meta.robot_type == "pusht"
    reward = _column(ds, "next.reward").reshape(2, STEPS)
    success = _column(ds, "next.success").reshape(2, STEPS)
    np.testing.assert_allclose(reward, pusht_reward(coverage), atol=2e-4)
    np.testing.assert_array_equal(success, coverage > geo.SUCCESS_THRESHOLD)
    with EpisodeStore.open(path) as store:
        metas = store.all_meta()
    assert [m.success for m in metas] == success.any(axis=1).tolist()
    _assert_done_on_last_frames(ds)
    if source == "real":  # the block leaves the goal after two steps; the other never gets there
        assert success[0].tolist() == [True, True, False, False, False, False]
        assert not success[1].any() and len(np.unique(reward[0])) > 3


def test_derived_columns_are_skipped_on_import(exports: dict[str, Path], tmp_path: Path) -> None:
    back = tmp_path / "back.zarr"
    result = runner.invoke(app, ["import", "lerobot", str(exports["real"]), str(back), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"next.reward", "next.success", "next.done"} <= set(summary["skipped"])
    with EpisodeStore.open(back) as store:
        assert set(store.schema.keys) == {"image", "action", "state", "task_state"}


# ------------------------------------------------------------------ lerobot-edit-dataset


@pytest.mark.parametrize("how", HOW)
def test_delete_episodes(how: str, exports: dict[str, Path], tmp_path: Path) -> None:
    src = exports["real"]
    out = tmp_path / "deleted"
    _edit(how, "--repo_id", "local/x", "--root", str(src), "--new_repo_id", "local/del",
          "--new_root", str(out), "--operation.type", "delete_episodes",
          "--operation.episode_indices", "[0]")  # fmt: skip
    kept, before = LeRobotDataset("local/del", root=out), LeRobotDataset("local/x", root=src)
    assert (kept.num_episodes, kept.num_frames) == (1, STEPS)
    np.testing.assert_array_equal(_column(kept, "action"), _column(before, "action")[STEPS:])
    assert _metas(kept) == _metas(before)[1:]
    _assert_done_on_last_frames(kept)
    assert np.asarray(kept[0]["observation.image"]).shape == (3, RES, RES)


@pytest.mark.parametrize("how", HOW)
def test_split(how: str, exports: dict[str, Path], tmp_path: Path) -> None:
    src = exports["world_model"]
    splits = json.dumps({"train": [0], "val": [1]})
    _edit(how, "--repo_id", "local/x", "--root", str(src), "--new_root", str(tmp_path),
          "--operation.type", "split", "--operation.splits", splits)  # fmt: skip
    before = LeRobotDataset("local/x", root=src)
    for i, name in enumerate(["train", "val"]):
        part = LeRobotDataset(f"local/x_{name}", root=tmp_path / name)
        assert (part.num_episodes, part.num_frames) == (1, STEPS)
        assert _metas(part) == [_metas(before)[i]]
        want = _column(before, "next.reward")[i * STEPS : (i + 1) * STEPS]
        np.testing.assert_array_equal(_column(part, "next.reward"), want)
        _assert_done_on_last_frames(part)


@pytest.mark.parametrize("how", HOW)
def test_merge_real_and_generated(how: str, exports: dict[str, Path], tmp_path: Path) -> None:
    """A ground-truth export and a world-model one merge (same features and robot type),
    and the merged dataset imports back with each episode's provenance."""
    out = tmp_path / "merged"
    roots = [str(exports["real"]), str(exports["world_model"])]
    _edit(how, "--new_repo_id", "local/merged", "--new_root", str(out),
          "--operation.type", "merge", "--operation.repo_ids", "['local/real', 'local/gen']",
          "--operation.roots", json.dumps(roots))  # fmt: skip
    merged = LeRobotDataset("local/merged", root=out)
    parts = [LeRobotDataset("local/x", root=Path(r)) for r in roots]
    assert (merged.num_episodes, merged.num_frames) == (4, 4 * STEPS)
    assert [m["source"] for m in _metas(merged)] == ["real", "real", "world_model", "world_model"]
    want = np.concatenate([_column(p, "action") for p in parts])
    np.testing.assert_array_equal(_column(merged, "action"), want)
    _assert_done_on_last_frames(merged)
    assert np.asarray(merged[len(merged) - 1]["observation.image"]).shape == (3, RES, RES)
    back = tmp_path / "back.zarr"
    result = runner.invoke(app, ["import", "lerobot", str(out), str(back)])
    assert result.exit_code == 0, result.output
    with EpisodeStore.open(back) as store:
        assert [m.source for m in store.all_meta()] == [m["source"] for m in _metas(merged)]
        np.testing.assert_array_equal(store.load(["action"])["action"], want)
