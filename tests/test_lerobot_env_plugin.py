"""``--env.type=demofactory`` (plugins/lerobot_env_demofactory) on a tiny model: lerobot's
registry finds it, it matches lerobot's ``pusht`` env, and it steps all rows in one pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import write_tiny_model_dir

pytest.importorskip("lerobot.envs.configs")

from lerobot.envs.configs import EnvConfig, PushtEnv
from lerobot_env_demofactory import DemofactoryEnv

from exporters.lerobot_plugin import PluginInputError
from factory.envs.model_vector_env import ModelVectorEnv

SIZE = 32  # the tiny model's frames


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model")


def make_env(model: Path, n: int = 3, **kw: Any) -> ModelVectorEnv:
    cfg = DemofactoryEnv(model=str(model), device="cpu", **kw)
    env = cfg.create_envs(n_envs=n)["demofactory"][0]
    assert isinstance(env, ModelVectorEnv)
    return env


def test_features_match_lerobot_pusht() -> None:
    ours = DemofactoryEnv()
    theirs = PushtEnv()
    assert ours.features == theirs.features
    assert ours.features_map == theirs.features_map
    assert (ours.fps, ours.episode_length, ours.task) == (theirs.fps, 300, theirs.task)
    assert EnvConfig.get_choice_class("demofactory") is DemofactoryEnv


def test_spaces_and_observations_match_gym_pusht(tiny_dir: Path) -> None:
    from lerobot.envs.utils import preprocess_observation

    gt = PushtEnv().create_envs(2)["pusht"][0]  # gym-pusht's frames: 96 x 96
    env = make_env(tiny_dir, n=2, image_size=96)  # the tiny model's 32 px, resized
    try:
        assert env.single_observation_space == gt.single_observation_space
        assert env.single_action_space == gt.single_action_space
        assert env.observation_space == gt.observation_space
        ours, _ = env.reset(seed=[0, 1])
        theirs, _ = gt.reset(seed=[0, 1])
        for key in theirs:
            assert ours[key].shape == theirs[key].shape and ours[key].dtype == theirs[key].dtype
        step = env.step(np.full((2, 2), 256.0, np.float32))
        gt_step = gt.step(np.full((2, 2), 256.0, np.float32))
        for a, b in zip(step[:4], gt_step[:4], strict=True):
            assert np.asarray(a).dtype == np.asarray(b).dtype
            assert np.shape(a) == np.shape(b) or isinstance(a, dict)
        assert step[4]["is_success"].dtype == bool and step[4]["is_success"].shape == (2,)
        batch = preprocess_observation(step[0])
        assert set(batch) == {"observation.image", "observation.state"}
        assert tuple(batch["observation.image"].shape) == (2, 3, 96, 96)
    finally:
        env.close()
        gt.close()


def test_batched_step_is_one_forward_pass(tiny_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = make_env(tiny_dir, n=4)
    dyn = env.world.model.dynamics
    assert dyn is not None
    calls: list[int] = []
    original = dyn.sample_chunk

    def counted(window: Any, *args: Any) -> Any:
        calls.append(int(window.shape[0]))
        return original(window, *args)

    monkeypatch.setattr(dyn, "sample_chunk", counted)
    env.reset(seed=0)
    env.step(np.full((4, 2), 200.0, np.float32))
    env.step(np.full((4, 2), 300.0, np.float32))
    assert calls == [4, 4]


def test_seeded_resets_are_reproducible(tiny_dir: Path) -> None:
    def run(seeds: list[int]) -> list[np.ndarray]:
        env = make_env(tiny_dir, n=2)
        obs, _ = env.reset(seed=seeds)
        frames = [obs["pixels"]]
        for t in range(3):
            obs = env.step(np.full((2, 2), 150.0 + 50 * t, np.float32))[0]
            frames.append(obs["pixels"])
        env.close()
        return frames

    a, b, c = run([5, 6]), run([5, 6]), run([7, 8])
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0])


def test_episode_ends_at_length_limit_then_freezes(tiny_dir: Path) -> None:
    env = make_env(tiny_dir, n=2, episode_length=3)
    env.reset(seed=0)
    act = np.full((2, 2), 256.0, np.float32)
    truncs = [env.step(act)[3].tolist() for _ in range(3)]
    assert truncs == [[False, False], [False, False], [True, True]]
    last = env.render()
    obs, reward, _, truncated, _ = env.step(act + 50)
    assert truncated.all() and (reward == 0).all()
    assert np.array_equal(obs["pixels"], np.stack(last))
    assert env.call("_max_episode_steps") == (3, 3)


def test_episode_ends_at_success(tiny_dir: Path) -> None:
    env = make_env(tiny_dir, n=2, episode_length=10)
    env.reset(seed=0)
    count = {"t": 0}

    def score(task_state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        count["t"] += 1
        cov = np.array([0.97 if count["t"] >= 2 else 0.5, 0.1], np.float32)
        return cov, cov > 0.95

    env.world._score = score
    act = np.full((2, 2), 256.0, np.float32)
    first = env.step(act)
    assert first[1][0] == pytest.approx(0.5 / 0.95) and not first[2].any()
    _, reward, terminated, truncated, info = env.step(act)
    assert terminated.tolist() == [True, False] and not truncated.any()
    assert info["is_success"].tolist() == [True, False] and reward[0] == 1.0
    assert env.step(act)[1][0] == 0.0  # frozen after its end


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"model": "/nonexistent/model"}, "no model directory /nonexistent/model"),
        ({"device": "tpu"}, "unknown device 'tpu'"),
    ],
)
def test_bad_input_is_one_line(tiny_dir: Path, kw: dict[str, str], needle: str) -> None:
    cfg = DemofactoryEnv(**{"model": str(tiny_dir), "device": "cpu", **kw})
    with pytest.raises(PluginInputError) as err:
        cfg.create_envs(2)
    assert needle in str(err.value) and "\n" not in str(err.value) and err.value.code == 2


def test_non_pusht_model_is_refused(tmp_path: Path) -> None:
    model = write_tiny_model_dir(tmp_path / "a3", action_dim=3)
    with pytest.raises(PluginInputError, match="action_dim 3"):
        DemofactoryEnv(model=str(model), device="cpu").create_envs(1)


def test_lerobot_eval_and_discovery_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """One fresh interpreter (no import of ours beforehand; lerobot's import is the slow
    part, so one serves both): lerobot's ``lerobot-eval`` script, run as its console
    script runs it, refuses a missing model with one line and exit 2, no traceback; and
    the discovery it ran (lerobot's own) registered both plugins, env and robot."""
    exe = str(Path(sys.executable).parent / "lerobot-eval")
    args = ["--policy.type=act", "--policy.device=cpu", "--env.type=demofactory"]
    args += ["--env.model=/nonexistent/m", "--env.device=cpu", f"--output_dir={tmp_path / 'out'}"]
    code = (
        "import runpy, sys\n"
        f"sys.argv = [{exe!r}, *{args!r}]\n"
        "try:\n"
        f"    runpy.run_path({exe!r}, run_name='__main__')\n"
        "    status = 0\n"
        "except SystemExit as exit:\n"
        "    status = exit.code\n"
        "from lerobot.envs.configs import EnvConfig\n"
        "from lerobot.robots.config import RobotConfig\n"
        "print('status', status, EnvConfig.get_choice_class('demofactory').__name__,"
        " RobotConfig.get_choice_class('demofactory').__name__)"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stdout.split()[-4:] == ["status", "2", "DemofactoryEnv", "DemofactoryRobotConfig"]
    ours = [line for line in proc.stderr.splitlines() if line.startswith("demofactory:")]
    assert len(ours) == 1 and ours[0].startswith("demofactory: no model directory /nonexistent/m")
