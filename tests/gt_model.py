"""A stand-in world model that is the ground truth itself, for tests with known answers.

Each rollout row is a gym-pusht env reset to the exact world state (agent x, y, block x,
y, angle) of its last context frame, then stepped by the real physics. Whatever a
generator does "inside" this model happens in the world too, so an evaluation that
compares the model with the world must find no difference (up to the float32 states the
model is started from), and a block that nothing touches stays exactly where it is.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from factory.envs.pusht import PushTWorld
from factory.model.world_model import StepOutput
from factory.world import WorldObs


class GroundTruthModel:
    """The rollout members :class:`factory.envs.model_world.ModelWorld` uses, on gym-pusht.

    Frames (B, R, R, 3) uint8 at ``resolution``; the state is the agent xy and the task
    state the block pose, both the env's own. ``batches`` logs the batch size of every
    :meth:`step`.
    """

    kind = "ground_truth"
    cameras: tuple[str, ...] = ()
    has_task_reader = True
    task_reader = "state"
    frame_reader = "state"
    starts_from_states = True
    use_bf16 = False

    def __init__(self, resolution: int = 32) -> None:
        self.resolution = resolution
        self.config = SimpleNamespace(image_shape=(resolution, resolution, 3), name="gt")
        self._rows: list[PushTWorld] = []
        self._last: list[WorldObs] = []
        self.batches: list[int] = []

    @property
    def batch_size(self) -> int:
        return len(self._rows)

    def check_compatible(
        self, action_dim: int | None = None, image_shape: tuple[int, ...] | None = None
    ) -> None:
        assert action_dim in (None, 2), action_dim
        assert image_shape is None or tuple(image_shape)[:2] == (self.resolution,) * 2

    def start(
        self,
        context_frames: Any = None,
        context_actions: Any = None,
        seed: int = 0,
        states: Any = None,
    ) -> None:
        """Start one row per context from its states (B, K', 5) (the last one counts)."""
        assert states is not None, "the ground truth starts from world states"
        self.close()
        self._rows = [PushTWorld(1, self.resolution) for _ in range(len(states))]
        self._last = [_reset(w, s) for w, s in zip(self._rows, states, strict=True)]

    def start_slots(
        self,
        slots: Any,
        context_frames: Any = None,
        context_actions: Any = None,
        states: Any = None,
    ) -> None:
        assert states is not None, "the ground truth starts from world states"
        for r, s in zip(np.asarray(slots).reshape(-1), states, strict=True):
            self._last[int(r)] = _reset(self._rows[int(r)], s)

    def keep_slots(self, slots: Any) -> None:
        keep = [int(r) for r in np.asarray(slots).reshape(-1)]
        for r in set(range(len(self._rows))) - set(keep):
            self._rows[r].close()
        self._rows = [self._rows[r] for r in keep]
        self._last = [self._last[r] for r in keep]

    def step(self, actions: Any) -> StepOutput:
        acts = np.asarray(actions, np.float32)
        self._last = [w.step(a[None]) for w, a in zip(self._rows, acts, strict=True)]
        self.batches.append(len(acts))
        out = self._stack(range(len(self._rows)))
        return StepOutput(out.frames, out.state, out.task_state, latents=None)  # type: ignore[arg-type]

    def last_reading(self, rows: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        out = self._stack(range(len(self._rows)) if rows is None else rows)
        return out.state, out.task_state

    def _stack(self, rows: Any) -> WorldObs:
        picked = [self._last[int(r)] for r in rows]
        return WorldObs(
            frames=np.concatenate([o.frames for o in picked]),
            state=np.concatenate([o.state for o in picked]),
            task_state=np.concatenate([o.task_state for o in picked]),
            score=np.concatenate([o.score for o in picked]),
            success=np.concatenate([o.success for o in picked]),
        )

    def close(self) -> None:
        for w in self._rows:
            w.close()
        self._rows, self._last = [], []


def _reset(world: PushTWorld, states: Any) -> WorldObs:
    """Reset ``world`` to the last of a context's world states (K', 5)."""
    return world.reset(configs=np.asarray(states[-1], np.float64)[None])
