"""A recording command that fails leaves nothing it made behind: a replay source of
another world is refused before the output exists, and a run that fails before its first
commit removes the store it created (an existing store, appended to, is kept as it was)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from factories import assert_one_line_error, write_tiny_object_state_dir
from typer.testing import CliRunner

import pipelines.collect as collect_mod
import pipelines.generate as generate_mod
from factory.gen.plan import GenerateConfig
from factory.store import EpisodeStore
from pipelines.cli import app
from pipelines.collect import CollectConfig, execute_collect, prepare_collect
from pipelines.generate import execute_generate, prepare_generate

runner = CliRunner()


def _collect(out: Path, env: str, generator: str, res: int = 32) -> Path:
    args = ["collect", "--env", env, "--generator", generator, "--out", str(out)]
    args += ["--episodes", "1", "--steps", "8", "--resolution", str(res)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("worlds")
    return {
        "pusht": _collect(base / "pusht.zarr", "pusht", "play"),
        "pile": _collect(base / "pile.zarr", "pile", "pile_play"),
    }


@pytest.mark.parametrize(("env", "other"), [("pusht", "pile"), ("pile", "pusht")])
def test_collect_refuses_a_replay_source_of_another_world(
    tmp_path: Path, stores: dict[str, Path], env: str, other: str
) -> None:
    out = tmp_path / "out.zarr"
    args = ["collect", "--env", env, "--generator", "replay", "--source", str(stores[other])]
    result = runner.invoke(app, [*args, "--out", str(out), "--resolution", "32"])
    assert_one_line_error(result, f"holds {other} episodes", f"replay a {env} store")
    assert not out.exists()


def test_generate_refuses_a_replay_source_of_another_world(
    tmp_path: Path, stores: dict[str, Path]
) -> None:
    model = write_tiny_object_state_dir(tmp_path / "m")  # a PushT model at 32 px
    out = tmp_path / "out.zarr"
    args = ["generate", "--generator", "replay", "--source", str(stores["pile"])]
    result = runner.invoke(app, [*args, "--model", str(model), "--out", str(out)])
    assert_one_line_error(result, "holds pile episodes", "the pusht world")
    assert not out.exists()


def _boom(*_: Any, **__: Any) -> Any:
    raise RuntimeError("a worker died")


def test_a_collect_that_fails_before_a_commit_leaves_no_store(
    tmp_path: Path, stores: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(collect_mod, "_worker_run", _boom)
    out = tmp_path / "new.zarr"
    plan = prepare_collect(CollectConfig(out=out, generator="play", episodes=2, resolution=32))
    assert out.exists()  # created once the work could start
    with pytest.raises(RuntimeError):
        execute_collect(plan)
    assert not out.exists()
    # a store that existed before the run is kept, episodes and all
    cfg = CollectConfig(out=stores["pusht"], generator="play", episodes=2, append=True,
                        resolution=32)  # fmt: skip
    with pytest.raises(RuntimeError):
        execute_collect(prepare_collect(cfg))
    with EpisodeStore.open(stores["pusht"]) as store:
        assert store.n_episodes == 1


def test_a_generate_that_fails_before_a_commit_leaves_no_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail_after_opening(plan: Any, writer: Any) -> Any:
        plan.output()  # the store exists, as it does once the first episode arrives
        raise RuntimeError("a worker died")

    monkeypatch.setattr(generate_mod, "run_on_ray", fail_after_opening)
    model = write_tiny_object_state_dir(tmp_path / "m")
    out = tmp_path / "g.zarr"
    plan = prepare_generate(GenerateConfig(out=out, generator="play", model=model, episodes=2))
    with pytest.raises(RuntimeError):
        execute_generate(plan)
    assert not out.exists()
