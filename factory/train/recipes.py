"""Named dynamics-training recipes applied, and ``section.field=value`` overrides.

The recipes themselves (:data:`RECIPES`, :data:`DEFAULT_RECIPE`) are the table in
:mod:`factory.train.recipe_table`; each is one option of ``factory train dynamics
--recipe NAME``; ``--set SECTION.FIELD=VALUE`` changes any single field (sections:
``dynamics``, ``consistency``, ``options``, ``train``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from factory.model.config import WorldModelConfig
from factory.model.config_io import parse_setting
from factory.train.dynamics import DYNAMICS_TRAIN, DynamicsTrainOptions
from factory.train.loop import TrainConfig
from factory.train.recipe_table import DEFAULT_RECIPE, RECIPES, Recipe

__all__ = [
    "DEFAULT_RECIPE",
    "RECIPES",
    "SECTIONS",
    "Recipe",
    "apply_recipe",
    "check_recipe",
    "parse_override",
]

SECTIONS = ("dynamics", "consistency", "options", "train")


def parse_override(text: str) -> tuple[str, str, Any]:
    """``SECTION.FIELD=VALUE`` -> (section, field, value) for one of :data:`SECTIONS`
    (:func:`factory.model.config_io.parse_setting`)."""
    return parse_setting(text, SECTIONS)


def _replace(obj: Any, changes: dict[str, Any], what: str) -> Any:
    names = {f.name for f in dataclasses.fields(obj)}
    unknown = sorted(set(changes) - names)
    if unknown:
        raise ValueError(f"unknown {what} field(s): {', '.join(unknown)}")
    return dataclasses.replace(obj, **changes)


def apply_recipe(
    cfg: WorldModelConfig,
    opts: DynamicsTrainOptions,
    train: TrainConfig,
    recipe: str | None,
    overrides: tuple[str, ...] = (),
) -> tuple[WorldModelConfig, DynamicsTrainOptions, TrainConfig]:
    """The config, options and train config with ``recipe`` then ``overrides`` applied."""
    changes: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    if recipe is not None:
        if recipe not in RECIPES:
            raise ValueError(f"unknown recipe {recipe!r}; valid: {', '.join(RECIPES)}")
        changes["dynamics"].update(RECIPES[recipe].dynamics)
        changes["options"].update(RECIPES[recipe].options)
    for text in overrides:
        section, name, value = parse_override(text)
        changes[section][name] = value
    dyn = _replace(cfg.dynamics, changes["dynamics"], "dynamics")
    cons = _replace(cfg.consistency, changes["consistency"], "consistency")
    cfg = dataclasses.replace(cfg, dynamics=dyn, consistency=cons)
    return (
        cfg,
        _replace(opts, changes["options"], "options"),
        _replace(train, changes["train"], "train"),
    )


def check_recipe(recipe: str | None, overrides: tuple[str, ...] = ()) -> None:
    """Raise ``ValueError`` unless ``recipe`` and ``overrides`` apply to a default model
    (checked before any data is loaded)."""
    apply_recipe(WorldModelConfig(), DynamicsTrainOptions(), DYNAMICS_TRAIN, recipe, overrides)
