"""The ground-truth PushT world and the env-free T geometry."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from factory.envs import WORLDS, make_world
from factory.envs import pusht_geometry as geo
from factory.envs.pusht import PushTWorld
from factory.errors import FactoryError
from factory.world import World


@pytest.fixture(scope="module")
def world() -> Iterator[PushTWorld]:
    w = PushTWorld(batch_size=1)
    yield w
    w.close()


def _actions(seed: int, steps: int, batch: int = 1) -> np.ndarray:
    """Random actions that mostly hit the block (around the board centre)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(150.0, 360.0, size=(steps, batch, 2)).astype(np.float32)


def test_registry_and_spec() -> None:
    assert "pusht" in WORLDS
    w = make_world("pusht", batch_size=2, resolution=96)
    assert isinstance(w, World)
    s = w.spec
    assert s.name == "pusht" and s.image_shape == (96, 96, 3)
    assert (s.action_dim, s.state_dim, s.fps) == (2, 2, 10.0)
    assert s.action_low == (0.0, 0.0) and s.action_high == (512.0, 512.0)
    assert s.task_state_names == ("block_x", "block_y", "block_angle")
    assert s.config_names == ("agent_x", "agent_y", "block_x", "block_y", "block_angle")
    assert "T" in s.task and "absolute" in s.action_meaning
    w.close()
    with pytest.raises(FactoryError, match="pusht"):
        make_world("nope")


def test_shapes_and_dtypes(world: PushTWorld) -> None:
    obs = world.reset(seeds=np.array([0]))
    for o in (obs, world.step(np.array([[256.0, 256.0]], np.float32))):
        assert o.frames.shape == (1, 96, 96, 3) and o.frames.dtype == np.uint8
        assert o.state.shape == (1, 2) and o.state.dtype == np.float32
        assert o.task_state.shape == (1, 3) and o.task_state.dtype == np.float32
        assert o.score.shape == (1,) and o.score.dtype == np.float32
        assert o.success.shape == (1,) and o.success.dtype == bool
        assert o.info["contact"].shape == (1,) and o.info["contact"].dtype == bool
        assert -np.pi < o.task_state[0, 2] <= np.pi
        assert 0.0 <= o.score[0] <= 1.0


def test_seeded_reset_is_deterministic(world: PushTWorld) -> None:
    acts = _actions(1, 15)
    runs = []
    for _ in range(2):
        frames = [world.reset(seeds=np.array([7])).frames]
        frames += [world.step(a).frames for a in acts]
        runs.append(np.stack(frames))
    assert np.array_equal(runs[0], runs[1])
    other = world.reset(seeds=np.array([8])).frames
    assert not np.array_equal(runs[0][0], other)


def test_config_reset_is_exact(world: PushTWorld) -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        block = np.array([*rng.uniform(150, 360, 2), rng.uniform(-np.pi, np.pi)])
        agent = block[:2] + 150.0 * np.array([np.cos(b := rng.uniform(0, 6.3)), np.sin(b)])
        config = np.concatenate([agent, block])
        obs = world.reset(configs=config[None])
        np.testing.assert_allclose(obs.info["block_pose"][0], block, atol=1e-6)
        np.testing.assert_allclose(obs.state[0], agent, atol=1e-3)
        assert obs.score[0] == pytest.approx(geo.coverage(block), abs=1e-6)


def test_config_reset_reproduces_seeded_episode(world: PushTWorld) -> None:
    acts = _actions(2, 20)
    for seed in (3, 11):
        first = world.reset(seeds=np.array([seed]))
        env = world._envs[0]
        config = np.array([*env.agent.position, *first.info["block_pose"][0]])
        seeded = [first.frames] + [world.step(a).frames for a in acts]
        again = [world.reset(configs=config[None]).frames]
        again += [world.step(a).frames for a in acts]
        assert np.array_equal(np.stack(seeded), np.stack(again))


def test_legacy_state_is_compensated() -> None:
    """Without the compensation, gym-pusht's reset shifts the block (the CoG quirk)."""
    w = PushTWorld()
    env = w._envs[0]
    _, info = env.reset(options={"reset_to_state": [50.0, 50.0, 256.0, 256.0, 2.0]})
    assert np.linalg.norm(info["block_pose"][:2] - 256.0) > 10.0
    obs = w.reset(configs=np.array([[50.0, 50.0, 256.0, 256.0, 2.0]]))
    np.testing.assert_allclose(obs.info["block_pose"][0], [256.0, 256.0, 2.0], atol=1e-9)
    w.close()


def test_batch_matches_singles() -> None:
    seeds = np.array([4, 5, 6])
    acts = _actions(3, 10, batch=3)
    batch = PushTWorld(batch_size=3)
    out = [batch.reset(seeds=seeds)] + [batch.step(a) for a in acts]
    single = PushTWorld(batch_size=1)
    for i, seed in enumerate(seeds):
        ref = [single.reset(seeds=np.array([seed]))] + [single.step(a[i : i + 1]) for a in acts]
        for got, want in zip(out, ref, strict=True):
            assert np.array_equal(got.frames[i], want.frames[0])
            assert np.array_equal(got.task_state[i], want.task_state[0])
            assert got.score[i] == want.score[0]
    batch.close()
    single.close()


def test_128_pixels() -> None:
    w = make_world("pusht", batch_size=1, resolution=128)
    obs = w.reset(seeds=np.array([0]))
    assert obs.frames.shape == (1, 128, 128, 3)
    assert w.step(np.array([[200.0, 200.0]])).frames.shape == (1, 128, 128, 3)
    w.close()


def test_bad_actions_raise(world: PushTWorld) -> None:
    world.reset(seeds=np.array([0]))
    with pytest.raises(FactoryError, match="non-finite"):
        world.step(np.array([[np.nan, 1.0]]))
    with pytest.raises(FactoryError, match="non-finite"):
        world.step(np.array([[np.inf, 1.0]]))
    with pytest.raises(FactoryError, match="shape"):
        world.step(np.zeros((2, 2)))
    with pytest.raises(FactoryError, match="shape"):
        world.step(np.zeros(3))
    with pytest.raises(FactoryError, match="seeds"):
        world.reset(seeds=np.array([1, 2]))
    with pytest.raises(FactoryError, match="configs"):
        world.reset(configs=np.zeros((1, 4)))
    out = world.step(np.array([[-50.0, 900.0]]))  # clipped, not an error
    assert np.all(np.isfinite(out.state))


def test_coverage_matches_gym(world: PushTWorld) -> None:
    rng = np.random.default_rng(5)
    checked = 0
    for k in range(8):
        # Start near the goal so that coverage is not trivially 0.
        pose = geo.GOAL + np.array([*rng.normal(0, 25, 2), rng.normal(0, 0.4)])
        agent = pose[:2] + np.array([0.0, 170.0])
        world.reset(configs=np.concatenate([agent, pose])[None])
        for a in _actions(10 + k, 6):
            obs = world.step(a)
            pose_now = obs.info["block_pose"][0]
            env_cov = world._envs[0]._get_coverage()
            assert geo.coverage(pose_now) == pytest.approx(env_cov, abs=1e-9)
            assert float(obs.score[0]) == pytest.approx(env_cov, abs=1e-6)
            checked += env_cov > 0.05
    assert checked > 10


def test_contact_flag(world: PushTWorld) -> None:
    world.reset(configs=np.array([[256.0, 100.0, 256.0, 256.0, 0.0]]))
    # The cross bar's outer edge is at y = 256 (body y = 0); come up from below.
    assert not world.step(np.array([[256.0, 180.0]])).info["contact"][0]
    contacts = [world.step(np.array([[256.0, 280.0]])).info["contact"][0] for _ in range(5)]
    assert any(contacts)


def test_geometry_helpers() -> None:
    assert geo.coverage(geo.GOAL) == pytest.approx(1.0)
    assert geo.keypoint_error(geo.GOAL) == pytest.approx(0.0)
    assert geo.is_success(geo.GOAL + np.array([0.5, 0.0, 0.0]))
    assert not geo.is_success(geo.GOAL + np.array([10.0, 0.0, 0.0]))
    np.testing.assert_allclose(
        geo.wrap_angle(np.array([np.pi, -np.pi, 3 * np.pi, 0.1])),
        np.array([np.pi, np.pi, np.pi, 0.1]),
    )
    pose = np.array([100.0, 200.0, 0.3])
    assert geo.t_polygon(pose).area == pytest.approx(geo.T_AREA)
    inside = geo.to_world(np.array([0.0, 15.0]), pose)
    assert geo.distance_to_block(inside, pose) == 0.0
    assert geo.agent_block_contact(geo.to_world(np.array([0.0, -15.5]), pose), pose)
    assert not geo.agent_block_contact(geo.to_world(np.array([0.0, -20.0]), pose), pose)
    poses = np.stack([geo.GOAL, pose])
    np.testing.assert_allclose(geo.keypoint_errors(poses), [geo.keypoint_error(p) for p in poses])
