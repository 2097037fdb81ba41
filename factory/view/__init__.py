"""The data logic of ``factory view``: the episode table, thumbnails and filmstrips (PNG,
made on demand and cached), and generated episodes side by side with their ground-truth
replay. numpy only: the web server lives in :mod:`dataview`."""

from factory.view.cache import LruCache
from factory.view.png import Sheet, encode_png
from factory.view.sidebyside import RecordingWorld, SideBySide, side_by_side
from factory.view.store_view import StoreView, ViewConfig
from factory.view.table import EpisodeRow, episode_rows

__all__ = [
    "EpisodeRow",
    "LruCache",
    "RecordingWorld",
    "Sheet",
    "SideBySide",
    "StoreView",
    "ViewConfig",
    "encode_png",
    "episode_rows",
    "side_by_side",
]
