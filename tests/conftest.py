"""Shared test set-up: quiet, offline, deterministic, and light on the 2 CI cores."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

import pytest
import torch
from store_factories import LENGTHS, make_episode, make_meta, new_store

torch.set_num_threads(1)  # tiny models; OpenMP spin-waits stall on a shared 2-core CPU


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu``-marked tests where CUDA is absent, whatever ``-m`` selects."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    """One local Ray for the whole session (2 CPUs, no dashboard)."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=256 * 2**20,
            logging_level=logging.WARNING,
        )
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """A small store of six episodes (lengths ``LENGTHS``) from ``store_factories``."""
    path = tmp_path / "store"
    with new_store(path) as st:
        for i, n in enumerate(LENGTHS):
            assert st.append_episode(make_episode(i, n), make_meta(i)) == i
    return path
