"""The expert's cheap planning: the fast stroke simulation, the pose cache, best-first
routing, and the pose filter that keeps a noisy estimate from replanning every step."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from factory.envs.pusht import PushTWorld
from factory.generators import make_generator
from factory.generators.expert import ExpertGenerator
from factory.generators.pose_filter import PoseFilter
from factory.generators.push_planner import PushPlanner
from factory.generators.pusht_sim import PushTSim, pd_steps_to_reach, pd_steps_to_reach_many
from factory.world import Observation

PLANNER = dict(spacing=8.0, standoff=8.0, clearance=6.0, max_depth=130.0)


def test_push_poses_match_substep_reference() -> None:
    """The precomputed-agent stroke gives the block poses of stepping the sim substep by step."""
    pose = np.array([250.0, 240.0, 0.4])
    start, direction, length = np.array([250.0, 205.0]), np.array([0.0, 1.0]), 60.0
    reach = np.array([5.0, 20.0, 40.0, 59.0])
    fast = PushTSim()
    fast.set_state(start, np.zeros(2), pose)
    got = fast.push_poses(start, direction, length, reach)
    ref = PushTSim()
    ref.set_state(start, np.zeros(2), pose)
    target = tuple(start + length * direction)
    travel, poses = [], []
    for _ in range(90):
        ref.substep(target)
        travel.append(float((np.array(ref.agent.position) - start) @ direction))
        poses.append(ref.pose())
        if travel[-1] >= length - 0.5:
            break
    idx = np.minimum(np.searchsorted(travel, reach), len(travel) - 1)
    np.testing.assert_allclose(got, np.asarray(poses)[idx], atol=1e-6)
    assert not np.allclose(got[0], got[-1])  # the stroke did move the block


def test_pd_steps_table_matches_scalar() -> None:
    d = np.array([0.0, 0.5, 3.0, 17.0, 130.0, 1e4])
    many = pd_steps_to_reach_many(d, 0.7)
    assert [pd_steps_to_reach(float(x), 0.7) for x in d] == many.tolist()
    assert many[0] == 0.0 and np.all(np.diff(many) >= 0) and many[-1] > many[-2]


def test_best_first_equals_full_scan_and_caches() -> None:
    """Routing best-first picks the same stroke as routing every candidate."""
    rng = np.random.default_rng(4)
    planner = PushPlanner(**PLANNER)
    for _ in range(6):
        pose = np.array([*rng.uniform(120, 390, 2), rng.uniform(-np.pi, np.pi)])
        agent = rng.uniform(30, 480, 2)
        fast = planner.plan(agent, pose)
        full = planner.plan(agent, pose, rng=np.random.default_rng(0), jitter=1e-300)
        assert fast is not None and full is not None
        np.testing.assert_allclose(fast.end, full.end)
        assert fast.rate == pytest.approx(full.rate)
    table = planner.table(pose)
    assert planner.table(pose.copy()) is table  # cached per pose
    assert planner.table(pose + 1e-3) is not table


def test_pose_filter_noiseless_passes_through_and_moves_at_floor() -> None:
    f = PoseFilter(frames=8, sigmas=3.0, floor=2.0)
    pose = np.array([200.0, 200.0, 0.3])
    for _ in range(10):
        np.testing.assert_allclose(f.update(pose, still=True), pose)
    assert f.noise() == (0.0, 0.0)
    bumped = pose + np.array([2.5, 0.0, 0.0])
    np.testing.assert_allclose(f.update(bumped, still=True), bumped)  # restart, no lag
    assert f.moved(bumped, pose, f.count, 1)
    assert not f.moved(pose + np.array([1.5, 0.0, 0.0]), pose, 1, 1)


def test_pose_filter_learns_noise_and_averages() -> None:
    rng = np.random.default_rng(0)
    f = PoseFilter(frames=8, sigmas=3.0, floor=2.0)
    truth = np.array([300.0, 200.0, 1.0])
    for _ in range(64):
        noisy = truth + np.array([*rng.normal(0, 10.0, 2), np.radians(rng.normal(0, 4.0))])
        est = f.update(noisy, still=True)
    px, deg = f.noise()
    assert 6.0 < px < 15.0 and 2.0 < deg < 6.5
    assert f.count > 1 and np.linalg.norm(est[:2] - truth[:2]) < 15.0
    assert not f.moved(est, truth + np.array([15.0, 0.0, 0.0]), f.count, 1)
    assert f.moved(est, truth + np.array([80.0, 0.0, 0.0]), f.count, 1)
    f.update(truth, still=False)  # pushing: no averaging
    assert f.count == 1


def test_noisy_estimate_does_not_replan_every_step() -> None:
    """With a probe-like noisy block estimate the expert plans rarely (once per few steps)."""
    world = PushTWorld(batch_size=1)
    gen = make_generator("expert")
    assert isinstance(gen, ExpertGenerator)
    calls = []
    plan = gen.planner.plan
    gen.planner.plan = lambda *a, **k: calls.append(1) or plan(*a, **k)  # type: ignore[method-assign]
    rng = np.random.default_rng(1)

    def noisy(obs: Observation) -> Observation:
        ts = np.array(obs.task_state, np.float64)
        ts += [*rng.normal(0, 10.0, 2), np.radians(rng.normal(0, 4.0))]
        return dataclasses.replace(obs, task_state=ts.astype(np.float32))

    out = world.reset(seeds=np.array([5]))
    gen.reset(5, noisy(out.item(0)))
    for _ in range(60):
        out = world.step(gen.act(noisy(out.item(0)))[None])
    world.close()
    assert len(calls) < 20
