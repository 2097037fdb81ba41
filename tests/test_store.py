"""Episode store: round trips, schema checks, windows, merge, summary, lock, open errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from factory.errors import SchemaMismatchError, StoreError, StoreLockedError
from factory.store import (
    COMPRESSIONS,
    FORMAT,
    EpisodeMeta,
    EpisodeStore,
    KeySpec,
    StoreSchema,
    merge_stores,
)

REPO = Path(__file__).resolve().parents[1]


def arr(group: zarr.Group, name: str) -> zarr.Array:
    node = group[name]
    assert isinstance(node, zarr.Array)
    return node


H = W = 16
LENGTHS = [3, 20, 7, 50, 16, 33]


def make_schema(h: int = H, w: int = W) -> StoreSchema:
    return StoreSchema(
        {
            "image": KeySpec((h, w, 3), "uint8"),
            "action": KeySpec((2,), "float32"),
            "state": KeySpec((2,), "float32"),
        }
    )


def make_episode(i: int, length: int) -> dict[str, np.ndarray]:
    """action[:, 0] = frame index in the episode, action[:, 1] = episode index i."""
    rng = np.random.default_rng(i)
    image = rng.integers(0, 256, size=(length, H, W, 3), dtype=np.uint8)
    image[:, 0, 0, 0] = i
    action = np.stack(
        [np.arange(length, dtype=np.float32), np.full(length, i, dtype=np.float32)], axis=1
    )
    state = rng.standard_normal((length, 2)).astype(np.float32)
    return {"image": image, "action": action, "state": state}


def make_meta(i: int) -> EpisodeMeta:
    return EpisodeMeta(
        source=["real", "world_model", "teleop"][i % 3],
        generator=f"gen{i % 2}",
        generator_params={"noise": 0.1 * i, "arr": np.arange(2)},
        seed=i,
        model_id=None if i % 2 else f"model-{i}",
        task="push the T",
        success=[True, False, None][i % 3],
        score=float(i) / 3,
        wall_time_s=1.5 * i,
        extra={"device": "cpu", "timing": {"step_ms": np.float32(2.5)}},
    )


def new_store(path: Path, **kw: object) -> EpisodeStore:
    return EpisodeStore.create(
        path,
        make_schema(),
        fps=10.0,
        action_meaning="agent target xy in [0, 512]",
        attrs={"env": "gym_pusht/PushT-v0", "resolution": [H, W]},
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with new_store(path) as st:
        for i, n in enumerate(LENGTHS):
            assert st.append_episode(make_episode(i, n), make_meta(i)) == i
    return path


# ---------------------------------------------------------------- round trips
def test_round_trip_data_meta_and_layout(filled: Path) -> None:
    with EpisodeStore.open(filled) as st:
        assert len(st) == st.n_episodes == len(LENGTHS)
        assert st.n_frames == sum(LENGTHS)
        np.testing.assert_array_equal(st.episode_ends, np.cumsum(LENGTHS))
        np.testing.assert_array_equal(st.episode_lengths, LENGTHS)
        assert st.fps == 10.0 and st.action_meaning.startswith("agent target")
        assert st.attrs == {"env": "gym_pusht/PushT-v0", "resolution": [H, W]}
        assert st.schema == make_schema()
        for i, n in enumerate(LENGTHS):
            ep = st.episode(i)
            assert ep.length == len(ep) == n and ep.keys() == ["image", "action", "state"]
            for key, want in make_episode(i, n).items():
                got = ep[key]
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_array_equal(got, want)
            assert ep.meta == EpisodeMeta.from_json(make_meta(i).to_json())
            assert st.episode_meta(i).generator_params["arr"] == [0, 1]
        assert st.episode(-1).index == len(LENGTHS) - 1
        assert [ep.index for ep in st] == list(range(len(LENGTHS)))
        assert [m.seed for m in st.all_meta()] == list(range(len(LENGTHS)))
        for bad in (len(LENGTHS), -len(LENGTHS) - 1):
            with pytest.raises(IndexError):
                st.episode(bad)
        loaded = st.load(["action", "image"])
        assert set(loaded) == {"action", "image"}
        want_action = np.concatenate([make_episode(i, n)["action"] for i, n in enumerate(LENGTHS)])
        np.testing.assert_array_equal(loaded["action"], want_action)
        assert loaded["image"].shape == (sum(LENGTHS), H, W, 3)


def test_plain_zarr_can_read_layout(filled: Path) -> None:
    g = zarr.open_group(filled, mode="r")
    assert g.attrs["format"] == FORMAT and g.attrs["format_version"] == 1
    schema: Any = g.attrs["schema"]
    assert schema["image"] == {"shape": [H, W, 3], "dtype": "uint8"}
    assert arr(g, "data/image").shape == (sum(LENGTHS), H, W, 3)
    assert arr(g, "data/image").chunks[0] >= 16
    assert arr(g, "meta/episode_ends").dtype == np.int64
    np.testing.assert_array_equal(arr(g, "meta/episode_ends")[:], np.cumsum(LENGTHS))
    meta0 = json.loads(str(arr(g, "meta/episode_meta")[0]))
    assert meta0["seed"] == 0 and meta0["source"] == "real"


def test_episode_is_lazy(filled: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with EpisodeStore.open(filled) as st:
        calls: list[tuple[str, int, int]] = []
        real = st._read_slice

        def spy(key: str, start: int, stop: int) -> np.ndarray:
            calls.append((key, start, stop))
            return real(key, start, stop)

        monkeypatch.setattr(st, "_read_slice", spy)
        eps = list(st)
        assert calls == []
        eps[1]["action"]
        assert calls == [("action", 3, 23)]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_compression_options_round_trip(tmp_path: Path, compression: str) -> None:
    with new_store(tmp_path / "s", compression=compression, chunk_frames=4) as st:
        st.append_episode(make_episode(7, 11), make_meta(7))
    with EpisodeStore.open(tmp_path / "s") as st:
        assert st.compression == compression and st.chunk_frames == 4
        np.testing.assert_array_equal(st.episode(0)["image"], make_episode(7, 11)["image"])


def test_sharded_store_round_trip(tmp_path: Path) -> None:
    with new_store(tmp_path / "s", shard_frames=64) as st:
        for i, n in enumerate(LENGTHS):
            st.append_episode(make_episode(i, n), make_meta(i))
    assert arr(zarr.open_group(tmp_path / "s", mode="r"), "data/image").shards is not None
    with EpisodeStore.open(tmp_path / "s") as st:
        for i, n in enumerate(LENGTHS):
            np.testing.assert_array_equal(st.episode(i)["image"], make_episode(i, n)["image"])
    with pytest.raises(StoreError, match="multiple"):
        new_store(tmp_path / "t", shard_frames=20)


def test_small_keys_get_longer_chunks(tmp_path: Path) -> None:
    with new_store(tmp_path / "s") as st:
        st.append_episode(make_episode(0, 5), make_meta(0))
    g = zarr.open_group(tmp_path / "s", mode="r")
    assert arr(g, "data/action").chunks[0] >= 8192  # (2,) float32: >= 64 KiB per chunk
    assert arr(g, "data/image").chunks[0] % 16 == 0


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


# ---------------------------------------------------------------- windows
def test_sample_windows_never_cross_episodes(filled: Path) -> None:
    rng = np.random.default_rng(0)
    length = 8
    with EpisodeStore.open(filled) as st:
        seen: set[int] = set()
        for batch in (1, 64, 256):
            w = st.sample_windows(batch, length, rng)
            assert w["image"].shape == (batch, length, H, W, 3)
            assert w["action"].shape == (batch, length, 2) and w["state"].shape == (
                batch,
                length,
                2,
            )
            ep = w["action"][:, :, 1]
            assert (ep == ep[:, :1]).all(), "a window crossed an episode boundary"
            steps = np.diff(w["action"][:, :, 0], axis=1)
            assert (steps == 1).all(), "frames of a window are not consecutive"
            assert (w["image"][:, :, 0, 0, 0] == ep.astype(np.uint8)).all()
            seen |= set(ep[:, 0].astype(int).tolist())
        eligible = {i for i, n in enumerate(LENGTHS) if n >= length}
        assert seen == eligible  # ep 0 (3 frames) and ep 2 (7 frames) never sampled
        only = st.sample_windows(4, 50, rng, keys=["action"])
        assert set(only) == {"action"} and (only["action"][:, 0, 1] == 3).all()
        with pytest.raises(StoreError, match="no episode has 51 frames"):
            st.sample_windows(1, 51, rng)


def test_sample_windows_windows_match_episode_data(filled: Path) -> None:
    rng = np.random.default_rng(1)
    with EpisodeStore.open(filled) as st:
        w = st.sample_windows(32, 5, rng)
        for b in range(32):
            i = int(w["action"][b, 0, 1])
            t0 = int(w["action"][b, 0, 0])
            want = make_episode(i, LENGTHS[i])
            for key in want:
                np.testing.assert_array_equal(w[key][b], want[key][t0 : t0 + 5])


# ---------------------------------------------------------------- summary, merge
def test_summary_counts(filled: Path) -> None:
    with EpisodeStore.open(filled) as st:
        s = st.summary()
    assert s["episodes"] == 6 and s["frames"] == sum(LENGTHS) and s["fps"] == 10.0
    assert s["keys"]["image"] == {"shape": [sum(LENGTHS), H, W, 3], "dtype": "uint8"}
    assert s["sources"] == {"real": 2, "world_model": 2, "teleop": 2}
    assert s["generators"] == {"gen0": 3, "gen1": 3}
    assert s["successes"] == 2
    assert s["length"] == {"min": 3, "max": 50, "mean": pytest.approx(np.mean(LENGTHS))}
    assert s["attrs"]["env"] == "gym_pusht/PushT-v0"
    json.dumps(s)


def test_merge_stores(tmp_path: Path, filled: Path) -> None:
    other = tmp_path / "other"
    with new_store(other) as st:
        st.append_episode(make_episode(100, 9), make_meta(100))
    merged = merge_stores([filled, other], tmp_path / "merged", attrs={"note": "m"})
    with merged:
        assert not merged.writable
        assert merged.n_episodes == len(LENGTHS) + 1
        np.testing.assert_array_equal(merged.episode_lengths, [*LENGTHS, 9])
        for i, n in enumerate(LENGTHS):
            np.testing.assert_array_equal(merged.episode(i)["image"], make_episode(i, n)["image"])
            assert merged.episode_meta(i) == EpisodeMeta.from_json(make_meta(i).to_json())
        np.testing.assert_array_equal(merged.episode(-1)["state"], make_episode(100, 9)["state"])
        assert merged.episode(-1).meta.seed == 100
        assert merged.attrs["note"] == "m" and merged.attrs["env"] == "gym_pusht/PushT-v0"
        assert merged.attrs["merged_from"] == [str(filled), str(other)]


def test_merge_refuses_different_schema(tmp_path: Path, filled: Path) -> None:
    odd = tmp_path / "odd"
    EpisodeStore.create(odd, make_schema(8, 8), fps=10.0, action_meaning="x").close()
    with pytest.raises(SchemaMismatchError, match="different schema"):
        merge_stores([filled, odd], tmp_path / "merged")
    with pytest.raises(StoreError, match="also a source"):
        merge_stores([filled], filled)


# ---------------------------------------------------------------- schema checks
BAD_EPISODES = {
    "missing key": lambda e: {k: v for k, v in e.items() if k != "state"},
    "extra key": lambda e: {**e, "reward": np.zeros(5, np.float32)},
    "wrong shape": lambda e: {**e, "image": np.zeros((5, 8, 8, 3), np.uint8)},
    "wrong dtype": lambda e: {**e, "action": e["action"].astype(np.float64)},
    "length differs": lambda e: {**e, "state": e["state"][:4]},
    "not an array": lambda e: {**e, "state": e["state"].tolist()},
    "empty": lambda e: {k: v[:0] for k, v in e.items()},
}


@pytest.mark.parametrize("case", sorted(BAD_EPISODES))
def test_schema_mismatch_refused_nothing_written(filled: Path, case: str) -> None:
    bad = BAD_EPISODES[case](make_episode(9, 5))
    with EpisodeStore.open(filled, mode="a") as st:
        with pytest.raises(SchemaMismatchError) as err:
            st.append_episode(bad, make_meta(9))
        assert "\n" not in str(err.value)
        assert st.n_episodes == len(LENGTHS) and st.n_frames == sum(LENGTHS)
    g = zarr.open_group(filled, mode="r")
    assert all(arr(g, f"data/{k}").shape[0] == sum(LENGTHS) for k in ("image", "action", "state"))
    assert arr(g, "meta/episode_ends").shape == (len(LENGTHS),)
    assert arr(g, "meta/episode_meta").shape == (len(LENGTHS),)


def test_schema_mismatch_messages_name_key() -> None:
    schema = make_schema()
    with pytest.raises(SchemaMismatchError, match=r"'image'.*\('T', 16, 16, 3\).*\(5, 8, 8, 3\)"):
        schema.check_episode(BAD_EPISODES["wrong shape"](make_episode(0, 5)))
    with pytest.raises(SchemaMismatchError, match=r"'action'.*float32.*float64"):
        schema.check_episode(BAD_EPISODES["wrong dtype"](make_episode(0, 5)))
    assert schema.check_episode(make_episode(0, 5)) == 5


def test_check_compatible(filled: Path) -> None:
    with EpisodeStore.open(filled) as st:
        st.check_compatible(
            make_schema(), {"resolution": (H, W), "fps": 10, "env": st.attrs["env"]}
        )
        with pytest.raises(SchemaMismatchError, match="resolution"):
            st.check_compatible(make_schema(), {"resolution": [96, 96]})
        with pytest.raises(SchemaMismatchError, match="'image'"):
            st.check_compatible(make_schema(96, 96), {})
        with pytest.raises(SchemaMismatchError, match="fps"):
            st.check_compatible(make_schema(), {"fps": 15.0})
        with pytest.raises(SchemaMismatchError, match="no attr 'robot'"):
            st.check_compatible(make_schema(), {"robot": "ur5"})


def test_schema_and_meta_json_round_trip() -> None:
    schema = StoreSchema(
        {
            "image": KeySpec((96, 96, 3), "uint8"),
            "image_wrist": KeySpec((96, 96, 3), "uint8"),
            "action": KeySpec([2], np.float32),  # type: ignore[arg-type]
        }
    )
    assert schema.image_keys == ["image", "image_wrist"]
    assert schema.keys["action"] == KeySpec((2,), "float32")
    assert StoreSchema.from_json(json.loads(json.dumps(schema.to_json()))) == schema
    meta = make_meta(4)
    back = EpisodeMeta.from_json(json.loads(json.dumps(meta.to_json())))
    assert back.extra["timing"]["step_ms"] == 2.5 and back.seed == 4 and back.success is False
    assert EpisodeMeta.from_json({**meta.to_json(), "future_field": 1}).extra["future_field"] == 1
    with pytest.raises(StoreError, match="source"):
        EpisodeMeta(source="dream", generator="x")
    with pytest.raises(StoreError, match="data key"):
        StoreSchema({"bad/key": KeySpec((1,), "uint8")})


# ---------------------------------------------------------------- create/open errors
def test_create_refuses_existing_and_bad_args(tmp_path: Path, filled: Path) -> None:
    with pytest.raises(StoreError, match="already exists; use --append"):
        new_store(filled)
    with pytest.raises(StoreError, match="reserved"):
        EpisodeStore.create(
            tmp_path / "a", make_schema(), fps=10, action_meaning="", attrs={"fps": 3}
        )
    with pytest.raises(StoreError, match="compression"):
        new_store(tmp_path / "b", compression="gzip")
    with pytest.raises(StoreError, match="fps"):
        EpisodeStore.create(tmp_path / "c", make_schema(), fps=0, action_meaning="")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # no debris


def test_open_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        EpisodeStore.open(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    for mode in ("r", "a"):
        with pytest.raises(StoreError, match="not a zarr store"):
            EpisodeStore.open(empty, mode=mode)
    assert list(empty.iterdir()) == []  # no .lock dropped into a foreign directory
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="is a file"):
        EpisodeStore.open(tmp_path / "file")
    foreign = zarr.open_group(tmp_path / "foreign", mode="w")
    foreign.attrs["format"] = "someone.else"
    with pytest.raises(StoreError, match="not a demofactory episode store"):
        EpisodeStore.open(tmp_path / "foreign")
    zarr.open_group(tmp_path / "bare", mode="w")
    with pytest.raises(StoreError, match="not a demofactory episode store"):
        EpisodeStore.open(tmp_path / "bare", mode="a")
    with pytest.raises(StoreError, match="mode"):
        EpisodeStore.open(tmp_path / "bare", mode="w")  # type: ignore[arg-type]


def test_newer_format_version_refused(filled: Path) -> None:
    g = zarr.open_group(filled, mode="r+")
    g.attrs["format_version"] = 2
    with pytest.raises(StoreError, match="format_version 2"):
        EpisodeStore.open(filled)


def test_read_only_and_closed_store_refuse_writes(filled: Path) -> None:
    st = EpisodeStore.open(filled)
    with pytest.raises(StoreError, match="read-only"):
        st.append_episode(make_episode(0, 2), make_meta(0))
    st.close()
    st.close()
    with pytest.raises(StoreError, match="closed"):
        st.episode(0)["image"]


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
