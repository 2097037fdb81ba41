"""Stand-in pile world models for tests with known answers: the ground truth itself, and
the ground truth with every disc drifting ``drift_px`` per step.

Each rollout row is a :class:`PileWorld` reset to the first of its context's world states
(agent x, y, then every disc's x, y) and stepped through the context's actions, so that
it is where the real episode was at the last context frame (a reset is at rest; a
window that starts an episode starts at rest too). It then steps the real physics. The
drifting stand-in reports every disc ``drift_px * t`` px to the right of where the
physics has it after ``t`` steps and renders both cameras there, so its disc error at
horizon ``h`` is ``drift_px * h`` (while discs stay farther apart than twice that).

The frame reader is a lookup: every frame the stand-in was shown (:meth:`learn`) or
rendered maps to the scene it shows, so it reads perfectly and reads nothing else.
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from factory.envs.pile import PileWorld
from factory.envs.pile_render import render_views
from factory.model.world_model import StepOutput
from factory.store import EpisodeStore


def _key(frame: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(frame).tobytes(), digest_size=16).digest()


class PileStandIn:
    """The rollout members fidelity uses, on the pile ground truth (see the module).

    Frames (B, R, R, 3) uint8 of the top camera, ``views["side"]`` of the side one; the
    state is the agent xy and the task state every disc's xy (as reported).
    """

    has_task_reader = True
    task_reader = "state"
    frame_reader = "lookup"
    reconstructs = "renderer at the true state"
    starts_from_states = True
    use_bf16 = False
    context = 3
    device = torch.device("cpu")

    def __init__(self, resolution: int, drift_px: float = 0.0, side: bool = True) -> None:
        self.resolution, self.drift_px, self.side = resolution, float(drift_px), side
        self.kind = "pile_ground_truth" if drift_px == 0 else "pile_drift"
        self.config = SimpleNamespace(image_shape=(resolution, resolution, 3), name="pile")
        self._rows: list[PileWorld] = []
        self._t = 0
        self._scenes = np.zeros((0, 62))
        self._seen: dict[bytes, np.ndarray] = {}

    @property
    def batch_size(self) -> int:
        return len(self._rows)

    @property
    def cameras(self) -> tuple[str, ...]:
        return ("top", "side") if self.side else ("top",)

    def check_compatible(
        self, action_dim: int | None = None, image_shape: tuple[int, ...] | None = None
    ) -> None:
        assert action_dim in (None, 2), action_dim
        assert image_shape is None or tuple(image_shape)[:2] == (self.resolution,) * 2

    def learn(self, store: EpisodeStore) -> None:
        """Remember every frame of ``store`` (both cameras) and the scene it shows."""
        for i in range(store.n_episodes):
            ep = store.episode(i)
            scenes = np.concatenate([ep["state"][:, :2], ep["task_state"]], axis=1)
            for cam in ("image", "image_side"):
                for frame, scene in zip(ep[cam], scenes, strict=True):
                    self._seen[_key(frame)] = scene

    def read_frames(self, frames: Any) -> tuple[np.ndarray, np.ndarray]:
        scenes = np.stack([self._seen[_key(f)] for f in np.asarray(frames)])
        return scenes[:, :2].astype(np.float32), scenes[:, 2:].astype(np.float32)

    def start(
        self,
        context_frames: Any = None,
        context_actions: Any = None,
        seed: int = 0,
        states: Any = None,
    ) -> None:
        """One row per context from its states (B, K', 2 + D), or the frames' reading."""
        if states is None:
            frames = np.asarray(context_frames)
            agent, discs = self.read_frames(frames.reshape(-1, *frames.shape[2:]))
            states = np.concatenate([agent, discs], 1).reshape(*frames.shape[:2], -1)
        self.close()
        states = np.asarray(states, np.float64)
        self._rows = [PileWorld(1, self.resolution) for _ in range(len(states))]
        for w, s in zip(self._rows, states, strict=True):
            w.reset(configs=s[0][None])
        acts = np.zeros((len(states), 0, 2)) if context_actions is None else context_actions
        for k in range(np.asarray(acts).shape[1]):
            for w, a in zip(self._rows, np.asarray(acts)[:, k], strict=True):
                w.step(np.asarray(a, np.float32)[None])
        self._t = 0
        self._scenes = np.concatenate([w.scenes() for w in self._rows])

    def step(self, actions: Any) -> StepOutput:
        for w, a in zip(self._rows, np.asarray(actions, np.float32), strict=True):
            w.step(a[None])
        self._t += 1
        scenes = np.concatenate([w.scenes() for w in self._rows])
        scenes[:, 2::2] += self.drift_px * self._t
        self._scenes = scenes
        views = [render_views(s, self.resolution) for s in scenes]
        for s, v in zip(scenes, views, strict=True):
            for frame in v.values():
                self._seen[_key(frame)] = s
        return StepOutput(
            frames=np.stack([v["top"] for v in views]),
            state=scenes[:, :2].astype(np.float32),
            task_state=scenes[:, 2:].astype(np.float32),
            latents=None,  # type: ignore[arg-type]
            views={"side": np.stack([v["side"] for v in views])} if self.side else {},
        )

    def step_many(self, actions: Any) -> list[StepOutput]:
        return [self.step(np.asarray(actions)[:, t]) for t in range(np.asarray(actions).shape[1])]

    def last_reading(self, rows: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        s = self._scenes if rows is None else self._scenes[rows]
        return s[:, :2].astype(np.float32), s[:, 2:].astype(np.float32)

    def reconstruct(self, frames: np.ndarray, states: np.ndarray | None) -> np.ndarray:
        assert states is not None, "the stand-in renders the true state"
        return np.stack([render_views(s, self.resolution)["top"] for s in states])

    def close(self) -> None:
        for w in self._rows:
            w.close()
        self._rows = []
