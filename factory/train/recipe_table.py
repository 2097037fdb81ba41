"""The dynamics-training recipe table: names, what each overrides, the default.

Plain data, importable without torch (the command line builds its ``--recipe`` help from
it); :mod:`factory.train.recipes` applies them. A recipe is a set of overrides of the
model config's ``dynamics`` section and of the stage's
:class:`~factory.train.dynamics.DynamicsTrainOptions`: the variants of issue 10's
ablation table (docs/MODEL_CARD.md). New recipes are one entry in :data:`RECIPES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_IWS = {"objective": "x0", "ctx_noise_min": 0.025, "ctx_noise_max": 0.2, "ctx_noise": 0.07}


@dataclass(frozen=True)
class Recipe:
    """Overrides of the dynamics config and of the stage options; ``doc`` says what it is."""

    doc: str
    dynamics: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


RECIPES: dict[str, Recipe] = {
    "baseline": Recipe(
        "the first shipped recipe: improved consistency training + denoising",
        # the values factory.model.config.DYNAMICS_BEFORE gives configs older than issue 10
        dynamics={"objective": "consistency", "ctx_noise_min": 0.0, "ctx_noise": 0.05},
    ),
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


def recipe_help() -> str:
    """The ``--recipe`` help: every recipe's name, and the default."""
    return (
        f"dynamics: a named recipe, one of {', '.join(RECIPES)} "
        f"(a fresh model: {DEFAULT_RECIPE}; a resumed one keeps its own)."
    )
