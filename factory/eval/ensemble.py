"""``factory eval ensemble``: how far each dynamics, and their mean, drift from the world.

The model's dynamics and its judges (:mod:`factory.gen.judges`) are each rolled open loop
from the first real state of held-out episodes, driven by the episodes' real actions, by
the dynamics alone; so is their *mean dynamics* (:class:`factory.gen.judges.MeanDynamics`:
every step the mean of the members' steps from one shared state), the dynamics
``factory generate --mean-dynamics`` generates in. The block's position error against
the real block at each horizon says how much of the members' errors are their own
(averaged away by the mean) and how much they share.

Shapes: ``E`` episodes, ``T`` steps, ``S`` the world state (PushT: agent x, y, block x, y,
angle), ``A`` the action dim, ``M`` members.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from factory.errors import FactoryError
from factory.eval.fidelity import replay_set
from factory.gen.judges import check_judges, load_judges, mean_rollout
from factory.gen.robustness import check_model
from factory.model import read_config
from factory.model.files import load_model, model_dir_or_default, model_identity
from factory.model.registry import world_of
from factory.model.state_rollout import StateRollout
from factory.store import EpisodeStore


def member_paths(model: StateRollout, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """(E, T+1, S) one member's open-loop states from ``states`` (E, S), under actions
    (E, T, A), from rest (the padding a rollout starts with)."""
    model.start(None, None, states=states[:, None].astype(np.float32))
    out = [states.astype(np.float32)]
    for t in range(actions.shape[1]):
        out.append(model.advance(actions[:, t]).cpu().numpy())
    return np.stack(out, axis=1)


def block_errors(
    paths: np.ndarray, truth: np.ndarray, horizons: Sequence[int], agent_dim: int
) -> dict[str, float]:
    """Block position error (px) at each horizon, the mean over episodes (``h10``) and
    the median (``h10_median``; the mean is carried by the few episodes that diverge):
    paths and truth (E, T+1, S)."""
    xy = slice(agent_dim, agent_dim + 2)
    err = np.linalg.norm(paths[..., xy] - truth[..., xy], axis=-1)  # (E, T+1)
    out = {f"h{h}": float(err[:, h].mean()) for h in horizons}
    return out | {f"h{h}_median": float(np.median(err[:, h])) for h in horizons}


def run_ensemble(
    data: Path, model: Path | None, judges: Sequence[str], horizons: Sequence[int], episodes: int
) -> dict[str, Any]:
    """Each member's and the mean dynamics' block errors on ``episodes`` held-out episodes of
    ``data`` at ``horizons``; refuses bad judges and a store without the world state first."""
    model_dir = model_dir_or_default(model)
    if not judges:
        raise FactoryError("give at least one --judge: the ensemble is the model and its judges")
    config = read_config(model_dir)
    check_judges(config, judges)
    if not Path(data).exists():
        raise FactoryError(f"no episode store at {data}")
    with EpisodeStore.open(data) as store:
        for key in ("action", "state", "task_state"):
            if key not in store.schema.keys:
                raise FactoryError(f"{data} has no data/{key}: the ensemble needs the world state")
        windows = replay_set(store, episodes, 0, max(horizons) + 1)  # frames 0..H
    truth = windows.world_states()
    assert truth is not None  # the store has data/state
    rollout, _ = load_model(model_dir)
    own = check_model(rollout, world_of(config))
    members = [own, *load_judges(own, judges)]
    actions = windows.actions[:, : max(horizons)]
    a0 = members[0].agent_dim
    rows = [
        {"member": name, **block_errors(member_paths(m, truth[:, 0], actions), truth, horizons, a0)}
        for name, m in zip(["model", *judges], members, strict=True)
    ]
    mean_model = mean_rollout(own, members[1:])
    mean = block_errors(member_paths(mean_model, truth[:, 0], actions), truth, horizons, a0)
    return {
        "data": str(data),
        "model_id": model_identity(model_dir),
        "episodes": int(truth.shape[0]),
        "members": rows,
        "mean_dynamics": mean,
    }
