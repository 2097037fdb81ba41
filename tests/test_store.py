"""Episode store: round trips, schema checks, windows, merge, summary, open errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from store_factories import (
    LENGTHS,
    H,
    W,
    arr,
    make_episode,
    make_meta,
    make_schema,
    new_store,
)

from factory.errors import SchemaMismatchError, StoreError
from factory.store import (
    COMPRESSIONS,
    FORMAT,
    EpisodeMeta,
    EpisodeStore,
    KeySpec,
    StoreSchema,
    merge_stores,
)


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


def test_merge_stores_selected_episodes(tmp_path: Path, filled: Path) -> None:
    other = tmp_path / "other"
    with new_store(other) as st:
        for seed in (100, 101):
            st.append_episode(make_episode(seed, 4), make_meta(seed))
    merged = merge_stores([filled, other], tmp_path / "m", episodes=[[2, 0], None])
    with merged:
        assert [m.seed for m in merged.all_meta()] == [2, 0, 100, 101]
        np.testing.assert_array_equal(
            merged.episode(0)["image"], make_episode(2, LENGTHS[2])["image"]
        )
    with pytest.raises(StoreError, match="2 sources"):
        merge_stores([filled, other], tmp_path / "m2", episodes=[[0]])


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
