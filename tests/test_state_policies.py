"""State observations as lerobot's ``pusht`` env gives them (``environment_state_agent_pos``):
the keypoints, their export, the in-model env's observation, and the in-RAM policy trainer.

Known answers throughout: gym-pusht's own keypoints, lerobot's own dataset query, and
lerobot's own checkpoint loader.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from factories import assert_one_line_error, write_tiny_object_state_dir
from typer.testing import CliRunner

from factory.envs import pusht_geometry as geo
from factory.store import EpisodeStore
from pipelines.cli import app

pytest.importorskip("lerobot.datasets.lerobot_dataset")
from lerobot.datasets.lerobot_dataset import LeRobotDataset

runner = CliRunner()
REPO = "local/state"
STATE_OBS = "environment_state_agent_pos"


@pytest.fixture(scope="module")
def pusht(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 expert PushT episodes of at most 20 steps."""
    out = tmp_path_factory.mktemp("src") / "pusht.zarr"
    args = ["collect", "--generator", "expert", "--episodes", "3", "--steps", "20"]
    result = runner.invoke(app, [*args, "--resolution", "32", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def state_export(pusht: Path) -> Path:
    out = pusht.parent / "state"
    args = ["export", "lerobot", str(pusht), str(out), "--repo-id", REPO, "--obs", STATE_OBS]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


def test_keypoints_are_gym_pushts() -> None:
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("gym_pusht")
    env = gym.make("gym_pusht/PushT-v0", obs_type=STATE_OBS)
    rng = np.random.default_rng(0)
    try:
        for seed in (0, 7):
            obs, info = env.reset(seed=seed)
            for _ in range(15):
                obs, *_, info = env.step(rng.uniform(50, 460, 2))
                ours = geo.keypoints(np.asarray(info["block_pose"]))
                np.testing.assert_allclose(ours, obs["environment_state"], atol=1e-9)
    finally:
        env.close()
    poses = rng.uniform(0, 6, (4, 5, 3))
    assert geo.keypoints(poses).shape == (4, 5, 16)


def test_state_export_holds_keypoints_of_the_block_pose(pusht: Path, state_export: Path) -> None:
    ds = LeRobotDataset(REPO, root=state_export)
    assert not ds.meta.video_keys and not ds.meta.image_keys
    assert set(ds.meta.features) >= {"action", "observation.state", "observation.environment_state"}
    assert "task_state" not in ds.meta.features
    cols = ds.hf_dataset.with_format("numpy")
    with EpisodeStore.open(pusht) as store:
        data = store.load()
    kps = np.stack(cols["observation.environment_state"])
    np.testing.assert_allclose(kps, geo.keypoints(data["task_state"]), atol=1e-3)
    np.testing.assert_array_equal(np.stack(cols["observation.state"]), data["state"])


def test_pixels_export_has_no_keypoints(pusht: Path, tmp_path: Path) -> None:
    out = tmp_path / "pix"
    args = ["export", "lerobot", str(pusht), str(out), "--repo-id", REPO, "--images"]
    result = runner.invoke(app, [*args, "--obs", "pixels_agent_pos"])
    assert result.exit_code == 0, result.output
    features = json.loads((out / "meta" / "info.json").read_text())["features"]
    assert "observation.image" in features and "observation.environment_state" not in features


@pytest.mark.parametrize(
    ("obs", "drop", "needle"),
    [("environment_state_agent_pos", "task_state", "block pose"), ("nope", None, "--obs")],
)
def test_state_export_refusals(
    pusht: Path, tmp_path: Path, obs: str, drop: str | None, needle: str
) -> None:
    src = pusht
    if drop is not None:  # a store without the block pose
        from factory.store import merge_stores

        src = tmp_path / "no_pose.zarr"
        merge_stores(
            [pusht], src, episodes=[[0]], attrs={"task_state_names": ["a", "b", "c"]}
        ).close()
    out = tmp_path / "out"
    result = runner.invoke(app, ["export", "lerobot", str(src), str(out), "--repo-id", REPO,
                                 "--obs", obs])  # fmt: skip
    assert_one_line_error(result, needle)
    assert not out.exists()


def test_frame_table_batches_like_lerobots_query(state_export: Path) -> None:
    from policies.train import FrameTable

    deltas = {"action": list(range(-1, 6)), "observation.state": [-1, 0]}
    fps = 10
    ds = LeRobotDataset(
        REPO,
        root=state_export,
        delta_timestamps={k: [d / fps for d in v] for k, v in deltas.items()},
    )
    keys = ["action", "observation.state", "observation.environment_state"]
    table = FrameTable.from_dataset(ds, keys)
    index = np.array([0, 3, len(ds) - 1, int(ds.meta.episodes[1]["dataset_from_index"])])
    ours = table.batch(index, {**deltas, "observation.environment_state": None})
    for row, i in enumerate(index):
        item = ds[int(i)]
        for key in keys:
            np.testing.assert_allclose(ours[key][row].numpy(), item[key].numpy(), atol=1e-6)
        for key in deltas:
            pad = f"{key}_is_pad"
            np.testing.assert_array_equal(ours[pad][row].numpy(), item[pad].numpy())


def test_trainer_writes_what_lerobot_loads_and_learns(state_export: Path, tmp_path: Path) -> None:
    """A tiny ACT: its loss falls well below the first steps', and lerobot's own loaders
    read the checkpoint back into a policy that acts."""
    import torch
    from lerobot.policies import make_pre_post_processors
    from lerobot.policies.act.modeling_act import ACTPolicy

    from policies.train import PolicyTrainConfig, train_policy

    tiny = dict(dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1,
                n_decoder_layers=1, chunk_size=4, n_action_steps=2, use_vae=False,
                optimizer_lr=1e-3)  # fmt: skip
    losses: list[float] = []
    cfg = PolicyTrainConfig(
        root=state_export, repo_id=REPO, out=tmp_path / "run", overrides=tiny, steps=120,
        batch_size=16, save_steps=[60],
    )  # fmt: skip
    info = train_policy(cfg, lambda s, n, loss: losses.append(loss))
    assert info["checkpoints"] == [60, 120] and info["cpu_s"] > 0
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:5])
    ckpt = tmp_path / "run" / "checkpoints" / "000120" / "pretrained_model"
    policy = ACTPolicy.from_pretrained(ckpt)
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(ckpt))
    obs = {
        "observation.state": torch.tensor([[200.0, 300.0]]),
        "observation.environment_state": torch.from_numpy(
            geo.keypoints(np.array([[250.0, 250.0, 0.5]])).astype(np.float32)
        ),
    }
    action = post(policy.select_action(pre(obs)))
    assert tuple(action.shape) == (1, 2) and torch.isfinite(action).all()


def test_cosine_schedule_decays_to_its_floor(state_export: Path, tmp_path: Path) -> None:
    from factory.errors import FactoryError
    from policies.train import COSINE_FLOOR, PolicyTrainConfig, train_policy

    tiny = dict(dim_model=16, n_heads=2, dim_feedforward=32, n_encoder_layers=1,
                n_decoder_layers=1, chunk_size=4, n_action_steps=2, use_vae=False,
                optimizer_lr=1e-3)  # fmt: skip
    base = PolicyTrainConfig(root=state_export, repo_id=REPO, out=tmp_path / "a",
                             overrides=tiny, steps=40, batch_size=4)  # fmt: skip
    assert train_policy(base)["lr_last"] == pytest.approx(1e-3)  # ACT's preset: constant
    cosine = dataclasses.replace(base, out=tmp_path / "b", lr_schedule="cosine")
    assert train_policy(cosine)["lr_last"] == pytest.approx(1e-3 * COSINE_FLOOR, rel=1e-3)
    with pytest.raises(FactoryError, match="--lr-schedule must be one of preset, cosine"):
        train_policy(dataclasses.replace(base, lr_schedule="linear"))


def test_weight_ema_averages_like_diffusion_policys() -> None:
    """The shadow follows ``shadow += (1 - decay_t) * (live - shadow)`` with decay_t =
    min(max, 1 - (1 + t) ** -0.75); inside ``applied`` the module holds it, after it
    holds its own weights again."""
    import torch

    from policies.train import WeightEma

    lin = torch.nn.Linear(3, 2)
    ema = WeightEma(lin, max_decay=0.5)
    expect = [p.detach().clone() for p in lin.parameters()]
    for t in range(1, 6):
        with torch.no_grad():
            for p in lin.parameters():
                p.add_(float(t))
        ema.update()
        d = min(0.5, 1 - (1 + t) ** -0.75)
        expect = [
            e + (1 - d) * (p.detach() - e) for e, p in zip(expect, lin.parameters(), strict=True)
        ]
    assert ema.decay() == 0.5  # 1 - 6 ** -0.75 = 0.74 is capped
    live = [p.detach().clone() for p in lin.parameters()]
    with ema.applied():
        for e, p in zip(expect, lin.parameters(), strict=True):
            torch.testing.assert_close(p.detach(), e)
    for w, p, e in zip(live, lin.parameters(), expect, strict=True):
        assert torch.equal(w, p.detach()) and not torch.allclose(w, e)


def test_ema_checkpoint_holds_the_average_not_the_last_weights(
    state_export: Path, tmp_path: Path
) -> None:
    from lerobot.policies.act.modeling_act import ACTPolicy

    from factory.errors import FactoryError
    from policies.train import PolicyTrainConfig, train_policy

    tiny = dict(dim_model=16, n_heads=2, dim_feedforward=32, n_encoder_layers=1,
                n_decoder_layers=1, chunk_size=4, n_action_steps=2, use_vae=False,
                optimizer_lr=1e-3)  # fmt: skip
    base = PolicyTrainConfig(root=state_export, repo_id=REPO, out=tmp_path / "a",
                             overrides=tiny, steps=30, batch_size=4)  # fmt: skip
    train_policy(base)
    train_policy(dataclasses.replace(base, out=tmp_path / "b", ema=0.9))
    ckpt = Path("checkpoints", "000030", "pretrained_model")
    plain, avg = (ACTPolicy.from_pretrained(tmp_path / r / ckpt) for r in "ab")
    # the same seed and batches: the raw weights are the same, so any gap is the average
    gaps = [
        (a - b).abs().max().item()
        for a, b in zip(plain.parameters(), avg.parameters(), strict=True)
    ]
    assert max(gaps) > 1e-4
    with pytest.raises(FactoryError, match="--ema must be 0"):
        train_policy(dataclasses.replace(base, out=tmp_path / "c", ema=1.5))
    assert not (tmp_path / "c").exists()


def test_trainer_refuses_cameras(pusht: Path, tmp_path: Path) -> None:
    from policies.train import PolicyTrainConfig, train_policy

    out = tmp_path / "pix"
    args = ["export", "lerobot", str(pusht), str(out), "--repo-id", REPO, "--images"]
    assert runner.invoke(app, args).exit_code == 0
    cfg = PolicyTrainConfig(root=out, repo_id=REPO, out=tmp_path / "run", steps=2)
    from factory.errors import FactoryError

    with pytest.raises(FactoryError, match="state-only"):
        train_policy(cfg)


def test_model_env_gives_keypoints_of_its_own_state(tmp_path: Path) -> None:
    from lerobot.envs.configs import PushtEnv
    from lerobot_env_demofactory import DemofactoryEnv

    model = write_tiny_object_state_dir(tmp_path / "model")
    cfg = DemofactoryEnv(model=str(model), device="cpu", obs_type=STATE_OBS)
    assert cfg.features == PushtEnv(obs_type=STATE_OBS).features
    env = cfg.create_envs(n_envs=2)["demofactory"][0]
    try:
        seen: list = []
        step = env.world.step
        env.world.step = lambda a: seen.append(step(a)) or seen[-1]  # type: ignore[method-assign]
        obs, _ = env.reset(seed=[3, 4])
        assert set(obs) == {"agent_pos", "environment_state"}
        for t in range(3):
            obs, *_ = env.step(np.full((2, 2), 200.0 + 30 * t, np.float32))
            own = seen[-1].task_state  # the model's own block pose
            np.testing.assert_allclose(obs["environment_state"], geo.keypoints(own), atol=1e-4)
        assert env.observation_space["environment_state"].shape == (2, 16)
        assert len(env.render()) == 2
    finally:
        env.close()


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--config", "[1, 2]"], "JSON object"),
        (["--config", "{nope"], "JSON object"),
        (["--config", '{"no_such_field": 1}'], "no_such_field"),
        (["--steps", "0"], "steps"),
        (["--ema", "1.5"], "--ema must be 0"),
    ],
)
def test_policy_train_bad_input_is_one_line(
    state_export: Path, tmp_path: Path, extra: list[str], needle: str
) -> None:
    out = tmp_path / "run"
    args = ["policy", "train", str(state_export), str(out), "--repo-id", REPO, *extra]
    assert_one_line_error(runner.invoke(app, args), needle)
    assert not (out / "checkpoints").exists()


def test_policy_train_missing_dataset_is_one_line(tmp_path: Path) -> None:
    args = ["policy", "train", str(tmp_path / "nope"), str(tmp_path / "run"), "--repo-id", REPO]
    assert_one_line_error(runner.invoke(app, args), "not a LeRobot dataset")
