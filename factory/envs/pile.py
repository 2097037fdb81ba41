"""The ground-truth pile-sweeping world: a batch of :class:`PileSim` behind ``World``.

The task: sweep a pile of small discs into the goal square with a pusher disk. The score is
the fraction of discs whose centre lies in the goal (:mod:`pile_geometry`), success a score
of at least 0.9.
"""

from __future__ import annotations

import logging

import numpy as np

from factory.envs import pile_geometry as geo
from factory.envs.checks import check_configs, check_seeds, check_target_actions
from factory.envs.pile_render import VIEWS, render_views
from factory.envs.pile_sim import PileParams, PileSim
from factory.errors import FactoryError
from factory.world import WorldObs, WorldSpec

log = logging.getLogger(__name__)


def pile_spec(resolution: int, n_discs: int = 30) -> WorldSpec:
    """The pile world's spec at ``resolution`` pixels with ``n_discs`` discs."""
    discs = [f"disc{i}_{axis}" for i in range(int(n_discs)) for axis in ("x", "y")]
    return WorldSpec(
        name="pile",
        image_shape=(resolution, resolution, 3),
        action_dim=2,
        state_dim=2,
        fps=10.0,
        action_meaning="absolute agent target position (x, y) in board pixels, [0, 512]^2",
        action_low=(0.0, 0.0),
        action_high=(geo.BOARD_SIZE, geo.BOARD_SIZE),
        task_state_names=tuple(discs),
        config_names=("agent_x", "agent_y", *discs),
        task="Sweep the pile of discs into the green square.",
        cameras=VIEWS,
    )


class PileWorld:
    """``batch_size`` pile scenes stepped in lockstep.

    Observations: frames (B, R, R, 3) uint8 the ``top`` camera, ``views["side"]``
    (B, R, R, 3) uint8 the ``side`` camera, ``state`` (B, 2) the agent xy, ``task_state``
    (B, 2 N) every disc's centre ``[x0, y0, x1, y1, ...]``, ``score`` (B,) the fraction of
    discs in the goal, ``success`` score >= 0.9. ``info``: ``contact`` (B,) bool whether
    the agent touches a disc (within 1 px), ``n_inside`` (B,) int64 the discs in the goal.
    Configs (B, 2 + 2 N) are the agent xy then every disc's xy, in board pixels.
    """

    def __init__(
        self, batch_size: int = 1, resolution: int = 96, params: PileParams | None = None
    ) -> None:
        if int(batch_size) < 1:
            raise FactoryError(f"batch_size must be >= 1, got {batch_size}")
        if int(resolution) < 8:
            raise FactoryError(f"resolution must be >= 8 pixels, got {resolution}")
        self.params = params or PileParams()
        self.batch_size = int(batch_size)
        self.resolution = int(resolution)
        self.spec = pile_spec(self.resolution, self.params.n_discs)
        self._sims = [PileSim(self.params) for _ in range(self.batch_size)]
        self._ready = False

    # -- reset ---------------------------------------------------------------------------
    def reset(self, seeds: np.ndarray | None = None, configs: np.ndarray | None = None) -> WorldObs:
        """Reset from ``seeds`` (B,) or ``configs`` (B, 2 + 2 N); with neither, random seeds."""
        if seeds is not None and configs is not None:
            raise FactoryError("reset takes seeds or configs, not both")
        if configs is not None:
            for sim, config in zip(self._sims, self._configs(configs), strict=True):
                sim.reset_to(config[:2], config[2:].reshape(-1, 2))
        else:
            if seeds is None:
                seeds = np.random.SeedSequence().generate_state(self.batch_size)
            for sim, seed in zip(self._sims, check_seeds(seeds, self.batch_size), strict=True):
                sim.reset(int(seed))
        self._ready = True
        return self._collect()

    def _configs(self, configs: np.ndarray) -> np.ndarray:
        p = self.params
        meaning = f"agent x, y, then x, y of each of {p.n_discs} discs"
        arr = check_configs(configs, self.batch_size, p.config_dim, meaning)
        if np.any(arr < 0.0) or np.any(arr > geo.BOARD_SIZE):
            raise FactoryError(f"configs must lie on the board, [0, {geo.BOARD_SIZE:g}]^2")
        return arr

    # -- step ----------------------------------------------------------------------------
    def step(self, actions: np.ndarray) -> WorldObs:
        """Advance every episode by one 10 Hz step; actions (B, 2) are clipped to the board."""
        if not self._ready:
            raise FactoryError("step called before reset")
        for sim, act in zip(
            self._sims, check_target_actions(actions, self.batch_size, geo.BOARD_SIZE), strict=True
        ):
            sim.step(act)
        return self._collect()

    # -- observations --------------------------------------------------------------------
    def scenes(self) -> np.ndarray:
        """Every episode's scene (B, 2 + 2 N) float64 in the config convention."""
        return np.stack([np.concatenate([s.agent_xy(), s.disc_xy().ravel()]) for s in self._sims])

    def _collect(self) -> WorldObs:
        scenes = self.scenes()
        agent, discs = scenes[:, :2], scenes[:, 2:]
        views = [render_views(scene, self.resolution) for scene in scenes]
        task_state = discs.astype(np.float32)  # scored as reported: the scorer agrees
        score, success = geo.score_and_success(task_state)
        inside = geo.inside_goal(geo.discs_of(task_state)).sum(axis=-1)
        main, *others = self.spec.cameras
        return WorldObs(
            frames=np.stack([v[main] for v in views]),
            state=agent.astype(np.float32),
            task_state=task_state,
            score=score,
            success=success,
            info={
                "contact": geo.agent_contact(agent, geo.discs_of(discs)),
                "n_inside": inside.astype(np.int64),
            },
            views={cam: np.stack([v[cam] for v in views]) for cam in others},
        )

    def close(self) -> None:
        """Drop every scene."""
        self._sims = []
        self._ready = False

    def __enter__(self) -> PileWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
