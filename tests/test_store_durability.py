"""Power-loss simulation: copies of a store taken while a writer appends must each open,
show a prefix of the committed episodes (bit for bit) and accept appends afterwards.

A copy is what a crash leaves when the page cache survives it. It holds with and without
fsync; what fsync adds (the same on disk after a power cut) a copy cannot show, so
tests/test_store_fsync.py checks which files are fsynced, and when.
"""

from __future__ import annotations

import importlib.util
import random
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from store_factories import start_child

from factory.store import EpisodeStore, appender, chunkfile
from factory.store.appender import Appender
from factory.store.layout import Layout

TESTS = Path(__file__).resolve().parent
CHILD = TESTS / "store_durable_child.py"
SEED = 7


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


writer = _load("store_writer_child", TESTS / "store_writer_child.py")
durable_child = _load("store_durable_child", CHILD)


class Expected:
    """The episodes the writers append: episode ``i`` has ``length(i)`` frames."""

    def __init__(self, n: int) -> None:
        self.lengths = [durable_child.length(i, SEED) for i in range(n)]
        self.ends = np.cumsum(self.lengths)
        eps = [writer.make_episode(i, t) for i, t in enumerate(self.lengths)]
        self.data = {k: np.concatenate([e[k] for e in eps]) for k in writer.SCHEMA.keys}

    def episode(self, i: int) -> dict[str, np.ndarray]:
        return writer.make_episode(i, self.lengths[i])

    def meta(self, i: int) -> Any:
        return writer.make_meta(i, self.lengths[i])


EXPECTED = Expected(400)


def check_copy(copy: Path, low: int, high: int) -> int:
    """``copy`` opens with ``low <= n <= high`` episodes, each equal to what was written,
    recovers, takes one more episode and shows it; returns ``n``."""
    with EpisodeStore.open(copy) as st:
        n = st.n_episodes
        assert low <= n <= high, f"{copy}: {n} episodes, expected {low}..{high}"
        np.testing.assert_array_equal(st.episode_ends, EXPECTED.ends[:n])
        frames = int(EXPECTED.ends[n - 1]) if n else 0
        for key, arr in st.load().items():
            np.testing.assert_array_equal(arr, EXPECTED.data[key][:frames], err_msg=key)
        assert st.all_meta() == [EXPECTED.meta(i) for i in range(n)]
    with EpisodeStore.open(copy, mode="a") as st:
        assert st.n_episodes == n
        st.append_episode(EXPECTED.episode(n), EXPECTED.meta(n))
    with EpisodeStore.open(copy) as st:
        assert st.n_episodes == n + 1
        for key, arr in st.episode(n).to_dict().items():
            np.testing.assert_array_equal(arr, EXPECTED.episode(n)[key], err_msg=key)
    return n


def _new_store(path: Path, durable: bool) -> EpisodeStore:
    return EpisodeStore.create(
        path, writer.SCHEMA, fps=10.0, action_meaning="test", durable=durable
    )


@pytest.mark.parametrize("durable", [False, True], ids=["default", "fsync"])
@pytest.mark.parametrize("direct", [True, False], ids=["direct", "zarr"])
def test_copy_between_data_and_episode_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool, direct: bool
) -> None:
    """At the commit point (data and meta written, ``episode_ends`` not yet): every copy
    shows exactly the episodes before this one, and takes it afterwards."""
    monkeypatch.setattr(appender, "DIRECT", direct)
    path, copies = tmp_path / "s.zarr", []
    real_commit = Appender._commit

    def commit_after_copy(self: Appender, layout: Layout, n_eps: int, n1: int) -> None:
        assert n1 == EXPECTED.ends[n_eps]
        copies.append((n_eps, tmp_path / f"copy{n_eps}"))
        shutil.copytree(path, copies[-1][1])
        real_commit(self, layout, n_eps, n1)

    monkeypatch.setattr(Appender, "_commit", commit_after_copy)
    with _new_store(path, durable) as st:
        for i in range(12):
            st.append_episode(EXPECTED.episode(i), EXPECTED.meta(i))
    monkeypatch.undo()
    assert [n for n, _ in copies] == list(range(12))
    for n, copy in copies:
        assert check_copy(copy, n, n) == n
    assert check_copy(path, 12, 12) == 12


@pytest.mark.parametrize("durable", [False, True], ids=["default", "fsync"])
def test_copy_before_every_file_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    """Before each chunk or ``zarr.json`` write (one encoder thread, so nothing else runs):
    a copy shows exactly the episodes committed so far."""
    monkeypatch.setattr(appender, "THREADS", 1)
    path, copies = tmp_path / "s.zarr", list[tuple[int, Path]]()
    committed = [0]
    real_write = chunkfile.write_atomic

    def write_after_copy(target: Path, payload: Any, fsync: bool = False) -> None:
        copies.append((committed[0], tmp_path / f"copy{len(copies)}"))
        shutil.copytree(path, copies[-1][1])
        real_write(target, payload, fsync)

    st = _new_store(path, durable)
    monkeypatch.setattr(chunkfile, "write_atomic", write_after_copy)
    for i in range(6):
        st.append_episode(EXPECTED.episode(i), EXPECTED.meta(i))
        committed[0] = i + 1
    monkeypatch.undo()
    st.close()
    assert len(copies) >= 6 * 8  # 3 data arrays, meta, ends: a zarr.json and a chunk each
    rng = random.Random(0)
    for n, copy in rng.sample(copies, 16) + copies[-3:]:
        assert check_copy(copy, n, n) == n


def _reader(proc: subprocess.Popen[str], seen: list[int]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("committed"):
            seen.append(int(line.split()[1]))


def _stop_and_copy(proc: subprocess.Popen[str], path: Path, dst: Path, seen: list[int]) -> int:
    """Freeze the writer, copy its store, let it go on; returns the episodes it had reported
    committed before the freeze (a lower bound of what the copy must hold)."""
    proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(0.005)  # lines written before the stop reach the reader thread
        low = len(seen)
        shutil.copytree(path, dst)
    finally:
        proc.send_signal(signal.SIGCONT)
    return low


@pytest.mark.parametrize("durable", [False, True], ids=["default", "fsync"])
def test_copies_at_random_moments_of_a_writer_process(tmp_path: Path, durable: bool) -> None:
    """A writer process appends small episodes; it is frozen (SIGSTOP) at random moments and
    its store copied: a point-in-time image of the files, as a crash leaves them."""
    path, n_max = tmp_path / "s.zarr", len(EXPECTED.lengths) - 1
    proc = start_child(CHILD, path, SEED, n_max, "durable" if durable else "plain")
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    seen: list[int] = []
    copies: list[tuple[int, Path]] = []
    try:
        assert ready.startswith("ready"), f"writer failed: {ready!r} {proc.communicate()[1]}"
        thread = threading.Thread(target=_reader, args=(proc, seen), daemon=True)
        thread.start()
        rng = random.Random(1 + durable)
        while len(copies) < 10 and proc.poll() is None:
            time.sleep(rng.uniform(0.0, 0.15))
            dst = tmp_path / f"copy{len(copies)}"
            copies.append((_stop_and_copy(proc, path, dst, seen), dst))
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert len(copies) >= 5, "the writer finished too soon; raise its episode count"
    counts = [check_copy(copy, low, n_max) for low, copy in copies]
    assert max(counts) > 0, "no copy held an episode; the writer never got going"
    assert counts == sorted(counts)  # later copies never hold fewer episodes
    with EpisodeStore.open(path) as st:
        assert st.durable is durable
