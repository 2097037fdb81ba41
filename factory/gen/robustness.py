"""Robustness inside the model: does an episode's success survive the model's own errors?

An episode generated inside the model ends in success when the model reads it. Whether it
succeeds in the world too depends on the model's small errors, which a replay of its
actions in the world adds up. This asks the model alone (no ground truth): each
successful episode's actions are replayed open loop in the model ``k`` times, by the
dynamics alone, with Gaussian noise of ``step_px`` (board px, each axis) added to each
object's position at every step the dynamics moves it (the model errs in contact), and
optionally from start poses perturbed by ``start_px`` and ``start_deg``. The episode's
*robustness* is the fraction of those replays that reach the task's own success reading
(sticky, within the episode's own length, as generation records success). With judges
(:mod:`factory.gen.judges`: other dynamics trained like the model's), every replay runs
under the model's dynamics and each judge's, and the fraction counts them all.

``factory generate --robust-keep Q`` keeps only successful episodes of robustness at least
``Q`` (the writer's rule, :func:`factory.gen.writer.keeps`); ``factory eval robustness``
scores a store's episodes. The defaults (k 16, step 0.3 px, no start noise, keep at 0.9)
were chosen on exploration seeds 800000.. (docs/RESULTS.md, "G kept by robustness").

It needs a kind that models the state (``starts_from_states``: object_state, object_set):
a pixel kind cannot be started from, or nudged to, a perturbed state. Each world names its
objects (:data:`LAYOUTS`): PushT's one block (x, y, angle), the pile's discs (x, y each);
the noise goes on each object that moves, on its own.

Shapes: ``N`` episodes, ``T_i`` steps of episode ``i``, ``A`` action dim, ``S`` the world
state (PushT: agent x, y, block x, y, angle; pile: agent x, y, then every disc's x, y),
``P`` the world's objects.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from factory.envs.scoring import read_success
from factory.errors import FactoryError
from factory.gen.judges import load_judges
from factory.model.protocol import RolloutModel
from factory.model.state_rollout import StateRollout


@dataclass(frozen=True)
class RobustConfig:
    """``k`` perturbed replays per episode: ``step_px`` (px, each axis) of Gaussian noise
    on each object's position at every step that the dynamics moves it, from the start
    poses plus ``start_px`` (px, each axis) and ``start_deg`` (deg, objects with an angle)
    of noise; ``keep`` is the
    robustness a kept episode needs (``generate --robust-keep``); ``seed`` seeds the
    noise; ``batch`` caps the rows replayed at once; ``judges`` are directories of other
    dynamics (:mod:`factory.gen.judges`) that replay every episode too."""

    k: int = 16
    step_px: float = 0.3
    start_px: float = 0.0
    start_deg: float = 0.0
    keep: float = 0.9
    seed: int = 0
    batch: int = 1024
    judges: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.k < 1:
            raise FactoryError(f"--robust-k must be >= 1, got {self.k}")
        if min(self.step_px, self.start_px, self.start_deg) < 0:
            raise FactoryError("robustness noise (--robust-step-px and the start's) must be >= 0")
        if not 0.0 <= self.keep <= 1.0:
            raise FactoryError(f"--robust-keep must lie between 0 and 1, got {self.keep}")
        if self.batch < 1:
            raise FactoryError(f"robustness batch must be >= 1, got {self.batch}")

    def to_dict(self) -> dict[str, Any]:
        """What an episode's meta records of how its robustness was read."""
        return {
            "k": self.k,
            "step_px": self.step_px,
            "start_px": self.start_px,
            "start_deg": self.start_deg,
            "keep": self.keep,
            "seed": self.seed,
            "judges": list(self.judges),
        }


@dataclass(frozen=True)
class NoiseLayout:
    """Where a world's objects sit in its task state (K,): ``per`` columns each, the first
    two their x, y (px), the third (if ``per`` is 3) their angle (rad)."""

    per: int

    def objects(self, task_dim: int) -> int:
        """How many objects a task state of ``task_dim`` columns holds."""
        if task_dim % self.per:
            raise FactoryError(f"a task state of {task_dim} columns is not whole objects")
        return task_dim // self.per


LAYOUTS = {"pusht": NoiseLayout(per=3), "pile": NoiseLayout(per=2)}
"""Each world's objects: PushT's one block (x, y, angle), the pile's discs (x, y)."""

WORLDS = tuple(LAYOUTS)


STATE_KINDS = ("object_state", "object_set")
"""Model kinds whose rollouts start from, and can be nudged to, a perturbed state."""


def check_plan(kind: str, world: str, only_success: bool) -> None:
    """Refuse (:class:`FactoryError`), before any work, a robustness keep rule that cannot
    run: without ``--only-success``, for a kind not in :data:`STATE_KINDS` or a world not
    in :data:`WORLDS`."""
    if not only_success:
        raise FactoryError("--robust-keep is a rule for kept episodes; add --only-success")
    if kind not in STATE_KINDS:
        raise FactoryError(
            f"--robust-keep needs a model that models the state ({', '.join(STATE_KINDS)}); "
            f"this one is {kind}"
        )
    check_world(world)


def check_world(world: str) -> None:
    """Refuse (:class:`FactoryError`) a world without a noise model (:data:`WORLDS`)."""
    if world not in WORLDS:
        raise FactoryError(f"robustness is built for {', '.join(WORLDS)} only, not {world!r}")


def check_model(model: RolloutModel | StateRollout, world: str) -> StateRollout:
    """The model as a :class:`StateRollout`; refuses (:class:`FactoryError`) one whose
    kind does not model the state, or a world without a noise model (:data:`WORLDS`)."""
    check_world(world)
    if not isinstance(model, StateRollout):
        raise FactoryError(
            f"a {model.kind} model cannot start from a perturbed state; robustness needs "
            f"a kind that models the state ({', '.join(STATE_KINDS)})"
        )
    return model


def episode_noise(
    cfg: RobustConfig, key: int, length: int, layout: NoiseLayout = LAYOUTS["pusht"], n_obj: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """One episode's noise, from its own stream (``cfg.seed``, ``key``: the episode's seed),
    so its robustness does not depend on what it is batched with: the start's (k, P per)
    (each object's x, y px, then its angle rad where it has one) and the steps'
    (k, length, P, 2) (each object's x, y px), for ``n_obj`` objects laid out as
    ``layout``."""
    rng = np.random.default_rng([cfg.seed, key])
    start = np.zeros((cfg.k, n_obj, layout.per))
    start[:, :, :2] = rng.normal(0.0, cfg.start_px, (cfg.k, n_obj, 2))
    if layout.per > 2:
        start[:, :, 2] = rng.normal(0.0, math.radians(cfg.start_deg), (cfg.k, n_obj))
    steps = rng.normal(0.0, cfg.step_px, (cfg.k, length, n_obj, 2))
    return start.reshape(cfg.k, -1), steps


def _padded(actions: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Episodes' actions (T_i, A) -> (N, T, A) padded with each one's last action, and
    their lengths (N,)."""
    lengths = np.array([len(a) for a in actions], np.int64)
    t_max, dim = int(lengths.max()), actions[0].shape[-1]
    out = np.zeros((len(actions), t_max, dim), np.float32)
    for i, a in enumerate(actions):
        out[i, : len(a)] = a
        out[i, len(a) :] = a[-1]
    return out, lengths


def replay_success(
    model: StateRollout,
    world: str,
    starts: np.ndarray,
    actions: np.ndarray,
    lengths: np.ndarray,
    step_noise: np.ndarray | None = None,
) -> np.ndarray:
    """Open-loop replays in the model from ``starts`` (B, S) of ``actions`` (B, T, A), by
    the dynamics alone (``advance``: nothing rendered): (B,) bool, whether ``world``'s
    success reading held at any step before each row's length (B,). ``step_noise``
    (B, T, P, 2) is added to each object's x, y at each step that moves it."""
    model.start(None, None, states=starts[:, None].astype(np.float32))
    done = np.zeros(len(starts), bool)
    a0, per = model.agent_dim, LAYOUTS[world].per
    prev = starts.astype(np.float32)
    for t in range(actions.shape[1]):
        nxt = model.advance(actions[:, t]).cpu().numpy()
        if step_noise is not None:
            objs = (nxt[:, a0:] - prev[:, a0:]).reshape(len(nxt), -1, per)
            moved = np.any(objs != 0, axis=2)  # (B, P)
            delta = np.zeros(objs.shape, np.float32)
            delta[:, :, :2] = step_noise[:, t] * moved[:, :, None]
            delta_s = np.concatenate(
                [np.zeros((len(nxt), a0), np.float32), delta.reshape(len(nxt), -1)], 1
            )
            model.nudge(delta_s)
            nxt = nxt + delta_s
        prev = nxt
        live = ~done & (t < lengths)
        if live.any():
            done[live] = read_success(world, nxt[live, a0:])
    return done


def robustness(
    model: RolloutModel | StateRollout,
    world: str,
    starts: np.ndarray,
    actions: list[np.ndarray],
    cfg: RobustConfig,
    keys: list[int] | None = None,
    judges: list[StateRollout] | None = None,
) -> np.ndarray:
    """(N,) the fraction of ``cfg.k`` perturbed replays of each episode that the model
    (and each of ``judges``, the same replays under their dynamics) reads successful in
    ``world``: the mean over members of :func:`member_robustness`."""
    return member_robustness(model, world, starts, actions, cfg, keys, judges).mean(axis=1)


def member_robustness(
    model: RolloutModel | StateRollout,
    world: str,
    starts: np.ndarray,
    actions: list[np.ndarray],
    cfg: RobustConfig,
    keys: list[int] | None = None,
    judges: list[StateRollout] | None = None,
) -> np.ndarray:
    """(N, M) per member (the model, then each judge) the fraction of ``cfg.k`` perturbed
    replays of each episode read successful: starts (N, S), actions N arrays (T_i, A);
    ``keys`` (N,) the episodes' noise keys (their seeds; default 0..N-1,
    :func:`episode_noise`). Every member replays the same noise."""
    members = [check_model(model, world), *(judges or [])]
    if len(actions) != len(starts) or not len(starts):
        raise FactoryError(f"{len(starts)} starts but {len(actions)} action sequences")
    keys = list(range(len(starts))) if keys is None else keys
    acts, lengths = _padded(actions)
    n, k, t_max = len(starts), cfg.k, acts.shape[1]
    rows = np.repeat(np.asarray(starts, np.float64), k, axis=0)
    layout, task_dim = LAYOUTS[world], rows.shape[1] - members[0].agent_dim
    n_obj = layout.objects(task_dim)
    noise = np.zeros((n * k, t_max, n_obj, 2), np.float32)
    for i, key in enumerate(keys):
        start, steps = episode_noise(cfg, int(key), int(lengths[i]), layout, n_obj)
        rows[i * k : (i + 1) * k, -task_dim:] += start  # every object's pose
        noise[i * k : (i + 1) * k, : lengths[i]] = steps
    acts, lengths = np.repeat(acts, k, axis=0), np.repeat(lengths, k)
    hits = np.zeros((len(members), n * k), bool)
    for m, member in enumerate(members):
        for lo in range(0, n * k, cfg.batch):
            sl = slice(lo, min(lo + cfg.batch, n * k))
            step_noise = noise[sl] if cfg.step_px else None
            hits[m, sl] = replay_success(member, world, rows[sl], acts[sl], lengths[sl], step_noise)
    return hits.reshape(len(members), n, k).mean(axis=2).T


def episode_start(data: dict[str, np.ndarray]) -> np.ndarray:
    """(S,) an episode's first world state as the model had it: its robot state, then its
    task state (a state kind started from a seeded reset holds it exactly)."""
    return np.concatenate([data["state"][0], data["task_state"][0]]).astype(np.float64)


class RobustnessCheck:
    """Reads the robustness of episodes generated by ``model`` in ``world``.

    It replays on a shallow copy of the model (the same parts, its own rollout state), so
    a generation engine's rollout of the same model goes on undisturbed, and under the
    judges of ``cfg.judges`` (loaded once, here)."""

    def __init__(self, model: RolloutModel | StateRollout, world: str, cfg: RobustConfig) -> None:
        self.model = copy.copy(check_model(model, world))
        self.judges = load_judges(self.model, cfg.judges)
        self.world, self.cfg = world, cfg

    def __call__(self, data: dict[str, np.ndarray], key: int) -> float:
        """One episode's robustness from its data (``state``, ``task_state``, ``action``);
        ``key`` its noise key (its seed)."""
        start = episode_start(data)[None]
        acts = [np.asarray(data["action"], np.float32)]
        value = robustness(self.model, self.world, start, acts, self.cfg, [key], self.judges)
        return float(value[0])
