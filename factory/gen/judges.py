"""Judges: other dynamics that a model's generated successes are replayed under.

Noise on one dynamics (:mod:`factory.gen.robustness`) asks whether a success survives
small errors of the kind the noise draws. It cannot see where the model is wrong in a
way of its own: a contact its dynamics learned badly. Dynamics trained like the model's,
on the same data from other seeds, agree where the data decides and disagree where it
does not (the ensemble reading of a learned model's uncertainty, as in PETS, Chua et al.
2018). A *judge* is such a dynamics part; an episode's robustness with judges is the
fraction of replays that succeed over the model's dynamics and every judge's.

Train one with the model's data and its dynamics budget, another seed each::

    factory train dynamics --kind object_state --data data/pusht_play.zarr \\
        --out models/pusht_judges/j1 --steps 10000 --seed 1

A judge directory holds a ``config.json`` whose kind and dynamics section equal the
model's and a ``dynamics`` part; its other parts, if any, are not read.

The members can also act as one: :class:`MeanDynamics`, the mean of their steps, is the
dynamics ``factory generate --mean-dynamics DIR`` generates in and ``factory eval
ensemble`` scores.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from factory.errors import FactoryError, ModelError
from factory.model import load_part, read_config
from factory.model.state_rollout import StateRollout


def _judge_config(model_config: Any, judge: str | Path) -> Any:
    """The judge directory's config; refused (:class:`FactoryError`) when it is missing,
    of another kind, without a dynamics part or with another dynamics config."""
    try:
        cfg = read_config(judge)
    except ModelError as err:
        raise FactoryError(f"judge {judge}: {err}") from None
    if cfg.kind != model_config.kind:
        raise FactoryError(f"judge {judge} is a {cfg.kind} model, the model is {model_config.kind}")
    if "dynamics" not in cfg.parts:
        raise FactoryError(
            f"judge {judge} has no dynamics part; train it with `factory train dynamics`"
        )
    if dataclasses.asdict(cfg.dynamics) != dataclasses.asdict(model_config.dynamics):
        raise FactoryError(
            f"judge {judge}'s dynamics config differs from the model's; train it with the "
            "model's config (the same kind and defaults)"
        )
    return cfg


def check_judges(model_config: Any, judges: Sequence[str | Path]) -> None:
    """Refuse, before any work, judges that cannot replay the model's episodes (configs
    only; :func:`load_judges` reads their weights)."""
    if judges and not hasattr(model_config, "dynamics"):
        raise FactoryError(f"judges need a model with a dynamics part; this is {model_config.kind}")
    for judge in judges:
        _judge_config(model_config, judge)


def check_mean_dynamics(kind: str, model_config: Any, judges: Sequence[str | Path]) -> None:
    """Refuse, before any work, a mean dynamics that cannot be built: for a kind other
    than ``object_state`` or with judges :func:`check_judges` refuses."""
    if kind != "object_state":
        raise FactoryError(f"--mean-dynamics needs an object_state model; this one is {kind}")
    check_judges(model_config, judges)


def load_judges(model: StateRollout, judges: Sequence[str | Path]) -> list[StateRollout]:
    """One rollout per judge: the model's kind, config and other parts (shared, never
    changed) with the judge's dynamics, on the model's device."""
    members = []
    for judge in judges:
        cfg = _judge_config(model.config, judge)
        try:
            dyn = load_part(judge, "dynamics", cfg, model.device).eval()
        except ModelError as err:
            raise FactoryError(f"judge {judge}: {err}") from None
        member = type(model)(model.config, dyn, model.renderer, model.reader)
        members.append(member.to(model.device))
    return members


class MeanDynamics(nn.Module):
    """The mean of several dynamics (the model's and its judges'): each member predicts
    the next states (B, S) from the same (previous, current) states and actions, and the
    mean of their steps (next minus current, the block's angle step wrapped) is added to
    the current states. Its moving logit (B,) is the members' mean."""

    def __init__(self, members: Sequence[nn.Module], angle_index: int = -1) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)
        self.angle_index = angle_index

    def forward(
        self, prev: Tensor, cur: Tensor, prev_action: Tensor, action: Tensor, hard_gate: bool = True
    ) -> tuple[Tensor, Tensor]:
        outs = [m(prev, cur, prev_action, action, hard_gate) for m in self.members]
        steps = torch.stack([nxt - cur for nxt, _ in outs])  # (M, B, S)
        turn = steps[..., self.angle_index]
        steps[..., self.angle_index] = torch.atan2(torch.sin(turn), torch.cos(turn))
        return cur + steps.mean(dim=0), torch.stack([logit for _, logit in outs]).mean(dim=0)


def mean_rollout(model: StateRollout, judges: Sequence[StateRollout]) -> StateRollout:
    """A rollout of the model's kind, config and other parts whose dynamics is the
    :class:`MeanDynamics` of the model's and the loaded judges' (the model left as it was)."""
    members = [model.dynamics, *(j.dynamics for j in judges)]
    mean = type(model)(model.config, MeanDynamics(members), model.renderer, model.reader)
    return mean.to(model.device)


def with_mean_dynamics(model: StateRollout, judges: Sequence[str | Path]) -> StateRollout:
    """:func:`mean_rollout` of the model and the judges in directories ``judges``."""
    return mean_rollout(model, load_judges(model, judges))
