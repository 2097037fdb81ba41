"""Episode store: one writer at a time (flock), in this process and across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from store_factories import (
    LENGTHS,
    REPO,
    make_episode,
    make_meta,
    new_store,
)

from factory.errors import StoreLockedError
from factory.store import (
    EpisodeStore,
)

# ---------------------------------------------------------------- lock
HOLDER = """
import sys
from factory.store import EpisodeStore
st = EpisodeStore.open(sys.argv[1], mode="a")
print("locked", flush=True)
sys.stdin.readline()
st.close()
print("released", flush=True)
sys.stdin.readline()
"""

OPENER = """
import sys
from factory.errors import StoreLockedError
from factory.store import EpisodeStore
try:
    EpisodeStore.open(sys.argv[1], mode="a").close()
except StoreLockedError as err:
    print("LOCKED", err)
    sys.exit(3)
print("OPENED")
"""


def _python(code: str, *args: str, **kw: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        text=True,
        env=env,
        cwd=REPO,
        **kw,  # type: ignore[call-overload]
    )


def test_second_writer_same_process(filled: Path) -> None:
    first = EpisodeStore.open(filled, mode="a")
    with pytest.raises(StoreLockedError, match=rf"pid {os.getpid()}, this process"):
        EpisodeStore.open(filled, mode="a")
    with EpisodeStore.open(filled) as reader:  # readers need no lock
        assert reader.n_episodes == len(LENGTHS)
    first.close()
    with EpisodeStore.open(filled, mode="a") as second:
        second.append_episode(make_episode(6, 4), make_meta(6))
    with pytest.raises(StoreLockedError), new_store(filled.parent / "fresh") as fresh:
        EpisodeStore.open(fresh.path, mode="a")


def test_second_writer_other_process(filled: Path) -> None:
    holder = _python(HOLDER, str(filled), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(
            StoreLockedError, match=rf"being written by another process \(pid {holder.pid}\)"
        ):
            EpisodeStore.open(filled, mode="a")
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
        with EpisodeStore.open(filled, mode="a") as st:  # works once the first closed
            opener = _python(OPENER, str(filled), stdout=subprocess.PIPE)
            out, _ = opener.communicate(timeout=60)
            assert opener.returncode == 3 and f"pid {os.getpid()}" in out
            st.append_episode(make_episode(6, 4), make_meta(6))
    finally:
        holder.kill()
        holder.wait()
    opener = _python(OPENER, str(filled), stdout=subprocess.PIPE)
    out, _ = opener.communicate(timeout=60)
    assert opener.returncode == 0 and "OPENED" in out
