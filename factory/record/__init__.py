"""Recording episodes: the output store, the one episode recorder, the one episode runner
(lockstep batches and refilling streams)."""

from factory.record.output import (
    check_output,
    close_output,
    done_episodes,
    open_output,
    store_attrs,
    store_schema,
)
from factory.record.recorder import EpisodeRecorder, EpisodeResult, Policy
from factory.record.runner import (
    EpisodeRunner,
    EpisodeSpec,
    LiveEpisode,
    Slots,
    Start,
    run_episode,
)

__all__ = [
    "EpisodeRecorder",
    "EpisodeResult",
    "EpisodeRunner",
    "EpisodeSpec",
    "LiveEpisode",
    "Policy",
    "Slots",
    "Start",
    "check_output",
    "close_output",
    "done_episodes",
    "open_output",
    "run_episode",
    "store_attrs",
    "store_schema",
]
