"""DART noise injection: the wrapper's noise, the labels in the store, their export.

Known answers: the wrapped generator's own actions are the labels; replaying a noisy
episode's stored ``action`` reproduces its states exactly (so ``action`` is what was
executed); the noise's empirical std and lag-1 correlation match its parameters.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from factories import assert_one_line_error, tiny_world_model
from typer.testing import CliRunner

from factory.errors import FactoryError
from factory.gen import GenJob, RolloutEngine
from factory.generators import labels_actions, make_generator
from factory.generators.dart import ActionNoise, NoisyExecution
from factory.record.recorder import EpisodeRecorder
from factory.store import EpisodeStore
from factory.world import Observation
from pipelines.cli import app

runner = CliRunner()


def _obs() -> Observation:
    return Observation(
        frame=np.zeros((8, 8, 3), np.uint8),
        state=np.array([100.0, 200.0], np.float32),
        task_state=np.zeros(3, np.float32),
        score=0.0,
        success=False,
    )


def _noise(gen: NoisyExecution, seed: int, steps: int) -> np.ndarray:
    """(steps, 2) executed minus label, for one episode from ``seed``."""
    obs = _obs()
    gen.reset(seed, obs)
    out = []
    for _ in range(steps):
        action = gen.act(obs)
        assert gen.last_label is not None
        np.testing.assert_array_equal(gen.last_label, [100.0, 200.0])  # hold_still's target
        out.append(action - gen.last_label)
    return np.asarray(out)


@pytest.mark.parametrize("corr", [0.0, 0.8])
def test_noise_has_its_std_and_correlation(corr: float) -> None:
    gen = make_generator("hold_still", action_noise=5.0, action_noise_corr=corr)
    assert isinstance(gen, NoisyExecution) and gen.name == "hold_still"
    eps = _noise(gen, seed=3, steps=20000)
    assert abs(eps.std() - 5.0) < 0.15
    lag1 = np.mean([np.corrcoef(eps[:-1, d], eps[1:, d])[0, 1] for d in range(2)])
    assert abs(lag1 - corr) < 0.03


def test_noise_comes_from_the_episode_seed() -> None:
    gen = make_generator("hold_still", action_noise=2.0)
    assert isinstance(gen, NoisyExecution)
    a, b, c = _noise(gen, 7, 30), _noise(gen, 7, 30), _noise(gen, 8, 30)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


class _Precise:
    """Holds (1, 2); every third step needs precision."""

    name = "precise"

    def __init__(self) -> None:
        self.t = 0
        self.told: list[np.ndarray] = []

    def params(self) -> dict:
        return {}

    def reset(self, seed: int, obs: Observation) -> None:
        self.t = 0

    def act(self, obs: Observation) -> np.ndarray:
        self.t += 1
        return np.array([1.0, 2.0], np.float32)

    def needs_precision(self) -> bool:
        return self.t % 3 == 0

    def executed(self, action: np.ndarray) -> None:
        self.told.append(action)


def test_precise_steps_go_unperturbed_and_the_inner_is_told() -> None:
    inner = _Precise()
    gen = NoisyExecution(inner, ActionNoise(4.0))
    gen.reset(0, _obs())
    actions = np.array([gen.act(_obs()) for _ in range(30)])
    quiet = np.arange(1, 31) % 3 == 0
    np.testing.assert_array_equal(actions[quiet], np.tile([1.0, 2.0], (10, 1)))
    assert np.all(np.abs(actions[~quiet] - [1.0, 2.0]).sum(1) > 0)
    np.testing.assert_array_equal(np.array(inner.told), actions)


def test_params_and_refusals() -> None:
    gen = make_generator("expert", action_noise=4)
    assert gen.name == "expert" and gen.params()["action_noise"] == 4.0
    assert "settle_tol" in gen.params()  # the expert's own knobs stay in the provenance
    assert not isinstance(make_generator("expert", action_noise=0), NoisyExecution)
    assert labels_actions({"action_noise": 1.0}) and not labels_actions({})
    for bad in ({"action_noise": -1.0}, {"action_noise": "x"}, {"action_noise_corr": 0.5},
                {"action_noise": 1.0, "action_noise_corr": 1.0}):  # fmt: skip
        with pytest.raises(FactoryError, match="action_noise"):
            make_generator("expert", **bad)


def test_a_recording_is_labelled_throughout_or_not_at_all() -> None:
    rec = EpisodeRecorder()
    rec.record(_obs(), np.zeros(2, np.float32), np.ones(2, np.float32))
    with pytest.raises(FactoryError, match="labelled"):
        rec.record(_obs(), np.zeros(2, np.float32))
    assert rec.data()["action_label"].shape == (1, 2)
    clean = EpisodeRecorder()
    clean.record(_obs(), np.zeros(2, np.float32))
    with pytest.raises(FactoryError, match="labelled"):
        clean.record(_obs(), np.zeros(2, np.float32), np.ones(2, np.float32))
    assert "action_label" not in clean.data()


@pytest.fixture(scope="module")
def noisy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 expert episodes of at most 150 steps, executed with 6 px of noise (the first
    succeeds, seed 0: about 60 steps)."""
    out = tmp_path_factory.mktemp("dart") / "noisy.zarr"
    args = ["collect", "--generator", "expert", "--episodes", "2", "--steps", "150"]
    result = runner.invoke(
        app, [*args, "--resolution", "32", "--action-noise", "6", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


def test_the_store_keeps_executed_actions_and_labels(noisy: Path, tmp_path: Path) -> None:
    with EpisodeStore.open(noisy) as store:
        data = store.load()
        params = store.all_meta()[0].generator_params
    assert params["action_noise"] == 6.0
    diff = data["action"] - data["action_label"]
    assert 3.0 < diff.std() < 9.0  # the executed actions carry the noise
    quiet = np.abs(diff).sum(axis=1) == 0  # the expert's final approaches to a stroke start
    assert 0.0 < quiet.mean() < 0.5
    replayed = tmp_path / "replayed.zarr"
    args = ["collect", "--generator", "replay", "--source", str(noisy), "--episodes", "2"]
    result = runner.invoke(app, [*args, "--resolution", "32", "--out", str(replayed)])
    assert result.exit_code == 0, result.output
    with EpisodeStore.open(replayed) as store:
        again = store.load()
    assert "action_label" not in again  # a replay executes without noise: nothing to label
    np.testing.assert_allclose(again["task_state"], data["task_state"], atol=1e-4)


def test_a_success_holds_the_last_action_and_its_label(noisy: Path) -> None:
    with EpisodeStore.open(noisy) as store:
        assert store.all_meta()[0].success
        ep = store.episode(0).to_dict()
    for key in ("action", "action_label"):  # the success frame repeats the step before it
        np.testing.assert_array_equal(ep[key][-1], ep[key][-2])
    assert not np.array_equal(ep["action"][-1], ep["action_label"][-1])


def test_appending_other_labelling_is_refused(noisy: Path) -> None:
    args = ["collect", "--generator", "expert", "--episodes", "3", "--steps", "25"]
    result = runner.invoke(app, [*args, "--resolution", "32", "--append", "--out", str(noisy)])
    assert_one_line_error(result, "action_label")


def test_export_writes_the_labels_as_action(noisy: Path, tmp_path: Path) -> None:
    pytest.importorskip("lerobot.datasets.lerobot_dataset")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    out = tmp_path / "labels"
    args = ["export", "lerobot", str(noisy), str(out), "--repo-id", "local/dart"]
    obs = ["--obs", "environment_state_agent_pos", "--actions", "label"]
    result = runner.invoke(app, [*args, *obs])
    assert result.exit_code == 0, result.output
    ds = LeRobotDataset("local/dart", root=out)
    assert "action_label" not in ds.meta.features
    with EpisodeStore.open(noisy) as store:
        data = store.load()
    np.testing.assert_array_equal(np.stack(ds.hf_dataset.with_format("numpy")["action"]),
                                  data["action_label"])  # fmt: skip


def test_export_of_labels_from_an_unlabelled_store_is_one_line(tmp_path: Path) -> None:
    clean = tmp_path / "clean.zarr"
    args = ["collect", "--generator", "play", "--episodes", "1", "--steps", "3"]
    assert runner.invoke(app, [*args, "--resolution", "32", "--out", str(clean)]).exit_code == 0
    args = ["export", "lerobot", str(clean), str(tmp_path / "x"), "--repo-id", "local/x"]
    result = runner.invoke(app, [*args, "--actions", "label"])
    assert_one_line_error(result, "action_label", "--actions executed")
    assert not (tmp_path / "x").exists()


def test_the_engine_labels_generated_episodes() -> None:
    """Inside a world model too: the same runner records the labels."""
    eng = RolloutEngine(tiny_world_model(), make_generator, batch_size=2, seed=0)
    params = {"action_noise": 3.0}
    jobs = [GenJob(seed=s, generator="play", generator_params=params, steps=6) for s in (1, 2)]
    episodes = list(eng.run(jobs))
    eng.close()
    for ep in episodes:
        label, action = ep.data["action_label"], ep.data["action"]
        assert label.shape == action.shape == (6, 2)
        assert 0.5 < np.abs(action - label).mean() < 10.0
        assert ep.meta.generator_params["action_noise"] == 3.0


@pytest.mark.parametrize("flags", [["--action-noise", "-1"], ["--action-noise", "nan"],
                                   ["--action-noise-corr", "0.5"]])  # fmt: skip
def test_bad_noise_is_one_line_and_writes_nothing(tmp_path: Path, flags: list[str]) -> None:
    out = tmp_path / "x.zarr"
    args = ["collect", "--generator", "expert", "--episodes", "1", "--out", str(out)]
    assert_one_line_error(runner.invoke(app, [*args, *flags]), "action_noise")
    assert not out.exists()


@pytest.mark.parametrize(
    ("generator", "flags", "needle"),
    [("expert", ["--param", "warp=1"], "warp"), ("replay", ["--param", "settle_tol=3"], "--param"),
     ("expert", ["--action-noise", "-2"], "action_noise")],
)  # fmt: skip
def test_generate_checks_generator_knobs_before_work(
    tmp_path: Path, generator: str, flags: list[str], needle: str
) -> None:
    out = tmp_path / "g.zarr"
    args = ["generate", "--generator", generator, "--episodes", "1", "--out", str(out)]
    assert_one_line_error(runner.invoke(app, [*args, *flags]), needle)
    assert not out.exists()
