"""Episode store: appends written straight to chunk files match zarr's own bytes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from store_factories import (
    arr,
    make_episode,
    make_meta,
    new_store,
)

from factory.store import (
    COMPRESSIONS,
    EpisodeStore,
    KeySpec,
    StoreSchema,
)

# ---------------------------------------------------------------- direct chunk writes
# image (64, 64, 3) uint8 and "wide" (64, 64) float32 get 8- and 4-frame chunks at
# chunk_frames=4, action (2,) float32 8192; these ends start and end episodes mid-chunk,
# on chunk boundaries, inside one chunk and across many, then again after a reopen
DIRECT_SCHEMA = StoreSchema(
    {
        "image": KeySpec((64, 64, 3), "uint8"),
        "wide": KeySpec((64, 64), "float32"),
        "action": KeySpec((2,), "float32"),
    }
)
DIRECT_LENGTHS = [[3, 2, 11, 40, 3], [1, 37, 8]]  # two sessions: the second reopens


def _direct_episode(i: int, length: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(100 + i)
    image = rng.integers(0, 256, size=(length, 64, 64, 3), dtype=np.uint8)
    wide = rng.standard_normal((length, 64, 64)).astype(np.float32)
    if length >= 40:  # whole chunks of fill value (deleted, not written) and of -0.0 (kept)
        image[8:24] = 0
        wide[4:12] = 0.0
        wide[12:16] = -0.0
    action = np.stack([np.arange(length), np.full(length, i)], axis=1).astype(np.float32)
    return {"image": image, "wide": wide, "action": action}


def _write_direct_store(path: Path, compression: str) -> list[dict[str, np.ndarray]]:
    from factory.store import appender

    eps: list[dict[str, np.ndarray]] = []
    for session in DIRECT_LENGTHS:
        if eps:
            st = EpisodeStore.open(path, mode="a")
        else:
            st = EpisodeStore.create(
                path, DIRECT_SCHEMA, fps=10.0, action_meaning="xy", chunk_frames=4,
                compression=compression,
            )  # fmt: skip
        with st:
            for n in session:
                assert st._appender is None or len(st._appender._direct) == 5 * appender.DIRECT
                eps.append(_direct_episode(len(eps), n))
                st.append_episode(eps[-1], make_meta(len(eps) - 1))
                got = st.episode(-1).to_dict()  # a read between appends sees the new episode
                for key, want in eps[-1].items():
                    np.testing.assert_array_equal(got[key].view(np.uint8), want.view(np.uint8))
    return eps


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_direct_chunk_writes_match_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    """Appends written directly read back bit-exact with plain zarr, and their files are
    byte for byte the ones zarr writes for the same appends."""
    from factory.store import appender

    monkeypatch.setattr(appender, "DIRECT", False)
    _write_direct_store(tmp_path / "zarr", compression)
    monkeypatch.setattr(appender, "DIRECT", True)
    eps = _write_direct_store(tmp_path / "direct", compression)
    chunks = {"image": 8, "wide": 4, "action": 8192}
    g = zarr.open_group(tmp_path / "direct", mode="r")
    for key, want in ((k, np.concatenate([e[k] for e in eps])) for k in DIRECT_SCHEMA.keys):
        got = arr(g, f"data/{key}")
        assert got.chunks[0] == chunks[key]
        np.testing.assert_array_equal(np.asarray(got[:]).view(np.uint8), want.view(np.uint8))
    np.testing.assert_array_equal(
        arr(g, "meta/episode_ends")[:], np.cumsum([n for s in DIRECT_LENGTHS for n in s])
    )
    assert [json.loads(str(m))["seed"] for m in arr(g, "meta/episode_meta")[:]] == list(
        range(len(eps))
    )
    with EpisodeStore.open(tmp_path / "direct") as st:
        for i, ep in enumerate(eps):
            for key, want in ep.items():
                np.testing.assert_array_equal(
                    st.episode(i)[key].view(np.uint8), want.view(np.uint8)
                )

    def files(root: Path) -> dict[str, bytes]:
        return {
            str(f.relative_to(root)): f.read_bytes()
            for f in sorted(root.rglob("*"))
            if f.is_file() and f.name != ".lock"
        }

    direct, plain = files(tmp_path / "direct"), files(tmp_path / "zarr")
    assert sorted(direct) == sorted(plain)  # same chunk keys (all-fill chunks absent in both)
    # episode 3 starts at frame 16: image frames 24-39 and wide 20-27 are zeros, 28-31 -0.0
    assert not {"data/image/c.3.0.0.0", "data/image/c.4.0.0.0", "data/wide/c.6.0.0"} & set(direct)
    assert "data/wide/c.7.0.0" in direct
    assert [k for k in direct if direct[k] != plain[k]] == []


def test_direct_writes_without_rename_exchange(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from factory.store import chunkfile

    monkeypatch.setattr(chunkfile, "_RENAMEAT2", None)  # plain os.replace, as off Linux
    eps = _write_direct_store(tmp_path / "s", "zstd")
    with EpisodeStore.open(tmp_path / "s") as st:
        np.testing.assert_array_equal(
            st.load(["wide"])["wide"], np.concatenate([e["wide"] for e in eps])
        )
    assert not list((tmp_path / "s").rglob("*.partial"))


def test_direct_writes_fall_back_to_zarr_for_shards(tmp_path: Path) -> None:
    with new_store(tmp_path / "s", shard_frames=64) as st:
        st.append_episode(make_episode(0, 70), make_meta(0))
        assert st._appender is not None
        assert sorted(st._appender._direct) == ["meta/episode_ends", "meta/episode_meta"]
        st.append_episode(make_episode(1, 9), make_meta(1))
    with EpisodeStore.open(tmp_path / "s") as st:
        np.testing.assert_array_equal(st.episode(1)["image"], make_episode(1, 9)["image"])


def test_installed_zarr_is_one_the_byte_identity_test_covers() -> None:
    """Bumping zarr fails here first: rerun test_direct_chunk_writes_match_zarr on the new
    release and add it to VERIFIED_ZARR (until then appends go through zarr itself)."""
    from factory.store.chunkfile import zarr_verified

    assert zarr_verified(), f"zarr {zarr.__version__} is not in VERIFIED_ZARR"
    assert zarr_verified("3.4.9") and not zarr_verified("3.5.0") and not zarr_verified("x")


def test_unverified_zarr_appends_through_zarr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An unverified zarr release: no direct writes, one log line, the same data."""
    from factory.store import appender, chunkfile

    monkeypatch.setattr(chunkfile, "VERIFIED_ZARR", ((2, 0),))
    monkeypatch.setattr(appender, "_told_unverified", [])
    caplog.set_level("INFO", logger="factory.store.appender")
    with new_store(tmp_path / "s") as st:
        st.append_episode(make_episode(0, 9), make_meta(0))
        assert st._appender is not None and st._appender._direct == {}
        st.append_episode(make_episode(1, 5), make_meta(1))
    lines = [r for r in caplog.records if "verified for zarr 2.0 only" in r.getMessage()]
    assert len(lines) == 1
    with EpisodeStore.open(tmp_path / "s") as st:
        np.testing.assert_array_equal(st.episode(1)["image"], make_episode(1, 5)["image"])
