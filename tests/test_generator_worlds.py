"""Each generator is for its worlds: ``collect`` and ``generate`` refuse a generator of
another world before any work (one line, exit 2, nothing created); and the pile world's two
cameras go through ``collect`` into a store that ``inspect`` describes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from factories import assert_one_line_error, write_tiny_model_dir
from typer.testing import CliRunner

from factory.envs.pile import PileWorld
from factory.errors import FactoryError
from factory.generators import (
    GENERATOR_WORLDS,
    GENERATORS,
    check_generator_world,
    generators_for,
    make_generator,
)
from factory.store import EpisodeStore
from pipelines.cli import app

runner = CliRunner()
PILE_VALID = ["hold_still", "pile_expert", "pile_play", "policy", "replay"]
PUSHT_VALID = ["expert", "hold_still", "play", "policy", "replay"]


def test_every_generator_says_its_worlds() -> None:
    assert set(GENERATOR_WORLDS) == set(GENERATORS)
    assert generators_for("pile") == PILE_VALID
    assert generators_for("pusht") == PUSHT_VALID
    assert generators_for("pusht-model") == PUSHT_VALID  # a model world is its env's
    for name in PUSHT_VALID:
        check_generator_world(name, "pusht-model")
    with pytest.raises(FactoryError) as err:
        check_generator_world("expert", "pile")
    assert str(err.value) == (
        "generator 'expert' is for pusht, not pile; generators for pile: " + ", ".join(PILE_VALID)
    )
    with pytest.raises(FactoryError, match="for pile, not pusht"):
        check_generator_world("pile_play", "pusht-model")
    with pytest.raises(FactoryError, match="unknown generator 'nope'"):
        check_generator_world("nope", "pusht")


@pytest.mark.parametrize(
    ("env", "generator", "valid"),
    [("pile", "expert", PILE_VALID), ("pile", "play", PILE_VALID), ("pusht", "pile_expert",
     PUSHT_VALID)],
)  # fmt: skip
def test_collect_refuses_a_generator_of_another_world(
    tmp_path: Path, env: str, generator: str, valid: list[str]
) -> None:
    out = tmp_path / "deep" / "out.zarr"
    args = ["collect", "--env", env, "--generator", generator, "--episodes", "1"]
    result = runner.invoke(app, [*args, "--steps", "3", "--out", str(out)])
    assert_one_line_error(result, f"generator {generator!r} is for", ", ".join(valid))
    assert not (tmp_path / "deep").exists()


def test_generate_refuses_a_generator_of_another_world(tmp_path: Path) -> None:
    model = write_tiny_model_dir(tmp_path / "tiny")
    out = tmp_path / "deep" / "gen.zarr"
    args = ["generate", "--out", str(out), "--model", str(model), "--generator", "pile_expert"]
    result = runner.invoke(app, [*args, "--episodes", "1", "--steps", "3"])
    assert_one_line_error(result, "'pile_expert' is for pile, not pusht", ", ".join(PUSHT_VALID))
    assert not (tmp_path / "deep").exists()


def test_pile_collect_records_both_cameras(tmp_path: Path) -> None:
    out = tmp_path / "pile.zarr"
    args = ["collect", "--env", "pile", "--generator", "pile_expert", "--episodes", "2"]
    result = runner.invoke(app, [*args, "--steps", "6", "--resolution", "32", "--out", str(out)])
    assert result.exit_code == 0, result.output
    shown = runner.invoke(app, ["inspect", str(out), "--json"])
    keys = json.loads(shown.stdout.strip().splitlines()[-1])["keys"]
    assert keys["image"] == keys["image_side"] == {"shape": [12, 32, 32, 3], "dtype": "uint8"}
    with EpisodeStore.open(out) as store:
        assert store.attrs["cameras"] == ["top", "side"] and store.attrs["env"] == "pile"
        episode = store.episode(1).to_dict()
    # the recorded cameras are what the world showed: rerun seed 1 (episode 1) by hand
    world, gen = PileWorld(resolution=32), make_generator("pile_expert")
    obs = world.reset(seeds=np.array([1]))
    gen.reset(1, obs.item(0))
    for t in range(6):
        np.testing.assert_array_equal(episode["image"][t], obs.frames[0])
        np.testing.assert_array_equal(episode["image_side"][t], obs.views["side"][0])
        obs = world.step(np.asarray(gen.act(obs.item(0)), np.float32)[None])
    assert not np.array_equal(episode["image"], episode["image_side"])
    # --append of another world's episodes (other cameras) is refused, the store untouched
    again = ["collect", "--env", "pusht", "--generator", "play", "--episodes", "1", "--append"]
    result = runner.invoke(app, [*again, "--resolution", "32", "--out", str(out)])
    assert_one_line_error(result, "different schema", "image_side")
    with EpisodeStore.open(out) as store:
        assert store.n_episodes == 2
