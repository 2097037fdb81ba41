"""Durable stores fsync the right files in the right order (os.fsync wrapped).

For each append the oracle compares the store's files before and after it (inode, size,
mtime) with what every fsync call saw: the fd's own inode, and the store's files at that
moment. Every data and meta file the append changed, and their directories (holding the
renames and deletes), must be fsynced while ``meta/episode_ends`` is still untouched;
``episode_ends``' changed files and its directory must be fsynced once it is final.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from store_factories import make_episode, make_meta, make_schema, new_store
from typer.testing import CliRunner

from factory.errors import StoreError
from factory.store import EpisodeStore, appender, merge_stores
from factory.store.layout import PARTIAL_RE

ENDS = "meta/episode_ends/"
Sig = tuple[int, int, int]  # (inode, size, mtime_ns)


def _sig(st: os.stat_result) -> Sig:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def files(root: Path) -> dict[str, Sig]:
    """Every file under ``root`` but temp files and the lock: relative path -> signature."""
    out = {}
    for top, _dirs, names in os.walk(root):
        for name in names:
            if PARTIAL_RE.search(name) or name == ".lock":
                continue
            full = os.path.join(top, name)
            try:
                out[os.path.relpath(full, root)] = _sig(os.stat(full))
            except FileNotFoundError:  # renamed away under a concurrent encoder thread
                continue
    return out


@dataclass
class Event:
    sig: Sig  # the fsynced fd's own file
    is_dir: bool
    seen: Any  # what the probe saw at that moment


class Fsyncs:
    """Records every os.fsync call (which file, and ``probe()`` at that moment)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[Event] = []
        self.probe: Callable[[], Any] = lambda: None
        lock, real = threading.Lock(), os.fsync

        def fsync(fd: int) -> None:
            st = os.fstat(fd)
            event = Event(_sig(st), stat.S_ISDIR(st.st_mode), self.probe())
            with lock:
                self.events.append(event)
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)

    def take(self) -> list[Event]:
        out, self.events = self.events, []
        return out


def _ends(snap: dict[str, Sig]) -> dict[str, Sig]:
    return {p: s for p, s in snap.items() if p.startswith(ENDS)}


def _in(snap: dict[str, Sig], directory: str) -> dict[str, Sig]:
    return {p: s for p, s in snap.items() if os.path.dirname(p) == directory}


def check_durable_append(
    root: Path, before: dict[str, Sig], after: dict[str, Sig], events: list[Event]
) -> None:
    """Raise AssertionError unless ``events`` made the append durable, commit point last."""
    changed = {p for p in after if before.get(p) != after[p]}
    touched = changed | (set(before) - set(after))
    early = [e for e in events if _ends(e.seen) == _ends(before)]  # episode_ends untouched
    for path in sorted(p for p in changed if not p.startswith(ENDS)):
        assert any(not e.is_dir and e.sig == after[path] for e in early), (
            f"{path} was not fsynced before episode_ends was written"
        )
    for d in sorted({os.path.dirname(p) for p in touched if not p.startswith(ENDS)}):
        ino = os.stat(root / d).st_ino
        assert any(
            e.is_dir and e.sig[0] == ino and _in(e.seen, d) == _in(after, d) for e in early
        ), f"directory {d} was not fsynced (after its renames) before episode_ends was written"
    ends_changed = sorted(p for p in changed if p.startswith(ENDS))
    assert ends_changed, "the append did not write episode_ends"
    for path in ends_changed:
        assert any(not e.is_dir and e.sig == after[path] for e in events), f"{path} not fsynced"
    last = events[-1] if events else None
    ends_ino = os.stat(root / ENDS).st_ino
    assert last is not None and last.is_dir and last.sig[0] == ends_ino, (
        "the last fsync of an append must be episode_ends' directory"
    )
    assert _ends(last.seen) == _ends(after), "episode_ends changed after its last fsync"


def _append_checked(st: EpisodeStore, rec: Fsyncs, i: int, length: int) -> list[Event]:
    root = st.path
    rec.probe = lambda: files(root)
    before = files(root)
    rec.take()
    st.append_episode(make_episode(i, length), make_meta(i))
    events = rec.take()
    check_durable_append(root, before, files(root), events)
    return events


# lengths: within a chunk, across chunk boundaries (chunk_frames 4: images 128 frames,
# action/state 8192), several chunks at once, and one frame
LENGTHS = [3, 130, 1, 300, 7]


@pytest.mark.parametrize(
    ("direct", "shard"),
    [(True, None), (False, None), (False, 256)],
    ids=["direct", "zarr", "shard"],
)
def test_durable_appends_fsync_before_and_after_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct: bool, shard: int | None
) -> None:
    monkeypatch.setattr(appender, "DIRECT", direct)
    rec = Fsyncs(monkeypatch)
    with new_store(tmp_path / "s.zarr", chunk_frames=4, shard_frames=shard, durable=True) as st:
        assert st.durable
        for i, length in enumerate(LENGTHS):
            _append_checked(st, rec, i, length)
    with EpisodeStore.open(tmp_path / "s.zarr") as st:
        assert st.durable and st.n_episodes == len(LENGTHS)
        np.testing.assert_array_equal(st.episode(3)["image"], make_episode(3, 300)["image"])


def test_direct_commit_writes_the_entry_durably_before_the_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """episode_ends' chunk (the new entry) is fsynced while its zarr.json (the length that
    shows the entry) is still the old one."""
    rec = Fsyncs(monkeypatch)
    with new_store(tmp_path / "s.zarr", durable=True) as st:
        before = files(st.path)
        events = _append_checked(st, rec, 0, 5)
        after = files(st.path)
    chunk = after[ENDS + "c.0"]
    old_length = before[ENDS + "zarr.json"]
    assert any(e.sig == chunk and e.seen[ENDS + "zarr.json"] == old_length for e in events)


def test_default_store_never_fsyncs_and_fails_the_oracle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Fsyncs(monkeypatch)
    with new_store(tmp_path / "s.zarr") as st:
        assert not st.durable
        with pytest.raises(AssertionError, match="not fsynced before episode_ends"):
            _append_checked(st, rec, 0, 5)
    assert rec.events == []


def test_durable_create_fsyncs_the_whole_store_then_its_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Fsyncs(monkeypatch)
    path = tmp_path / "new" / "deeper" / "s.zarr"
    rec.probe = path.exists
    new_store(path, durable=True).close()
    events = rec.take()
    for top, dirs, names in os.walk(path):
        for name in (n for n in names if n != ".lock"):  # the lock's pid: no data
            sig = _sig(os.stat(os.path.join(top, name)))
            assert any(not e.is_dir and e.sig == sig for e in events), name
        for d in [top, *[os.path.join(top, n) for n in dirs]]:
            assert any(e.is_dir and e.sig[0] == os.stat(d).st_ino for e in events), d
    parent = os.stat(path.parent).st_ino
    assert any(e.is_dir and e.sig[0] == parent and e.seen for e in events), "rename not synced"
    for made in (tmp_path / "new", tmp_path):  # the entries of the directories made for it
        assert any(e.is_dir and e.sig[0] == os.stat(made).st_ino for e in events), made
    new_store(tmp_path / "plain.zarr").close()
    assert rec.take() == []


def test_make_durable_persists_for_later_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Fsyncs(monkeypatch)
    path = tmp_path / "s.zarr"
    with new_store(path) as st:
        st.append_episode(make_episode(0, 5), make_meta(0))
        assert rec.take() == []
        st.make_durable()  # mid-session: the next append of this writer is durable
        assert st.durable
        _append_checked(st, rec, 1, 9)
    with EpisodeStore.open(path, mode="a") as st:  # a later writer, no flag
        assert st.durable and st.attrs == {"env": "gym_pusht/PushT-v0", "resolution": [16, 16]}
        _append_checked(st, rec, 2, 4)
    with EpisodeStore.open(path) as ro:
        assert ro.n_episodes == 3
        with pytest.raises(StoreError, match="read-only"):
            ro.make_durable()


def test_durable_is_reserved_and_merge_keeps_it(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="reserved"):
        EpisodeStore.create(
            tmp_path / "x", make_schema(), fps=10.0, action_meaning="", attrs={"durable": True}
        )
    with new_store(tmp_path / "a.zarr", durable=True) as st:
        st.append_episode(make_episode(0, 5), make_meta(0))
    with new_store(tmp_path / "b.zarr") as st:
        st.append_episode(make_episode(1, 5), make_meta(1))
    with merge_stores([tmp_path / "a.zarr", tmp_path / "b.zarr"], tmp_path / "m1") as m:
        assert m.durable and m.n_episodes == 2
    with merge_stores([tmp_path / "b.zarr", tmp_path / "a.zarr"], tmp_path / "m2") as m:
        assert not m.durable


def test_collect_fsync_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``factory collect --fsync`` makes a durable store (and fsyncs); the default does not;
    ``--fsync --append`` marks an existing store durable."""
    from pipelines.cli import app

    runner, rec = CliRunner(), Fsyncs(monkeypatch)
    base = ["collect", "--episodes", "2", "--steps", "6", "--resolution", "32"]
    result = runner.invoke(app, [*base, "--out", str(tmp_path / "plain.zarr")])
    assert result.exit_code == 0, result.output
    assert rec.take() == []
    result = runner.invoke(app, [*base, "--out", str(tmp_path / "d.zarr"), "--fsync"])
    assert result.exit_code == 0, result.output
    assert len(rec.take()) > 2 * 10  # the new store, then about 10 per commit
    more = [*base[:2], "3", *base[3:], "--out", str(tmp_path / "plain.zarr"), "--append"]
    result = runner.invoke(app, [*more, "--fsync"])
    assert result.exit_code == 0, result.output
    assert rec.take()
    for name, n in (("plain.zarr", 3), ("d.zarr", 2)):
        with EpisodeStore.open(tmp_path / name) as st:
            assert st.durable and st.n_episodes == n
