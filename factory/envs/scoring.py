"""Task scoring from a task-state estimate, by world name.

Inside the world model there is no simulator to ask: the score comes from the state
probe's estimate of the task state (PushT: the block pose) through the task's geometry.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from factory.errors import FactoryError

Scorer = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""task_state (B, K) float -> (score (B,) float32, success (B,) bool)."""


def _score_pusht(task_state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from factory.envs.pusht_geometry import SUCCESS_THRESHOLD, coverage

    score = np.array([coverage(np.asarray(p, np.float64)) for p in task_state], np.float32)
    return score, score > SUCCESS_THRESHOLD


def _score_pile(task_state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from factory.envs.pile_geometry import score_and_success

    return score_and_success(np.asarray(task_state))


SCORERS: dict[str, Scorer] = {"pusht": _score_pusht, "pile": _score_pile}


def _gate_pusht(task_state: np.ndarray) -> np.ndarray:
    from factory.envs.pusht_geometry import near_goal

    return near_goal(task_state)


SUCCESS_GATES: dict[str, Callable[[np.ndarray], np.ndarray]] = {"pusht": _gate_pusht}
"""World -> a cheap necessary condition for success, task states (B, K) -> (B,) bool, for a
scorer that is costly per row (PushT's polygon coverage); a world without one scores
every row."""


def success_threshold(world: str) -> float | None:
    """The score a world's own success rule compares with (PushT: coverage above 0.95; the
    pile: the fraction inside at least 0.9), None for a world without a scorer."""
    if world == "pusht":
        from factory.envs import pusht_geometry as geo
    elif world == "pile":
        from factory.envs import pile_geometry as geo  # type: ignore[no-redef]
    else:
        return None
    return float(geo.SUCCESS_THRESHOLD)


def check_success_score(world: str, value: float | None, flag: str = "--success-score") -> None:
    """Refuse (:class:`FactoryError`) a stricter success score that is not stricter: it
    must lie between the world's own threshold and 1 (``flag`` names it in the message)."""
    if value is None:
        return
    own = success_threshold(world)
    if own is None or not own <= value <= 1.0:
        low = "the world's own threshold" if own is None else own
        raise FactoryError(f"{flag} must lie between {low} and 1 for {world}, got {value}")


def read_success(world: str, task_state: np.ndarray) -> np.ndarray:
    """(B,) bool: the world's success reading of task states (B, K), scoring only the rows
    that pass the world's gate (:data:`SUCCESS_GATES`; PushT: near the goal), the only ones
    that can succeed."""
    states = np.asarray(task_state)
    out = np.zeros(len(states), bool)
    rows = np.arange(len(states))
    gate = SUCCESS_GATES.get(world)
    if gate is not None:
        rows = rows[gate(states)]
    if len(rows):
        out[rows] = scorer_for(world)(states[rows])[1]
    return out


def scorer_for(world: str) -> Scorer:
    """The scorer of a world; an unknown world raises :class:`FactoryError`."""
    try:
        return SCORERS[world]
    except KeyError:
        raise FactoryError(
            f"no task scorer for world {world!r}; known: {', '.join(sorted(SCORERS))}"
        ) from None
