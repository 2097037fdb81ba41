"""Stand-in pile world models for tests with known answers: the ground truth itself, and
the ground truth with every disc drifting ``drift_px`` per step.

Each rollout row is a :class:`PileWorld` reset to the first of its context's world states
(agent x, y, then every disc's x, y) and stepped through the context's actions, so that
it is where the real episode was at the last context frame (a reset is at rest; a
window that starts an episode starts at rest too). It then steps the real physics. The
drifting stand-in reports every disc ``drift_px * t`` px to the right of where the
physics has it after ``t`` steps since the row's start and renders both cameras there,
so its disc error at horizon ``h`` is ``drift_px * h`` (while discs stay farther apart
than twice that).

It is a whole :class:`~factory.model.protocol.RolloutModel` of the pile world (its config
names it), so the generation engine can run it: ``start_slots`` restarts rows exactly as
``start`` starts them (each from its own context, its drift clock at 0), ``keep_slots``
drops rows and ``last_views`` renders the other cameras at the rows' current scenes.

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
    """The rollout protocol on the pile ground truth (see the module).

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
        self.config = SimpleNamespace(
            image_shape=(resolution, resolution, 3), name="pile", world="pile"
        )
        self._rows: list[PileWorld] = []
        self._t: np.ndarray | int = np.zeros(0, np.int64)
        """Steps since each row's start (B,) (a subclass may keep one count for all)."""
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
        states = self._context_states(context_frames, states)
        self.close()
        self._rows = [PileWorld(1, self.resolution) for _ in range(len(states))]
        self._t = np.zeros(len(states), np.int64)
        self._scenes = np.zeros((len(states), states.shape[-1]))
        self.start_slots(list(range(len(states))), context_frames, context_actions, states)

    def start_slots(
        self,
        slots: Any,
        context_frames: Any = None,
        context_actions: Any = None,
        states: Any = None,
    ) -> None:
        """Restart rows ``slots`` (n,) as :meth:`start` starts them: each reset to the first
        of its context's states (n, K', 2 + D) (or the frames' reading) and stepped through
        its actions (n, K'-1, 2); the other rows go on."""
        rows = [int(r) for r in np.asarray(slots, np.int64).reshape(-1)]
        states = self._context_states(context_frames, states)
        acts = np.zeros((len(rows), 0, 2)) if context_actions is None else context_actions
        for r, s, a in zip(rows, states, np.asarray(acts, np.float32), strict=True):
            world = self._rows[r]
            world.reset(configs=s[0][None])
            for action in a:
                world.step(action[None])
            self._scenes[r] = world.scenes()[0]
        ages = np.asarray(self._t)
        ages[rows] = 0
        self._t = ages

    def keep_slots(self, slots: Any) -> None:
        """Keep only rows ``slots`` (in that order)."""
        keep = [int(r) for r in np.asarray(slots, np.int64).reshape(-1)]
        for r in set(range(len(self._rows))) - set(keep):
            self._rows[r].close()
        self._rows = [self._rows[r] for r in keep]
        self._t = np.asarray(self._t)[keep]
        self._scenes = self._scenes[keep]

    def _context_states(self, context_frames: Any, states: Any) -> np.ndarray:
        """The contexts' world states (B, K', 2 + D) float64: ``states``, or the lookup
        reader's reading of the frames (B, K', H, W, 3)."""
        if states is None:
            frames = np.asarray(context_frames)
            agent, discs = self.read_frames(frames.reshape(-1, *frames.shape[2:]))
            states = np.concatenate([agent, discs], 1).reshape(*frames.shape[:2], -1)
        return np.asarray(states, np.float64)

    def step(self, actions: Any) -> StepOutput:
        for w, a in zip(self._rows, np.asarray(actions, np.float32), strict=True):
            w.step(a[None])
        self._t = self._t + 1
        scenes = np.concatenate([w.scenes() for w in self._rows])
        scenes[:, 2::2] += self.drift_px * np.reshape(self._t, (-1, 1))
        self._scenes = scenes
        views = self._render(scenes)
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

    def last_views(self, rows: list[int] | None = None) -> dict[str, np.ndarray]:
        """The side camera (n, R, R, 3) at the current scenes of ``rows`` (default all)."""
        if not self.side:
            return {}
        views = self._render(self._scenes if rows is None else self._scenes[rows])
        return {"side": np.stack([v["side"] for v in views])}

    def _render(self, scenes: np.ndarray) -> list[dict[str, np.ndarray]]:
        """Both cameras of every scene (B, 2 + D), each frame remembered for the reader."""
        views = [render_views(s, self.resolution) for s in scenes]
        for s, v in zip(scenes, views, strict=True):
            for frame in v.values():
                self._seen[_key(frame)] = s
        return views

    def reconstruct(self, frames: np.ndarray, states: np.ndarray | None) -> np.ndarray:
        assert states is not None, "the stand-in renders the true state"
        return np.stack([render_views(s, self.resolution)["top"] for s in states])

    def render_views(self, states: np.ndarray) -> dict[str, np.ndarray]:
        """Every camera's frames (B, R, R, 3) of the true states (B, 2 + D)."""
        views = [render_views(s, self.resolution) for s in np.asarray(states)]
        return {c: np.stack([v[c] for v in views]) for c in self.cameras}

    def close(self) -> None:
        for w in self._rows:
            w.close()
        self._rows = []
