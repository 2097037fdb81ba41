"""The one recorder and the batched runner; output checks that create nothing; the files
of a model directory; and a SIGKILL during generation that loses nothing committed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import write_tiny_model_dir

from factory.envs.pusht import PushTWorld
from factory.errors import FactoryError
from factory.generators import make_generator
from factory.model.files import model_files, model_identity
from factory.record import EpisodeRecorder, check_output, open_output
from factory.record.runner import EpisodeRunner, EpisodeSpec, run_episode
from factory.store import EpisodeStore
from factory.world import Observation
from pipelines.generate_ray import pack_model

REPO = Path(__file__).resolve().parents[1]
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
    assert data["gt_state"].shape == (3, 3) and len(rec) == 3
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
        for key in ("image", "action", "state", "gt_state"):
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
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(store), str(model)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
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
