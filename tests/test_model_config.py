"""Config defaults: a fresh config is the shipped recipe's, a stored one keeps what it meant."""

from __future__ import annotations

import json
from pathlib import Path

import typer.main

from factory.model.checkpoint import read_config
from factory.model.config import DYNAMICS_BEFORE, WorldModelConfig
from factory.train.dynamics import DYNAMICS_TRAIN, DynamicsTrainOptions
from factory.train.recipe_table import DEFAULT_RECIPE, RECIPES, recipe_help
from factory.train.recipes import apply_recipe

ISSUE_10_FIELDS = (
    "objective",
    "ctx_noise_min",
    "renorm",
    "motion",
    "flow_max",
    "chunk",
    "task_dim",
    "task_head_channels",
    "task_head_keypoints",
)
"""The dynamics fields that configs written before issue 10 do not have."""


def _recipe(name: str) -> WorldModelConfig:
    return apply_recipe(WorldModelConfig(), DynamicsTrainOptions(), DYNAMICS_TRAIN, name)[0]


def _pre_issue_10_dict() -> dict:
    """A config dict as the first shipped model's code wrote it: no issue-10 fields, no
    ``kind``, and its context noise at inference (0.05) stored."""
    data = WorldModelConfig().to_dict()
    del data["kind"]
    for name in ISSUE_10_FIELDS:
        del data["dynamics"][name]
    data["dynamics"]["ctx_noise"] = 0.05
    return data


def test_the_default_config_is_the_shipped_recipes() -> None:
    """WorldModelConfig() trains what `factory train` trains by default: applying the
    default recipe changes nothing in the model config."""
    assert _recipe(DEFAULT_RECIPE) == WorldModelConfig()
    assert WorldModelConfig().dynamics.objective == "x0"


def test_an_old_config_without_the_objective_loads_to_what_it_meant(tmp_path: Path) -> None:
    """Written before `objective` existed, it meant consistency training (the baseline
    recipe); read from disk it is exactly that, not today's default."""
    (tmp_path / "config.json").write_text(json.dumps(_pre_issue_10_dict()))
    old = read_config(tmp_path)
    assert old.dynamics.objective == "consistency" and old.dynamics.ctx_noise_min == 0.0
    assert old.dynamics.ctx_noise == 0.05
    assert old == _recipe("baseline")
    assert RECIPES["baseline"].dynamics == DYNAMICS_BEFORE


def test_stored_values_win_over_both_defaults(tmp_path: Path) -> None:
    """A stored field keeps its value, whatever the current or the pre-issue-10 default."""
    for name in ("baseline", "iws", "chunk"):
        cfg = _recipe(name)
        (tmp_path / "config.json").write_text(cfg.to_json())
        assert read_config(tmp_path) == cfg, name
    data = _pre_issue_10_dict()
    data["dynamics"].update(objective="x0", ctx_noise_min=0.01)
    assert WorldModelConfig.from_dict(data).dynamics.objective == "x0"
    assert WorldModelConfig.from_dict(data).dynamics.ctx_noise_min == 0.01


def test_recipe_help_names_every_recipe() -> None:
    """`factory train --help` is built from the recipe table, so it cannot drop one."""
    from pipelines.cli import app

    text = recipe_help()
    assert all(f" {name}," in text or f" {name} " in text for name in RECIPES), text
    assert f"a fresh model: {DEFAULT_RECIPE}" in text
    train = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    (option,) = [p for p in train.params if p.name == "recipe"]
    assert option.help == text
