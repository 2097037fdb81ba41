"""How predictable the real world itself is: the ground truth replayed from a start that
is off by a little (``factory eval predictability``).

A world model replayed open loop from the true start is scored against the real
episode (:mod:`factory.eval.fidelity`). Contact-rich scenes are chaotic, so even the
ground-truth simulator, started ``jitter_px`` off, drifts from the recorded episode.
This module measures that drift with the same replay and the same metrics as the model's
fidelity: each store episode is reset in its real world from its first frame's state
with every object's position moved by Gaussian noise of ``jitter_px`` (per coordinate),
driven by the recorded actions, and scored at each horizon. It is the reference that
says which part of a model's error any model of these states would make: a model's
state is known no better than its reader reads it, and its dynamics is off by a fraction
of a pixel per step.

Jitter 0 replays the stored start exactly as stored (float32): any drift there is the
rounding of the stored state itself growing.

The replay needs episodes that start at rest from their first frame, driven by the
stored actions (``factory collect`` records them so). The jitter-free replay of the
first context step must land on the stored state (within ``REPRODUCE_TOL_PX``);
otherwise the store is refused (:class:`~factory.errors.FactoryError`), since its
episodes cannot be replayed in the world (another start, executed actions that differ
from the stored labels).

Shapes: ``E`` episodes, ``T`` horizon, ``S`` the world's config (agent x, y then the task
state), ``H, W`` image size.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from factory.envs import WORLDS, make_world
from factory.errors import FactoryError
from factory.eval.fidelity import HORIZONS, Replayed, ReplaySet, horizon_metrics, plan_replay
from factory.eval.pile_fidelity import pile_horizon_metrics
from factory.store import EpisodeStore

BOARD_PX = 512.0
"""Both worlds' board side (px): jittered positions stay on it."""
REPRODUCE_TOL_PX = 1e-3
"""How far (px) the jitter-free replay of the first context step may land from the store."""
POSITIONS: dict[str, slice] = {"pusht": slice(0, 2), "pile": slice(0, None)}
"""world -> the task-state entries that are object positions (board px), which jitter
moves: PushT's block x, y (not its angle); every disc's x, y."""
Scorer = Callable[[Sequence[tuple[ReplaySet, Replayed]], Sequence[int]], dict[str, Any]]
SCORERS: dict[str, Scorer] = {"pusht": horizon_metrics, "pile": pile_horizon_metrics}
"""world -> its fidelity rows per horizon (the same ``eval fidelity`` reports)."""


def world_of_store(store: EpisodeStore) -> str:
    """The real world a store's episodes were recorded in; refuses a store recorded inside
    a model, an unknown world, or one without the agent state or an object state."""
    env = str(store.attrs.get("env", ""))
    if env.endswith("-model"):
        raise FactoryError(
            f"{store.path} was recorded inside a model ({env}); predictability replays "
            "episodes recorded in the real world (factory collect)"
        )
    if env not in WORLDS:
        raise FactoryError(f"{store.path} records env {env!r}; known worlds: {', '.join(WORLDS)}")
    made = sum(m.source == "world_model" for m in store.all_meta())
    if made:
        raise FactoryError(
            f"{store.path} holds {made} episodes generated inside a model (factory generate); "
            "predictability replays episodes recorded in the real world (factory collect)"
        )
    for key in ("state", "task_state", "action", "image"):
        if key not in store.schema.keys:
            raise FactoryError(f"{store.path} has no data/{key}; predictability needs it")
    return env


def jittered_starts(
    states: np.ndarray, world: str, jitter_px: float, rng: np.random.Generator
) -> np.ndarray:
    """Start configs (E, S) float64: the first states (E, S) with every object position
    (:data:`POSITIONS`) moved by N(0, ``jitter_px``) per coordinate, kept on the board."""
    out = np.asarray(states, np.float64).copy()
    task = out[:, 2:]
    cols = np.arange(task.shape[1])[POSITIONS[world]]
    if jitter_px > 0:
        task[:, cols] += rng.normal(0.0, jitter_px, (len(out), len(cols)))
        task[:, cols] = np.clip(task[:, cols], 0.0, BOARD_PX)
    return out


def real_replay(rs: ReplaySet, world: str, starts: np.ndarray) -> tuple[Replayed, float]:
    """The real world replayed from ``starts`` (E, S) with ``rs``'s actions: the frames,
    views and task state of the steps after the context (as a model's replay), and how
    far (px, largest coordinate) its last context step landed from the stored one."""
    n, steps = rs.frames.shape[:2]
    k = rs.context
    env = make_world(world, batch_size=n, resolution=int(rs.frames.shape[2]))
    try:
        obs = env.reset(configs=starts)
        for t in range(k - 1):
            obs = env.step(rs.actions[:, t])
        stored = rs.world_states()
        assert stored is not None  # world_of_store checked the agent state
        now = np.concatenate([obs.state[:, :2], obs.task_state], axis=-1)
        landed = float(np.abs(now - stored[:, k - 1]).max())
        frames, task, views = [], [], []
        for t in range(k - 1, steps - 1):
            obs = env.step(rs.actions[:, t])
            frames.append(obs.frames)
            task.append(obs.task_state)
            views.append(obs.views)
    finally:
        env.close()
    cams = sorted(views[0]) if views else []
    return (
        Replayed(
            frames=np.stack(frames, 1),
            task_state=np.stack(task, 1).astype(np.float32),
            views={c: np.stack([v[c] for v in views], 1) for c in cams},
        ),
        landed,
    )


def run_predictability(
    data: Any,
    jitters: Sequence[float] = (0.0, 0.01, 0.1),
    episodes: int = 16,
    horizons: Sequence[int] = HORIZONS,
    context: int = 2,  # the state kinds' context: horizon h is frame context - 1 + h
    seed: int = 0,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The real world's own fidelity rows (per horizon, as ``eval fidelity`` reports a
    model's) for each start jitter (px), on up to ``episodes`` of the store at ``data``.

    Returns {data, world, episodes, context, seed, reproduced_px, references: {jitter:
    rows}} (``reproduced_px``: the jitter-free replay's largest gap at the last context
    step). ``on_progress(done, total)`` counts the jitters replayed."""
    if episodes <= 0:
        raise FactoryError(f"--episodes must be positive, got {episodes}")
    if not jitters or min(jitters) < 0 or not all(np.isfinite(jitters)):
        raise FactoryError(f"--jitter takes px values >= 0, got {list(jitters)}")
    with EpisodeStore.open(data) as store:
        world = world_of_store(store)
        plan = plan_replay(store, episodes, context, horizons)
    groups = list(plan.groups.values())
    exact = [real_replay(rs, world, _first_states(rs)) for rs in groups]
    reproduced = max(landed for _, landed in exact)
    if reproduced > REPRODUCE_TOL_PX:
        raise FactoryError(
            f"{data}: replaying the stored actions in the {world} world from the first frame "
            f"lands {reproduced:.3g} px from the stored episode (episodes that do not start "
            "at rest, or executed actions that differ from the stored ones)"
        )
    rng = np.random.default_rng(seed)
    score = SCORERS[world]
    refs: dict[str, Any] = {}
    for jitter in jitters:
        if jitter == 0:
            pairs = [(rs, rep) for rs, (rep, _) in zip(groups, exact, strict=True)]
        else:
            pairs = [(rs, _jittered_replay(rs, world, jitter, rng)) for rs in groups]
        refs[f"{float(jitter):g}"] = score(pairs, list(horizons))
        if on_progress is not None:
            on_progress(len(refs), len(jitters))
    return {
        "data": str(data),
        "world": world,
        "episodes": plan.n_episodes,
        "context": context,
        "seed": seed,
        "reproduced_px": reproduced,
        "references": refs,
    }


def _jittered_replay(
    rs: ReplaySet, world: str, jitter_px: float, rng: np.random.Generator
) -> Replayed:
    """:func:`real_replay` of ``rs`` from its first states jittered by ``jitter_px``."""
    return real_replay(rs, world, jittered_starts(_first_states(rs), world, jitter_px, rng))[0]


def _first_states(rs: ReplaySet) -> np.ndarray:
    """(E, S) the stored world state of every window's first frame."""
    states = rs.world_states()
    assert states is not None  # world_of_store checked the agent state
    return states[:, 0]
