"""``ModelWorld``: the ``World`` interface over the learned world model.

Initial configurations (a seed or an explicit config) are rendered by the ground-truth
env, as a real robot's first camera frame would be, and its exact state is passed along
(a kind that models the state starts from it; a pixel kind starts from the frame); from
then on only the model runs. The robot and task state are the model's own (the latent
kind's heads or probe, the object-state kind's state), and the score is the task's
geometry applied to the model's task state.

A model that names its ``cameras`` (the object-set kind: ``("top", "side")``) gives the
spec those cameras and each observation ``views`` of the cameras after the main one: its
steps' own renders, and at a start the ground truth's views where the reset has them, the
model's render of its starting state otherwise.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from factory.envs import make_world
from factory.envs.scoring import check_success_score, scorer_for
from factory.errors import FactoryError
from factory.model.protocol import RolloutModel
from factory.model.registry import world_of
from factory.world import World, WorldObs, WorldSpec


def check_main_camera(model_cameras: tuple[str, ...], world_cameras: tuple[str, ...]) -> None:
    """Refuse (:class:`FactoryError`) a model whose first camera is not the world's main
    one: a model world starts from and shows the main camera, so a model of another one
    (a latent_grid ``side`` model) would be started from frames it never saw."""
    main = world_cameras[0] if world_cameras else None
    if model_cameras and model_cameras[0] != main:
        raise FactoryError(
            f"the model renders the {model_cameras[0]!r} camera only, but a world model "
            f"world starts from and shows the {main or 'main'} camera; use a model of that "
            "camera (a side-camera model is scored with `eval fidelity --side-model`)"
        )


class ModelWorld:
    """A batch of ``batch_size`` rollouts of ``model``, behind the ``World`` interface.

    ``world`` names the ground truth (default: the one the model's config names, else
    PushT); ``renderer`` is that world used to render seeded or configured initial
    frames (default: ``make_world(world, batch_size, resolution)``). ``seed`` fixes the
    model's sampling noise; each ``reset`` reseeds it from ``seed`` and the reset's seeds.
    ``success_score`` makes the model's success reading stricter than the task's own: a
    score at least that high (``factory generate --success-score``: demos kept with a
    margin, so that the model's small errors still leave them successful in reality).
    """

    def __init__(
        self,
        model: RolloutModel,
        *,
        world: str | None = None,
        batch_size: int = 1,
        renderer: World | None = None,
        seed: int = 0,
        model_id: str = "",
        success_score: float | None = None,
    ) -> None:
        if not model.has_task_reader:
            raise FactoryError(
                "the model has no probe part and no task head, so it cannot score episodes"
            )
        world = world or world_of(model.config)
        check_success_score(world, success_score)
        self.success_score = success_score
        height = model.config.image_shape[0]
        self.renderer = renderer or make_world(world, batch_size=batch_size, resolution=height)
        base = self.renderer.spec
        model.check_compatible(action_dim=base.action_dim, image_shape=base.image_shape)
        check_main_camera(tuple(model.cameras), base.cameras)
        self.model = model
        self.batch_size = batch_size
        # a model names the cameras it renders; one that does not renders the main camera
        # only: its spec names no cameras, its observations carry no views
        cameras = tuple(model.cameras)
        self.spec: WorldSpec = dataclasses.replace(base, name=f"{base.name}-model", cameras=cameras)
        self.model_id = model_id
        self._seed = seed
        self._score = scorer_for(world)
        self.task_reader = model.task_reader
        """Which part gives the task state: ``task_head``, ``probe`` or ``state``."""
        self._low = np.asarray(base.action_low, np.float32)
        self._high = np.asarray(base.action_high, np.float32)

    def reset(self, seeds: np.ndarray | None = None, configs: np.ndarray | None = None) -> WorldObs:
        """Render the initial frames with the ground truth and start the model from them."""
        first = self.renderer.reset(seeds=seeds, configs=configs)
        salt = 0 if seeds is None else int(np.asarray(seeds, np.int64).sum())
        return self.reset_from_context(
            first.frames[:, None],
            None,
            seed=self._seed + salt,
            states=world_state(first),
            views=first.views,
        )

    def reset_from_context(
        self,
        frames: np.ndarray,
        actions: np.ndarray | None,
        seed: int | None = None,
        states: np.ndarray | None = None,
        views: dict[str, np.ndarray] | None = None,
    ) -> WorldObs:
        """Start from real context: frames (B, K', H, W, 3) uint8, actions (B, K'-1, A),
        and, where known, the world states (B, K', S) of those frames and the other
        cameras' views (B, H, W, 3) of the last one.

        Returns the observation at the last context frame, with the model's own reading of
        the robot and task state.
        """
        if frames.shape[0] != self.batch_size:
            raise FactoryError(
                f"expected {self.batch_size} context rollouts, got {frames.shape[0]}"
            )
        seed = self._seed if seed is None else seed
        self.model.start(frames, actions, seed=seed, states=states)
        agent, block = self.model.last_reading()
        return self._obs(frames[:, -1], agent, block, self._start_views(None, views))

    def start_slots(
        self,
        slots: np.ndarray | list[int],
        frames: np.ndarray,
        actions: np.ndarray | None,
        states: np.ndarray | None = None,
    ) -> WorldObs:
        """Restart only rows ``slots`` (n,) from real context; the other rows go on.

        frames: (n, K', H, W, 3) uint8; actions: (n, K'-1, A) or None; states (n, K', S)
        or None. Needs a running rollout (:meth:`reset` or :meth:`reset_from_context`).
        Returns the n restarted rows' observations at their last context frame (the
        model's own readings), in slot order.
        """
        self.model.start_slots(slots, frames, actions, states=states)
        rows = [int(r) for r in np.asarray(slots, np.int64).reshape(-1)]
        agent, block = self.model.last_reading(rows)
        return self._obs(frames[:, -1], agent, block, self._start_views(rows, None))

    def keep_slots(self, slots: np.ndarray | list[int]) -> None:
        """Keep only rows ``slots`` (in that order); the batch shrinks to ``len(slots)``."""
        self.model.keep_slots(slots)
        self.batch_size = self.model.batch_size

    def step(self, actions: np.ndarray) -> WorldObs:
        """actions: (B, A) float; non-finite actions are refused, the rest clipped."""
        actions = np.asarray(actions, np.float32)
        if actions.shape != (self.batch_size, self.spec.action_dim):
            raise FactoryError(
                f"actions must have shape {(self.batch_size, self.spec.action_dim)}, "
                f"got {actions.shape}"
            )
        if not np.isfinite(actions).all():
            raise FactoryError("actions contain NaN or inf; refusing to step the world model")
        out = self.model.step(np.clip(actions, self._low, self._high))
        assert out.task_state is not None  # the constructor checked for a probe
        return self._obs(out.frames, out.state, out.task_state, out.views)

    def _start_views(
        self, rows: list[int] | None, given: dict[str, np.ndarray] | None
    ) -> dict[str, np.ndarray]:
        """The other cameras' views at a start: ``given`` ones, else the model's render
        of its starting state of ``rows`` (default all)."""
        extra = self.spec.extra_cameras
        if not extra:
            return {}
        if given is not None and set(extra) <= set(given):
            return {cam: given[cam] for cam in extra}
        return self.model.last_views(rows)

    def _obs(
        self,
        frames: np.ndarray,
        state: np.ndarray,
        block: np.ndarray,
        views: dict[str, np.ndarray] | None = None,
    ) -> WorldObs:
        score, success = self._score(block)
        if self.success_score is not None:
            success = score >= self.success_score
        extra = self.spec.extra_cameras
        return WorldObs(
            frames=frames,
            state=state.astype(np.float32),
            task_state=block.astype(np.float32),
            score=score,
            success=success,
            info={},
            views={cam: (views or {})[cam] for cam in extra},
        )

    def close(self) -> None:
        self.renderer.close()


def world_state(obs: WorldObs) -> np.ndarray:
    """(B, 1, S) world state of a ground-truth observation: robot state, then task state
    (PushT: agent x, y, block x, y, angle), as one context step."""
    return np.concatenate([obs.state, obs.task_state], axis=1).astype(np.float32)[:, None]
