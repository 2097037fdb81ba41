"""Recording episodes: the output store, the one episode recorder, the batched runner.

:mod:`factory.record.runner` is imported on its own (it builds on :mod:`factory.gen`).
"""

from factory.record.output import (
    check_output,
    done_episodes,
    open_output,
    store_attrs,
    store_schema,
)
from factory.record.recorder import EpisodeRecorder, EpisodeResult

__all__ = [
    "EpisodeRecorder",
    "EpisodeResult",
    "check_output",
    "done_episodes",
    "open_output",
    "store_attrs",
    "store_schema",
]
