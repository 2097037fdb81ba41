"""Crash recovery: SIGKILL a writer at random moments, then reopen and check every
reported episode is there bit for bit, nothing partial is visible, and appends work again.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import zarr
from store_factories import arr, start_child

from factory.errors import StoreError
from factory.store import EpisodeStore
from factory.store.chunkfile import DirectArray
from factory.store.layout import PARTIAL_RE

CHILD = Path(__file__).with_name("store_writer_child.py")
ROUNDS = 12


def _child_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("store_writer_child", CHILD)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


child = _child_module()


def _files(path: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``path`` -> (size, mtime_ns)."""
    out = {}
    for root, _dirs, names in os.walk(path):
        for name in names:
            st = os.stat(os.path.join(root, name))
            out[os.path.relpath(os.path.join(root, name), path)] = (st.st_size, st.st_mtime_ns)
    return out


def _run_and_kill(store: Path, seed: int, delay: float) -> list[int]:
    """Start a writer, SIGKILL it ``delay`` s after it holds the lock; return the episode
    indices it reported committed."""
    proc = start_child(CHILD, store, seed)
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    if not ready.startswith("ready"):
        proc.kill()
        raise AssertionError(f"writer failed to start: {ready!r} {proc.communicate()[1]}")
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    out = proc.stdout.read()  # not communicate(): it would skip what readline() buffered
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "writer exited before the kill; raise the load"
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith("committed")]


def _check_episode(st: EpisodeStore, i: int) -> None:
    ep = st.episode(i)
    assert ep.meta.seed == i and ep.meta.extra["length"] == ep.length
    for key, want in child.make_episode(i, ep.length).items():
        np.testing.assert_array_equal(ep[key], want, err_msg=f"episode {i} key {key}")


def _check_plain_zarr_consistent(store: Path) -> None:
    g = zarr.open_group(store, mode="r")
    ends = np.asarray(arr(g, "meta/episode_ends")[:])
    n = int(ends[-1]) if len(ends) else 0
    for key in ("image", "action", "state"):
        assert arr(g, f"data/{key}").shape[0] == n, f"data/{key} not truncated to episode_ends[-1]"
    assert arr(g, "meta/episode_meta").shape == ends.shape
    assert (np.diff(ends, prepend=0) > 0).all()


def test_sigkill_recovery(tmp_path: Path) -> None:
    store = tmp_path / "store"
    rng = np.random.default_rng(20240607)
    n_before = 0
    saw_uncommitted = 0
    leftovers: set[str] = set()
    for rnd in range(ROUNDS):
        # mostly short delays (kill during the first appends, often a large one), some long
        delay = float(rng.uniform(0.05, 0.25) if rnd % 3 else rng.uniform(0.3, 0.8))
        reported = _run_and_kill(store, seed=rnd, delay=delay)
        assert reported == list(range(n_before, n_before + len(reported)))

        # read-only view: consistent, and it must not touch a single file
        files = _files(store)
        leftovers |= {Path(f).name for f in files if PARTIAL_RE.search(f)}
        raw = zarr.open_group(store, mode="r")
        with EpisodeStore.open(store, mode="r") as ro:
            n_ro = ro.n_episodes
            assert ro.n_frames == (int(ro.episode_ends[-1]) if n_ro else 0)
            if arr(raw, "data/image").shape[0] > ro.n_frames:
                saw_uncommitted += 1
            if n_ro:
                _check_episode(ro, n_ro - 1)
        assert _files(store) == files, "open(mode='r') modified the store"

        with EpisodeStore.open(store, mode="a") as st:
            n = st.n_episodes
            assert n == n_ro
            last_reported = reported[-1] if reported else n_before - 1
            # the kill may land after the commit but before the "committed" line
            assert last_reported + 1 <= n <= last_reported + 2
            for i in range(n_before, n):
                _check_episode(st, i)
        _check_plain_zarr_consistent(store)
        assert not [f for f in _files(store) if PARTIAL_RE.search(f)], "temp files left"
        n_before = n

    assert n_before >= ROUNDS, "too few episodes were committed to exercise recovery"
    assert saw_uncommitted >= 1, "no kill landed mid-append; recovery was not exercised"
    print(
        f"\nleftover temp files seen after SIGKILL: {sorted(leftovers)[:5]} "
        f"({len(leftovers)} total); rounds with uncommitted data: {saw_uncommitted}/{ROUNDS}"
    )

    with EpisodeStore.open(store, mode="a") as st:  # a further append works
        length = 37
        i = st.append_episode(
            child.make_episode(n_before, length), child.make_meta(n_before, length)
        )
        assert i == n_before
    with EpisodeStore.open(store) as st:
        assert st.n_episodes == n_before + 1
        for i in range(st.n_episodes):
            _check_episode(st, i)


def test_readers_see_committed_snapshots_of_a_live_writer(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = start_child(CHILD, store, 99, stderr=None)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("ready")
        seen = []
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            with EpisodeStore.open(store) as ro:
                seen.append(ro.n_episodes)
                if ro.n_episodes:
                    assert ro.n_frames == int(ro.episode_ends[-1])
                    _check_episode(ro, ro.n_episodes - 1)
        assert seen == sorted(seen) and seen[-1] > seen[0], f"writer made no progress: {seen}"
    finally:
        proc.kill()
        proc.communicate()


def _store_with_uncommitted_tail(path: Path) -> None:
    """Three committed episodes, then what a kill between the ends resize and its value
    write leaves behind: longer data and meta, an ends slot reading 0, a temp file."""
    st = EpisodeStore.create(path, child.SCHEMA, fps=10.0, action_meaning="x")
    for i in range(3):
        st.append_episode(child.make_episode(i, 5 + i), child.make_meta(i, 5 + i))
    st.close()
    g = zarr.open_group(path, mode="r+")
    for key in ("image", "action", "state"):
        a = arr(g, f"data/{key}")
        a.resize((a.shape[0] + 9, *a.shape[1:]))
    arr(g, "meta/episode_meta").resize((4,))
    arr(g, "meta/episode_meta")[3] = "{}"
    arr(g, "meta/episode_ends").resize((4,))
    (path / "data" / "image" / "c.0.0.0.0123456789abcdef0123456789abcdef.partial").write_bytes(b"x")


def test_unwritten_ends_slot_is_ignored_then_repaired(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _store_with_uncommitted_tail(path)
    files = _files(path)
    with EpisodeStore.open(path) as ro:
        assert ro.n_episodes == 3 and ro.n_frames == 18
        np.testing.assert_array_equal(
            ro.load(["action"])["action"][:, 1], [0] * 5 + [1] * 6 + [2] * 7
        )
    assert _files(path) == files
    with EpisodeStore.open(path, mode="a") as st:
        assert st.n_episodes == 3
        st.append_episode(child.make_episode(3, 4), child.make_meta(3, 4))
    _check_plain_zarr_consistent(path)
    with EpisodeStore.open(path) as st:
        assert st.n_episodes == 4
        for i in range(4):
            _check_episode(st, i)
    assert not [f for f in _files(path) if f.endswith(".partial")]


def test_damaged_episode_ends_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    _store_with_uncommitted_tail(path)
    g = zarr.open_group(path, mode="r+")
    arr(g, "meta/episode_ends")[1] = 2  # not increasing, and not the last entry
    with pytest.raises(StoreError, match=r"damaged.*entry 1"):
        EpisodeStore.open(path)


def test_append_after_truncation_pads_with_fill(tmp_path: Path) -> None:
    """Recovery truncates data arrays but leaves the uncommitted frames in the last chunk
    file; the next (direct) append rewrites that chunk with the fill value past its data."""
    path = tmp_path / "s"
    _store_with_uncommitted_tail(path)
    image = arr(zarr.open_group(path, mode="r+"), "data/image")
    image[18:27] = 7  # uncommitted frames 18..26, in chunk 0 (128 frames)
    with EpisodeStore.open(path, mode="a") as st:
        assert st.n_frames == 18
        st.append_episode(child.make_episode(3, 4), child.make_meta(3, 4))
    _check_plain_zarr_consistent(path)
    image = arr(zarr.open_group(path, mode="r+"), "data/image")
    np.testing.assert_array_equal(image[18:22], child.make_episode(3, 4)["image"])
    image.resize((30, *image.shape[1:]))  # grow without writing: frames 22.. must be fill
    assert not np.asarray(image[22:30]).any()


def test_failed_append_then_append_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append that raises half-way (some chunks written, arrays resized) leaves only an
    uncommitted tail, which the next append overwrites; no temp file is left behind."""
    path = tmp_path / "s"
    real_store = DirectArray.store
    calls = 0

    def failing_store(self: DirectArray, idx: int, chunk: np.ndarray) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise OSError(28, "No space left on device")
        real_store(self, idx, chunk)

    with EpisodeStore.create(path, child.SCHEMA, fps=10.0, action_meaning="x") as st:
        st.append_episode(child.make_episode(0, 5), child.make_meta(0, 5))
        monkeypatch.setattr(DirectArray, "store", failing_store)
        with pytest.raises(OSError, match="No space"):
            st.append_episode(child.make_episode(1, 300), child.make_meta(1, 300))
        monkeypatch.undo()
        assert st.n_episodes == 1
        assert arr(zarr.open_group(path, mode="r"), "data/image").shape[0] == 305
        st.append_episode(child.make_episode(1, 7), child.make_meta(1, 7))
        np.testing.assert_array_equal(st.episode(1)["image"], child.make_episode(1, 7)["image"])
    _check_plain_zarr_consistent(path)
    with EpisodeStore.open(path) as st:
        assert st.n_episodes == 2 and st.n_frames == 12
        for i in range(2):
            _check_episode(st, i)
    assert not [f for f in _files(path) if PARTIAL_RE.search(f)]
    assert not (path / "data" / "image" / "c.2.0.0.0").exists()  # dropped by the shrink
