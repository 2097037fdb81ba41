"""``ModelWorld``: the ``World`` interface over the learned world model.

Initial configurations (a seed or an explicit config) are rendered by the ground-truth
env, as a real robot's first camera frame would be; from then on only the model runs.
The robot state comes from the dynamics' state head, the task state from the state probe,
and the score from the task's geometry applied to the probe's estimate.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from factory.envs import make_world
from factory.envs.scoring import scorer_for
from factory.errors import FactoryError
from factory.model import WorldModel
from factory.world import World, WorldObs, WorldSpec


class ModelWorld:
    """A batch of ``batch_size`` rollouts of ``model``, behind the ``World`` interface.

    ``renderer`` is the ground-truth world used to render seeded or configured initial
    frames (default: ``make_world(world, batch_size, resolution)``). ``seed`` fixes the
    model's sampling noise; each ``reset`` reseeds it from ``seed`` and the reset's seeds.
    """

    def __init__(
        self,
        model: WorldModel,
        *,
        world: str = "pusht",
        batch_size: int = 1,
        renderer: World | None = None,
        seed: int = 0,
        model_id: str = "",
    ) -> None:
        if not model.has_task_reader:
            raise FactoryError(
                "the model has no probe part and no task head, so it cannot score episodes"
            )
        height = model.config.image_shape[0]
        self.renderer = renderer or make_world(world, batch_size=batch_size, resolution=height)
        base = self.renderer.spec
        model.check_compatible(action_dim=base.action_dim, image_shape=base.image_shape)
        self.model = model
        self.batch_size = batch_size
        self.spec: WorldSpec = dataclasses.replace(base, name=f"{base.name}-model")
        self.model_id = model_id
        self._seed = seed
        self._score = scorer_for(world)
        dyn = model.dynamics
        self.task_reader = "task_head" if dyn is not None and dyn.task_head else "probe"
        """Which part reads the task state: ``task_head`` or ``probe``."""
        self._low = np.asarray(base.action_low, np.float32)
        self._high = np.asarray(base.action_high, np.float32)

    def reset(self, seeds: np.ndarray | None = None, configs: np.ndarray | None = None) -> WorldObs:
        """Render the initial frames with the ground truth and start the model from them."""
        first = self.renderer.reset(seeds=seeds, configs=configs)
        salt = 0 if seeds is None else int(np.asarray(seeds, np.int64).sum())
        return self.reset_from_context(first.frames[:, None], None, seed=self._seed + salt)

    def reset_from_context(
        self, frames: np.ndarray, actions: np.ndarray | None, seed: int | None = None
    ) -> WorldObs:
        """Start from real context: frames (B, K', H, W, 3) uint8, actions (B, K'-1, A).

        Returns the observation at the last context frame, with the model's own reading of
        the robot and task state (the probe's).
        """
        if frames.shape[0] != self.batch_size:
            raise FactoryError(
                f"expected {self.batch_size} context rollouts, got {frames.shape[0]}"
            )
        self.model.start(frames, actions, seed=self._seed if seed is None else seed)
        last = frames[:, -1]
        agent, block = self.model.probe_frames(last)
        return self._obs(last, agent, block)

    def start_slots(
        self, slots: np.ndarray | list[int], frames: np.ndarray, actions: np.ndarray | None
    ) -> WorldObs:
        """Restart only rows ``slots`` (n,) from real context; the other rows go on.

        frames: (n, K', H, W, 3) uint8; actions: (n, K'-1, A) or None. Needs a running
        rollout (:meth:`reset` or :meth:`reset_from_context`). Returns the n restarted
        rows' observations at their last context frame (probe readings), in slot order.
        """
        self.model.start_slots(slots, frames, actions)
        last = frames[:, -1]
        agent, block = self.model.probe_frames(last)
        return self._obs(last, agent, block)

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
        return self._obs(out.frames, out.state, out.task_state)

    def _obs(self, frames: np.ndarray, state: np.ndarray, block: np.ndarray) -> WorldObs:
        score, success = self._score(block)
        return WorldObs(
            frames=frames,
            state=state.astype(np.float32),
            task_state=block.astype(np.float32),
            score=score,
            success=success,
            info={},
        )

    def close(self) -> None:
        self.renderer.close()
