"""The one recorder and the episode runner (lockstep and refilling); output checks that
create nothing; the files of a model directory; and a SIGKILL during generation that loses
nothing committed."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import write_tiny_model_dir
from store_factories import start_child

from factory.envs.pile import PileWorld
from factory.envs.pusht import PushTWorld
from factory.errors import FactoryError
from factory.generators import make_generator
from factory.model.files import model_files, model_identity
from factory.model.shipping import model_bytes as pack_model
from factory.record import EpisodeRecorder, check_output, open_output, store_attrs, store_schema
from factory.record.runner import EpisodeRunner, EpisodeSpec, Start, run_episode
from factory.store import EpisodeStore
from factory.world import Observation, WorldObs, WorldSpec

CHILD = Path(__file__).with_name("gen_writer_child.py")


def _obs(i: int, score: float = 0.0, success: bool = False) -> Observation:
    return Observation(
        frame=np.full((4, 4, 3), i, np.uint8),
        state=np.array([i, i], np.float32),
        task_state=np.array([i, 0, 0], np.float32),
        score=score,
        success=success,
    )


def test_recorder_steps_to_episode_and_meta() -> None:
    rec = EpisodeRecorder()
    for i in range(3):
        obs = _obs(i)
        rec.record(obs, np.array([i, -i], np.float32))
        obs.frame[:] = 99  # the recorder kept its own copy
        rec.observe(_obs(i + 1, score=0.2 * (i + 1), success=i == 1))
    data = rec.data()
    assert data["image"].shape == (3, 4, 4, 3) and data["image"][:, 0, 0, 0].tolist() == [0, 1, 2]
    assert data["action"].dtype == np.float32 and data["action"][2].tolist() == [2, -2]
    assert data["task_state"].shape == (3, 3) and len(rec) == 3
    meta = rec.meta(
        source="real", generator="g", generator_params={"k": 1}, seed=7, world="w", task="t"
    )
    assert meta.success and meta.score == pytest.approx(0.6) and meta.seed == 7
    assert meta.extra["max_score"] == pytest.approx(0.6) and meta.extra["world"] == "w"
    over = rec.meta(
        source="real", generator="g", generator_params={}, seed=7, world="w", task="t",
        success=False, score=0.1, extra={"stop": "key"},
    )  # fmt: skip
    assert not over.success and over.score == 0.1 and over.extra["stop"] == "key"


def test_runner_batch_matches_single_episodes() -> None:
    """A batch of B rows gives each row the episode it gets alone (the env is per row)."""
    seeds, steps = [3, 9], 12
    world = PushTWorld(batch_size=2, resolution=32)
    runner = EpisodeRunner(world, source="real")
    seen: list[int] = []
    gens = [make_generator("expert") for _ in seeds]
    specs = [EpisodeSpec(s, steps, extra={"row": r}) for r, s in enumerate(seeds)]
    batch = runner.run(gens, specs, on_step=lambda t, obs: seen.append(t))
    world.close()
    assert seen == list(range(steps))
    single = PushTWorld(batch_size=1, resolution=32)
    for r, seed in enumerate(seeds):
        alone = run_episode(single, make_generator("expert"), seed, steps, source="real")
        for key in ("image", "action", "state", "task_state"):
            np.testing.assert_array_equal(batch[r].data[key], alone.data[key])
        assert batch[r].meta.seed == seed and batch[r].meta.extra["row"] == r
        assert batch[r].meta.generator == "expert" and batch[r].frames == steps
    single.close()


def test_runner_stops_rows_on_success_and_refuses_mismatch() -> None:
    class Done:
        """A world whose row 0 succeeds at its second step."""

        def __init__(self) -> None:
            self.inner = PushTWorld(batch_size=2, resolution=32)
            self.spec, self.batch_size, self.t = self.inner.spec, 2, 0

        def reset(self, seeds: Any = None, configs: Any = None) -> Any:
            return self.inner.reset(seeds=seeds, configs=configs)

        def step(self, actions: np.ndarray) -> Any:
            self.t += 1
            out = self.inner.step(actions)
            out.success = np.array([self.t >= 2, False])
            return out

        def close(self) -> None:
            self.inner.close()

    world = Done()
    runner = EpisodeRunner(world, source="real")  # type: ignore[arg-type]
    gens = [make_generator("play"), make_generator("play")]
    out = runner.run(gens, [EpisodeSpec(0, 6, stop_on_success=True), EpisodeSpec(1, 6)])
    assert out[0].frames == 3 and out[0].meta.success  # 2 steps + the success frame
    np.testing.assert_array_equal(out[0].data["action"][2], out[0].data["action"][1])
    assert out[1].frames == 6 and not out[1].meta.success
    with pytest.raises(FactoryError, match="2 episodes at once"):
        runner.run(gens[:1], [EpisodeSpec(0, 2)])
    world.close()


def test_check_output_creates_nothing(tmp_path: Path) -> None:
    spec = PushTWorld(batch_size=1, resolution=16).spec
    out = tmp_path / "deep" / "new.zarr"
    check_output(out, spec, 16, append=False)
    assert not (tmp_path / "deep").exists()
    open_output(out, spec, 16, append=False).close()
    with pytest.raises(FactoryError, match="--append"):
        check_output(out, spec, 16, append=False)
    other = PushTWorld(batch_size=1, resolution=32).spec
    with pytest.raises(FactoryError, match=r"different schema|resolution"):
        check_output(out, other, 32, append=True)
    check_output(out, spec, 16, append=True)


def test_recorder_keeps_every_camera_of_every_step() -> None:
    rec = EpisodeRecorder()
    for i in range(3):
        obs = _obs(i)
        side = np.full((4, 4, 3), 10 + i, np.uint8)
        rec.record(replace(obs, views={"side": side}), np.zeros(2))
        side[:] = 0  # the recorder kept its own copy of the view too
    data = rec.data()
    assert set(data) == {"image", "action", "state", "task_state", "image_side"}
    assert data["image_side"].shape == (3, 4, 4, 3) and data["image_side"].dtype == np.uint8
    assert data["image_side"][:, 0, 0, 0].tolist() == [10, 11, 12]
    assert data["image"][:, 0, 0, 0].tolist() == [0, 1, 2]
    with pytest.raises(FactoryError, match="cameras"):
        rec.record(_obs(3), np.zeros(2))  # a step without the side camera


def test_store_schema_and_attrs_name_the_cameras(tmp_path: Path) -> None:
    pusht = PushTWorld(batch_size=1, resolution=16)
    assert list(store_schema(pusht.spec).keys) == ["image", "action", "state", "task_state"]
    assert store_attrs(pusht.spec, 16) == {"env": "pusht", "resolution": 16}  # unchanged
    pusht.close()
    spec = PileWorld(resolution=16).spec
    schema = store_schema(spec)
    assert schema.image_keys == ["image", "image_side"]
    assert schema.keys["image_side"] == schema.keys["image"]
    assert store_attrs(spec, 16) == {"env": "pile", "resolution": 16, "cameras": ["top", "side"]}
    out = tmp_path / "pile.zarr"
    with open_output(out, spec, 16, append=False) as store:
        assert store.attrs["cameras"] == ["top", "side"]
    check_output(out, spec, 16, append=True)
    # the same keys, but a store that does not say which cameras they are: refused
    bare = tmp_path / "bare.zarr"
    attrs = {"env": "pile", "resolution": 16}
    EpisodeStore.create(
        bare, schema, fps=10.0, action_meaning=spec.action_meaning, attrs=attrs
    ).close()
    with pytest.raises(FactoryError, match="cameras"):
        check_output(bare, spec, 16, append=True)


def test_model_files_leave_training_state_behind(tmp_path: Path) -> None:
    """One place decides a model's files: the id and the worker copy go by it."""
    model = write_tiny_model_dir(tmp_path / "train")
    before = model_identity(model)
    for junk in ("latents.cache.safetensors", "dynamics.optim.safetensors"):
        (model / junk).write_bytes(b"x" * 1000)
    (model / "dynamics.state.json").write_text("{}")
    names = [f.name for f in model_files(model)]
    assert names[:3] == ["autoencoder.safetensors", "dynamics.safetensors", "probe.safetensors"]
    assert names[3] == "config.json" and "latents.cache.safetensors" not in names
    assert set(pack_model(model)) == set(names)
    assert model_identity(model) == before  # training state is not part of the model
    (model / "probe.safetensors").unlink()
    with pytest.raises(FactoryError, match=r"probe\.safetensors"):
        model_files(model)


def test_sigkill_during_generation_loses_nothing_committed(tmp_path: Path) -> None:
    """Kill the generation driver mid-run: every episode it reported committed is in the
    store bit for bit, nothing else is, and an --append rerun can go on."""
    model = write_tiny_model_dir(tmp_path / "model")
    store = tmp_path / "gen.zarr"
    proc = start_child(CHILD, store, model)
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while len([x for x in lines if x.startswith("committed")]) < 3:
        line = proc.stdout.readline()
        if not line or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"generator failed: {lines} {proc.communicate()[1][-2000:]}")
        lines.append(line)
    time.sleep(0.05)  # land the kill anywhere in the next episodes
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    lines += out.splitlines()
    reported = {int(x.split()[1]): x.split()[2] for x in lines if x.startswith("committed")}
    from gen_writer_child import digest

    with EpisodeStore.open(store, mode="a") as st:
        metas = st.all_meta()
        seeds = [m.seed for m in metas]
        assert len(seeds) == len(set(seeds))
        assert set(reported) <= set(seeds) and len(seeds) <= len(reported) + 1
        for i, m in enumerate(metas):
            if m.seed in reported:
                assert digest(st.episode(i).to_dict()) == reported[m.seed], f"seed {m.seed}"
            assert m.source == "world_model" and st.episode(i).length == 4


# -- the refilling runner (continuous batching) ------------------------------------------

GOAL = 10.0
COUNTER_SPEC = WorldSpec(
    name="counter",
    image_shape=(2, 2, 3),
    action_dim=1,
    state_dim=1,
    fps=1.0,
    action_meaning="increment",
    action_low=(0.0,),
    action_high=(9.0,),
    task="count to 10",
)


@dataclass(frozen=True)
class Job:
    seed: int
    steps: int
    stop: bool = False


class Counting:
    """Adds ``1 + seed % 3`` every step."""

    name = "counting"

    def params(self) -> dict[str, Any]:
        return {"inc": self.inc}

    def reset(self, seed: int, obs: Observation) -> None:
        self.inc = 1.0 + seed % 3

    def act(self, obs: Observation) -> np.ndarray:
        return np.array([self.inc], np.float32)


class Counters:
    """A world whose rows count (each is its start, ``seed % 5``, plus its actions; success
    from 10 on) and its slots: rows restart alone and, if ``drops``, can be dropped. It
    logs the actions of every step."""

    spec = COUNTER_SPEC

    def __init__(self, size: int, drops: bool = True) -> None:
        self.size, self.drops = size, drops
        self.value = np.zeros(0)
        self.steps: list[np.ndarray] = []

    @property
    def batch_size(self) -> int:
        return len(self.value)

    def _obs(self) -> WorldObs:
        v = self.value.astype(np.float32)
        return WorldObs(
            frames=np.broadcast_to(v.astype(np.uint8)[:, None, None, None], (len(v), 2, 2, 3)),
            state=v[:, None],
            task_state=v[:, None],
            score=np.minimum(v / GOAL, 1.0),
            success=v >= GOAL,
        )

    def _starts(self, rows: list[int], jobs: list[Job]) -> list[Start]:
        obs = self._obs()
        specs = [EpisodeSpec(j.seed, j.steps, j.stop, extra={"steps": j.steps}) for j in jobs]
        return [Start(Counting(), spec, obs.item(r)) for r, spec in zip(rows, specs, strict=True)]

    def open(self, jobs: list[Job]) -> list[Start]:
        self.value = np.array([float(j.seed % 5) for j in jobs])
        return self._starts(list(range(len(jobs))), jobs)

    def start(self, rows: list[int], jobs: list[Job]) -> list[Start]:
        for r, j in zip(rows, jobs, strict=True):
            self.value[r] = j.seed % 5
        return self._starts(rows, jobs)

    def keep(self, rows: list[int]) -> bool:
        if self.drops:
            self.value = self.value[rows]
        return self.drops

    def step(self, actions: np.ndarray) -> WorldObs:
        self.steps.append(actions.copy())
        self.value = self.value + actions[:, 0]
        return self._obs()

    def reset(self, seeds: Any = None, configs: Any = None) -> WorldObs:
        raise AssertionError("the slots start the rows")

    def close(self) -> None:
        pass


def _stream(jobs: list[Job], size: int, drops: bool = True) -> tuple[dict[int, Any], Counters]:
    world = Counters(size, drops)
    out = list(EpisodeRunner(world, source="real").stream(jobs, world))  # type: ignore[arg-type]
    by_seed = {ep.meta.seed: ep for ep in out}
    assert len(out) == len(jobs) == len(by_seed)  # exactly one episode per job
    return by_seed, world


def _expected(job: Job) -> tuple[np.ndarray, bool]:
    """The known answer: a row counts from seed % 5 by 1 + seed % 3 until its budget, or
    (stopping on success) until it reaches 10, which is recorded once more (the hold
    frame); its states and whether it succeeded."""
    start, inc = job.seed % 5, 1 + job.seed % 3
    first = int(np.ceil((GOAL - start) / inc))  # the first step that reaches the goal
    n = first + 1 if job.stop and first <= job.steps else job.steps
    return (start + inc * np.arange(n)).astype(np.float32), first <= job.steps


JOBS = [Job(s, steps, stop) for s, steps, stop in [
    (0, 3, False), (1, 8, True), (2, 4, True), (3, 12, True), (4, 2, False),
    (5, 6, False), (6, 9, True), (7, 1, True), (8, 5, False),
]]  # fmt: skip


def test_stream_gives_each_job_its_own_episode_whatever_the_batch_or_order() -> None:
    results = [_stream(JOBS, 3)[0], _stream(JOBS[::-1], 2)[0], _stream(JOBS, 1)[0]]
    for job in JOBS:
        want, success = _expected(job)
        for by_seed in results:
            ep = by_seed[job.seed]
            np.testing.assert_array_equal(ep.data["state"][:, 0], want)
            np.testing.assert_array_equal(ep.data["image"][:, 0, 0, 0], want.astype(np.uint8))
            assert ep.meta.success == success
            assert ep.meta.extra["steps"] == job.steps and ep.meta.generator_params["inc"] > 0
            for key in ("image", "action", "state", "task_state"):
                np.testing.assert_array_equal(ep.data[key], results[0][job.seed].data[key])


def test_stream_stop_on_success_records_the_hold_frame() -> None:
    job = Job(seed=1, steps=20, stop=True)  # 1, 3, 5, 7, 9, 11: success at step 5
    (ep,) = _stream([job], 2)[0].values()
    np.testing.assert_array_equal(ep.data["state"][:, 0], [1, 3, 5, 7, 9, 11])
    assert ep.frames == 6 and ep.meta.success and ep.meta.score == 1.0
    np.testing.assert_array_equal(ep.data["action"][-1], ep.data["action"][-2])  # held
    budget = Job(seed=1, steps=5, stop=True)  # the success comes on the budget's last step
    (ep,) = _stream([budget], 2)[0].values()
    assert ep.frames == 6 and ep.meta.success


def test_stream_refills_then_shrinks_the_tail() -> None:
    """Batch 2, budgets 2, 6, 3: job 2 takes row 0 after step 2; after step 5 only job 1 is
    left, so the last step runs on one row. A world that cannot drop rows holds them."""
    jobs = [Job(0, 2), Job(1, 6), Job(2, 3)]
    dropped, world = _stream(jobs, 2)
    assert [len(a) for a in world.steps] == [2, 2, 2, 2, 2, 1]
    held, still = _stream(jobs, 2, drops=False)
    assert [len(a) for a in still.steps] == [2] * 6
    np.testing.assert_array_equal(still.steps[5][0], still.steps[4][0])  # row 0 holds job 2's
    np.testing.assert_array_equal(still.steps[2][0], [1.0 + 2 % 3])  # job 2 from step 3 on
    for seed, ep in dropped.items():
        np.testing.assert_array_equal(ep.data["state"], held[seed].data["state"])


def test_lockstep_run_returns_row_order() -> None:
    class Lockstep(Counters):
        def reset(self, seeds: Any = None, configs: Any = None) -> WorldObs:
            self.value = np.asarray(seeds, np.float64) % 5
            return self._obs()

    world = Lockstep(3)
    world.value = np.zeros(3)  # three rows before the reset
    specs = [EpisodeSpec(s, n) for s, n in ((4, 5), (0, 1), (2, 3))]
    runner = EpisodeRunner(world, source="real")  # type: ignore[arg-type]
    out = runner.run([Counting() for _ in specs], specs)
    assert [ep.meta.seed for ep in out] == [4, 0, 2] and [ep.frames for ep in out] == [5, 1, 3]
    assert [len(a) for a in world.steps] == [3] * 5  # finished rows hold, the batch stays
