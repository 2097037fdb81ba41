"""Named dynamics-training recipes and ``section.field=value`` overrides.

A recipe is a set of typed overrides of the model config's ``dynamics`` section and of
the stage's :class:`~factory.train.dynamics.DynamicsTrainOptions`. They are the variants
of issue 10's ablation table (docs/MODEL_CARD.md), each one option of
``factory train dynamics --recipe NAME``; ``--set SECTION.FIELD=VALUE`` changes any single
field (sections: ``dynamics``, ``consistency``, ``options``, ``train``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from factory.model.config import WorldModelConfig
from factory.train.dynamics import DYNAMICS_TRAIN, DynamicsTrainOptions
from factory.train.loop import TrainConfig

_IWS = {"objective": "x0", "ctx_noise_min": 0.025, "ctx_noise_max": 0.2, "ctx_noise": 0.07}


@dataclass(frozen=True)
class Recipe:
    """Overrides of the dynamics config and of the stage options; ``doc`` says what it is."""

    doc: str
    dynamics: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


RECIPES: dict[str, Recipe] = {
    "baseline": Recipe("the first shipped recipe: improved consistency training + denoising"),
    "iws": Recipe(
        "IWS's stage-2 recipe: one jump from noise, MSE, context noise U(0.025, 0.2) / 0.07",
        dynamics=_IWS,
        options={"unroll_steps": 0},
    ),
    "iws_pixel_norm": Recipe(
        "iws + IWS's per-pixel L2 re-normalisation (to the latents' mean pixel norm)",
        dynamics=dict(_IWS, renorm="pixel_norm"),
        options={"unroll_steps": 0},
    ),
    "unroll": Recipe(
        "iws + self-unrolled training: 4 chained predictions, back-propagated, from step 0",
        dynamics=_IWS,
        options={"unroll_steps": 0, "grad_unroll": 4},
    ),
    "iws_unroll": Recipe(
        "iws for the first quarter of the budget, then unroll (the shipped model's recipe)",
        dynamics=_IWS,
        options={"unroll_steps": 0, "grad_unroll": 4, "grad_unroll_start": 0.25},
    ),
    "motion": Recipe(
        "iws + motion prior: a flow warps the last latent, plus a residual (identity at init)",
        dynamics=dict(_IWS, motion="flow"),
        options={"unroll_steps": 0},
    ),
    "chunk": Recipe(
        "iws + 4 frames per network call (the next 4 latents from the 4 actions)",
        dynamics=dict(_IWS, chunk=4),
        options={"unroll_steps": 0},
    ),
}
"""Recipe name -> overrides. New recipes are one entry here."""

DEFAULT_RECIPE = "iws_unroll"
"""The recipe ``factory train all`` and a fresh ``factory train dynamics`` use by default."""

SECTIONS = ("dynamics", "consistency", "options", "train")


def parse_override(text: str) -> tuple[str, str, Any]:
    """``SECTION.FIELD=VALUE`` -> (section, field, value); VALUE is JSON, else a string."""
    key, sep, raw = text.partition("=")
    section, dot, name = key.strip().partition(".")
    if not sep or not dot or section not in SECTIONS or not name:
        raise ValueError(
            f"--set {text!r}: expected SECTION.FIELD=VALUE with SECTION one of {SECTIONS}"
        )
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return section, name, tuple(value) if isinstance(value, list) else value


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
