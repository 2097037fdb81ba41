"""The recording node: a fixed-rate loop that reads an action source, steps a ``World``
(batch 1), shows the frame and records episodes into an episode store.

Each tick (period ``1 / fps``):

1. poll the source for commands (start, stop and save, discard, reset, quit) and apply them;
2. while recording, take the next action, record the observation with it (the store's
   convention: frame ``t`` is the observation before action ``t``) and step the world;
3. show the frame with the HUD, then sleep to the tick's deadline. A tick whose frame is
   shown after its deadline is *late*; the schedule then restarts from now, so a slow tick
   never causes a burst of catch-up ticks.

Input-to-display latency is the time from the sampling of the input behind an action to
the display of the frame that action produced. Episode boundaries (the commit to the
store, the reset of the world) run between ticks and restart the schedule; their cost
shows in ``commit_ms_*`` and lowers ``achieved_fps`` (ticks per wall-clock second).

Every finished episode is committed at once: a crash or Ctrl-C loses at most the episode
in progress. A device that disconnects ends the episode in progress as discarded and the
session with ``end_reason="device_disconnected"``.

The node keeps its own loop rather than the episode runner
(:class:`factory.record.EpisodeRunner`, which steps as fast as the world answers and ends
an episode by its step budget or success): it runs at wall-clock rate with an operator in
the loop, who starts, stops, saves and discards episodes. It records through the same
:class:`~factory.record.recorder.EpisodeRecorder`.
"""

from __future__ import annotations

import logging
import math
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psutil

from factory.errors import FactoryError
from factory.record.recorder import EpisodeRecorder
from factory.store import EpisodeMeta, EpisodeStore
from factory.world import World, WorldObs
from teleop.sources.base import ActionSource, Command, DeviceDisconnected, InitialCondition
from teleop.viewers.base import Hud, Viewer

log = logging.getLogger(__name__)

MB = 1024 * 1024


@dataclass(frozen=True)
class NodeConfig:
    """The loop's settings.

    steps: frames per episode at most (the node stops and saves there; success as the world
    scores it); episodes: end the session after this many saved episodes (None: until the
    operator quits); max_ticks: end after this many ticks (tests); task: the operator's task
    string (default: the world's); source: EpisodeMeta.source of the recorded episodes.
    """

    fps: float = 15.0
    steps: int = 300
    episodes: int | None = None
    max_ticks: int | None = None
    task: str = ""
    model_id: str | None = None
    source: str = "teleop"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fps) and 0 < self.fps <= 1000):
            raise FactoryError(f"--fps must be in (0, 1000], got {self.fps}")
        if self.steps < 1:
            raise FactoryError(f"--steps must be >= 1, got {self.steps}")
        if self.episodes is not None and self.episodes < 1:
            raise FactoryError(f"--episodes must be >= 1, got {self.episodes}")


class Timing:
    """Per recorded frame: tick work (ms), input-to-display latency (ms), and lateness."""

    def __init__(self) -> None:
        self.work_ms = array("d")
        self.latency_ms = array("d")
        self.late = 0

    def add(self, work_ms: float, latency_ms: float, late: bool) -> None:
        self.work_ms.append(work_ms)
        self.latency_ms.append(latency_ms)
        self.late += int(late)

    def summary(self) -> dict[str, float]:
        n = len(self.work_ms)
        lat = np.frombuffer(self.latency_ms, dtype=np.float64) if n else np.zeros(1)
        work = np.frombuffer(self.work_ms, dtype=np.float64) if n else np.zeros(1)
        return {
            "late_frames": self.late,
            "late_frac": self.late / n if n else 0.0,
            "latency_ms_p50": float(np.percentile(lat, 50)),
            "latency_ms_p99": float(np.percentile(lat, 99)),
            "latency_ms_max": float(lat.max()),
            "tick_ms_p50": float(np.percentile(work, 50)),
            "tick_ms_p99": float(np.percentile(work, 99)),
        }


class RateClock:
    """Deadlines every ``1 / fps`` seconds; :meth:`wait` sleeps to the next one."""

    def __init__(self, fps: float) -> None:
        self.period = 1.0 / fps
        self.deadline = time.perf_counter() + self.period

    def wait(self) -> bool:
        """Sleep to the deadline; True (late) if it had already passed."""
        now = time.perf_counter()
        if now > self.deadline:
            self.deadline = now + self.period
            return True
        time.sleep(self.deadline - now)
        self.deadline += self.period
        return False

    def restart(self) -> None:
        self.deadline = time.perf_counter() + self.period


@dataclass
class _Episode:
    """The episode in progress: its recorder and its timing."""

    initial: InitialCondition
    rec: EpisodeRecorder = field(default_factory=EpisodeRecorder)
    timing: Timing = field(default_factory=Timing)

    @property
    def started(self) -> float:
        return self.rec.started

    def __len__(self) -> int:
        return len(self.rec)


def reset_world(world: World, initial: InitialCondition) -> WorldObs:
    """Reset ``world`` (batch 1) to ``initial``: stored frames (a world model starts from
    them, and from the config as their world state when both are known: a state kind
    starts from it exactly), else an explicit config, else the seed."""
    start = getattr(world, "reset_from_context", None)
    if initial.frames is not None and start is not None:
        states = None
        if initial.config is not None and len(initial.frames) == 1:  # the config is frame 0's
            states = np.asarray(initial.config, np.float32)[None, None]
        obs: WorldObs = start(initial.frames[None], None, seed=initial.seed, states=states)
        return obs
    if initial.config is not None:
        return world.reset(configs=np.asarray(initial.config, np.float64)[None])
    return world.reset(seeds=np.array([initial.seed]))


def rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / MB


class RecordingNode:
    """Runs one teleoperation session; :meth:`run` returns its summary."""

    def __init__(
        self,
        world: World,
        source: ActionSource,
        viewer: Viewer,
        store: EpisodeStore,
        initials: Iterator[InitialCondition],
        config: NodeConfig,
    ) -> None:
        self.world, self.source, self.viewer, self.store = world, source, viewer, store
        self.initials = initials
        self.cfg = config
        self._obs: WorldObs | None = None
        self._initial: InitialCondition | None = None
        self._episode: _Episode | None = None
        self._timing = Timing()
        self._commit_ms: list[float] = []
        self._saved = self._frames = self._discarded = self._ticks = 0
        self._quit = False
        self._interrupted = False  # set by interrupt(): raised at the next tick
        self._end_reason = "done"
        self._message = ""
        self._fps = 0.0
        self._last_tick = 0.0
        self._rss_base: float | None = None

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Run until the episode count, the tick limit, a quit, Ctrl-C or a disconnect."""
        rss_start = rss_mb()
        self._reset(advance=True)
        began = time.perf_counter()
        clock = RateClock(self.cfg.fps)
        try:
            while not self._finished():
                if self._interrupted:
                    raise KeyboardInterrupt
                self._tick(clock)
        except DeviceDisconnected as err:
            self._drop("device disconnected", quiet=True)
            self._end_reason, self._message = "device_disconnected", str(err)
            log.info("%s", err)  # the caller reports it
        except KeyboardInterrupt:
            self._drop("interrupted")
            self._end_reason = "interrupted"
            log.warning("interrupted: %d episodes committed are kept", self._saved)
        summary = self._summary(time.perf_counter() - began, rss_start)
        log.info("teleop session: %s", summary)
        return summary

    def interrupt(self) -> None:
        """End the session at the next tick as Ctrl-C does (a signal handler's
        KeyboardInterrupt can be swallowed when it lands inside a C callback, such as
        pymunk's drawing in gym-pusht's render)."""
        self._interrupted = True

    def _finished(self) -> bool:
        cfg = self.cfg
        if self._quit:
            return True
        if cfg.episodes is not None and self._saved >= cfg.episodes:
            return True
        return cfg.max_ticks is not None and self._ticks >= cfg.max_ticks

    def _tick(self, clock: RateClock) -> None:
        start = time.perf_counter()
        for command in self.source.poll():
            if self._apply(command):
                clock.restart()
        if self._quit:
            return
        assert self._obs is not None
        stamp: float | None = None
        if self._episode is not None:
            action = self.source.act(self._obs.item(0), clock.period)
            self._episode.rec.record(self._obs.item(0), action.value)
            self._obs = self.world.step(np.asarray(action.value, np.float32)[None])
            self._episode.rec.observe(self._obs.item(0))
            stamp = action.stamp
        shown = self.viewer.show(self._obs.frames[0], self._hud())
        late = clock.wait()
        self._count_tick()
        if self._episode is not None and stamp is not None:
            work_ms, latency_ms = (shown - start) * 1e3, (shown - stamp) * 1e3
            self._episode.timing.add(work_ms, latency_ms, late)
            self._timing.add(work_ms, latency_ms, late)
            if len(self._episode) >= self.cfg.steps:
                self._stop(None, "steps")
                clock.restart()

    def _count_tick(self) -> None:
        now = time.perf_counter()
        if self._ticks and now > self._last_tick:
            rate = 1.0 / (now - self._last_tick)
            self._fps = rate if self._fps == 0 else 0.9 * self._fps + 0.1 * rate
        self._last_tick = now
        self._ticks += 1

    # -- episode controls -------------------------------------------------------------------
    def _apply(self, command: Command) -> bool:
        """Apply one command; True if it crossed an episode boundary (a commit or reset)."""
        recording = self._episode is not None
        if command in (Command.START, Command.TOGGLE) and not recording:
            self._start()
            return False
        if not recording and command not in (Command.RESET, Command.QUIT):
            return False
        if command is Command.TOGGLE:
            self._stop(None, "toggle")
        elif command is Command.STOP_SUCCESS:
            self._stop(True, "operator")
        elif command is Command.STOP_FAILURE:
            self._stop(False, "operator")
        elif command in (Command.DISCARD, Command.LOST):
            reason = "the operator disconnected" if command is Command.LOST else "discarded"
            self._drop(reason, quiet=command is Command.DISCARD)
            self._reset(advance=False)
        elif command is Command.RESET:
            self._drop("reset", quiet=True)
            self._reset(advance=True)
        elif command is Command.QUIT:
            self._drop("quit", quiet=True)
            self._quit, self._end_reason = True, "quit"
        return True

    def _start(self) -> None:
        assert self._obs is not None and self._initial is not None
        self.source.begin(self._obs.item(0), self._initial)
        self._episode = _Episode(initial=self._initial)
        self._message = "recording"

    def _drop(self, reason: str, quiet: bool = False) -> None:
        """Discard the episode in progress, if any (logged as a warning unless ``quiet``)."""
        episode, self._episode = self._episode, None
        if episode is None:
            return
        self.source.end()
        self._discarded += 1
        self._message = f"episode dropped ({reason}, {len(episode)} frames)"
        log.log(logging.INFO if quiet else logging.WARNING, "%s", self._message)

    def _stop(self, success: bool | None, how: str) -> None:
        """Stop and commit the episode in progress, then reset to the next initial state."""
        episode, self._episode = self._episode, None
        assert episode is not None
        self.source.end()
        if len(episode) == 0:
            self._message = "nothing recorded yet; episode not saved"
            self._reset(advance=False)
            return
        ok = episode.rec.succeeded if success is None else success
        began = time.perf_counter()
        self.store.append_episode(episode.rec.data(), self._meta(episode, ok, how))
        self._commit_ms.append((time.perf_counter() - began) * 1e3)
        self._saved += 1
        self._frames += len(episode)
        if self._rss_base is None:
            self._rss_base = rss_mb()
        outcome = "success" if ok else "failure"
        self._message = f"saved episode {self._saved} ({outcome}, {len(episode)} frames)"
        log.info("%s", self._message)
        self._reset(advance=True)

    def _reset(self, advance: bool) -> None:
        if advance or self._initial is None:
            try:
                self._initial = next(self.initials)
            except StopIteration:
                raise FactoryError("no initial conditions left to reset to") from None
        self._obs = reset_world(self.world, self._initial)

    # -- records ----------------------------------------------------------------------------
    def _meta(self, episode: _Episode, success: bool, how: str) -> EpisodeMeta:
        assert self._obs is not None
        duration = time.perf_counter() - episode.started
        return episode.rec.meta(
            source=self.cfg.source,
            generator=self.source.name,
            generator_params=self.source.params(),
            seed=int(episode.initial.seed),
            model_id=self.cfg.model_id,
            task=self.cfg.task or self.world.spec.task,
            world=self.world.spec.name,
            success=bool(success),
            score=float(self._obs.score[0]),
            extra={
                "device": self.source.device,
                "initial": episode.initial.label,
                "stop": how,
                "world_success": episode.rec.succeeded,
                "target_fps": self.cfg.fps,
                "achieved_fps": len(episode) / duration if duration > 0 else 0.0,
                "rss_mb": rss_mb(),
                **episode.timing.summary(),
            },
        )

    def _hud(self) -> Hud:
        assert self._obs is not None
        episode = self._episode
        return Hud(
            device=self.source.device,
            episode=self._saved + 1,
            saved=self._saved,
            recording=episode is not None,
            elapsed_s=time.perf_counter() - episode.started if episode is not None else 0.0,
            frames=len(episode) if episode is not None else 0,
            fps=self._fps,
            score=float(self._obs.score[0]),
            message=self._message,
        )

    def _summary(self, wall_s: float, rss_start: float) -> dict[str, Any]:
        rss_end = rss_mb()
        base = self._rss_base if self._rss_base is not None else rss_start
        commits = self._commit_ms or [0.0]
        return {
            "episodes": self._saved,
            "frames": self._frames,
            "discarded": self._discarded,
            "ticks": self._ticks,
            "recorded_ticks": len(self._timing.work_ms),
            "target_fps": self.cfg.fps,
            "achieved_fps": self._ticks / wall_s if wall_s > 0 else 0.0,
            **self._timing.summary(),
            "commit_ms_mean": float(np.mean(commits)),
            "commit_ms_max": float(np.max(commits)),
            "rss_start_mb": rss_start,
            "rss_end_mb": rss_end,
            "rss_growth_mb": rss_end - base,
            "wall_s": wall_s,
            "end_reason": self._end_reason,
            "message": self._message,
        }
