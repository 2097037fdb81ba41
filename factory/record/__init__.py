"""Recording episodes: the output store, the one episode recorder, the batched runner."""

from factory.record.output import (
    check_output,
    done_episodes,
    open_output,
    store_attrs,
    store_schema,
)
from factory.record.recorder import EpisodeRecorder, EpisodeResult, Policy
from factory.record.runner import EpisodeRunner, EpisodeSpec, run_episode

__all__ = [
    "EpisodeRecorder",
    "EpisodeResult",
    "EpisodeRunner",
    "EpisodeSpec",
    "Policy",
    "check_output",
    "done_episodes",
    "open_output",
    "run_episode",
    "store_attrs",
    "store_schema",
]
