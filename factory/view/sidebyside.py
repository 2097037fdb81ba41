"""A generated episode next to the ground truth replaying it: ``eval transfer``, per step.

:func:`factory.eval.transfer.replay` resets the ground truth to the episode's initial state
and applies its actions open loop; here it steps a :class:`RecordingWorld`, which keeps
every observation, so the model's frames and block poses can be set against the real ones
frame by frame (the alignment of that module: frame ``t`` of both is the state after
``t`` actions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from factory.envs import make_world
from factory.envs.scoring import scorer_for
from factory.errors import FactoryError
from factory.store import EpisodeStore
from factory.view.table import POSE_KEY, coverage_curve
from factory.world import World, WorldObs, WorldSpec

if TYPE_CHECKING:  # factory.eval imports torch: only a replay needs it
    from factory.eval.transfer import TransferEpisode


class RecordingWorld:
    """A batch-1 :class:`World` that passes calls to ``world`` and keeps what it returns:
    the observations since the last reset (a reset starts the list again)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.spec: WorldSpec = world.spec
        self.batch_size: int = world.batch_size
        self.seen: list[WorldObs] = []

    def reset(self, seeds: np.ndarray | None = None, configs: np.ndarray | None = None) -> WorldObs:
        obs = self.world.reset(seeds=seeds, configs=configs)
        self.seen = [obs]
        return obs

    def step(self, actions: np.ndarray) -> WorldObs:
        obs = self.world.step(actions)
        self.seen.append(obs)
        return obs

    def close(self) -> None:
        self.world.close()


@dataclass(frozen=True)
class SideBySide:
    """One generated episode of ``T`` frames and its ground-truth replay.

    model_frames, real_frames: (T, H, W, 3) uint8; model_pose, real_pose: (T, 3) block
    x, y (board px), angle (rad); position_err_px, angle_err_deg: (T,) float32 per frame;
    model_coverage, real_coverage: (T,) float32 goal coverage; ``row``: the episode's row
    of :func:`factory.eval.transfer.replay` (reset used, outcomes, final errors)."""

    index: int
    model_frames: np.ndarray
    real_frames: np.ndarray
    model_pose: np.ndarray
    real_pose: np.ndarray
    position_err_px: np.ndarray
    angle_err_deg: np.ndarray
    model_coverage: np.ndarray
    real_coverage: np.ndarray
    row: dict[str, Any]

    @property
    def nbytes(self) -> int:
        return int(self.model_frames.nbytes + self.real_frames.nbytes)

    def to_json(self) -> dict[str, Any]:
        """Everything but the frames, as JSON-able lists."""
        return {
            "index": self.index,
            "steps": len(self.model_pose),
            "model_pose": self.model_pose.tolist(),
            "real_pose": self.real_pose.tolist(),
            "position_err_px": self.position_err_px.tolist(),
            "angle_err_deg": self.angle_err_deg.tolist(),
            "model_coverage": self.model_coverage.tolist(),
            "real_coverage": self.real_coverage.tolist(),
            "transfer": self.row,
        }


@dataclass(frozen=True)
class Generated:
    """What a comparison needs of a generated episode: the replay target, its frames
    (T, H, W, 3) uint8 and the model's block poses (T, 3) float64."""

    target: TransferEpisode
    frames: np.ndarray
    poses: np.ndarray


def read_generated(store: EpisodeStore, index: int, env: str | None = None) -> Generated:
    """Episode ``index`` of ``store`` as a :class:`Generated` (``env``: default the one
    recorded). Refuses an episode that was not generated inside the model from a seeded
    reset, or a store without images or block poses."""
    from factory.eval import transfer

    if "image" not in store.schema.keys or POSE_KEY not in store.schema.keys:
        raise FactoryError(f"{store.path} needs data/image and data/{POSE_KEY} to compare")
    episode = store.episode(index)
    target = transfer.seeded_episode(episode, env)
    if target is None:
        raise FactoryError(
            f"episode {index} was not generated inside the model from a seeded reset "
            f"(source {episode.meta.source}); only those can be replayed in the ground truth"
        )
    if target.env != "pusht":
        raise FactoryError(
            f"the model-vs-real replay shows a block's pose and coverage (PushT); episode "
            f"{index} is of {target.env}: score it with `factory eval transfer` instead"
        )
    frames = np.asarray(episode["image"])
    return Generated(target, frames, np.asarray(episode[POSE_KEY], np.float64))


def compare(gen: Generated) -> SideBySide:
    """Replay the episode open loop in a fresh ground-truth world and line the two up."""
    from factory.eval import metrics, transfer

    model_pose = gen.poses
    world = RecordingWorld(make_world(gen.target.env, batch_size=1, resolution=gen.frames.shape[1]))
    try:
        row = transfer.replay(world, gen.target)
    finally:
        world.close()
    seen = world.seen[: len(gen.frames)]  # frame t: after t actions (reset + T-1 steps)
    real_pose = np.stack([obs.task_state[0] for obs in seen]).astype(np.float64)
    position = metrics.position_error(model_pose[:, :2], real_pose[:, :2])
    angle = metrics.angle_error_deg(model_pose[:, 2], real_pose[:, 2])
    return SideBySide(
        index=gen.target.index,
        model_frames=gen.frames,
        real_frames=np.stack([obs.frames[0] for obs in seen]),
        model_pose=model_pose.astype(np.float32),
        real_pose=real_pose.astype(np.float32),
        position_err_px=np.asarray(position, np.float32),
        angle_err_deg=np.asarray(angle, np.float32),
        model_coverage=coverage_curve(model_pose, scorer_for(gen.target.env)),
        real_coverage=np.array([obs.score[0] for obs in seen], np.float32),
        row=row,
    )


def side_by_side(store: EpisodeStore, index: int, env: str | None = None) -> SideBySide:
    """Episode ``index`` of ``store`` next to its replay in the ground truth (see
    :func:`read_generated` and :func:`compare`)."""
    return compare(read_generated(store, index, env))
