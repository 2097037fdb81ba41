"""The expert's cheap planning: the fast stroke simulation, strokes reused by rigid motion,
the pose cache, best-first and batched routing, and the pose filter that keeps a noisy
estimate from replanning every step."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from factory.envs import pusht_geometry as geo
from factory.envs.pusht import PushTWorld
from factory.generators import make_generator
from factory.generators.expert import ExpertGenerator
from factory.generators.pose_filter import PoseFilter
from factory.generators.push_planner import DEPTHS, PushPlanner, R, wall_penalty
from factory.generators.push_router import Router, make_contacts
from factory.generators.pusht_sim import (
    WALL_HI,
    WALL_LO,
    PushTSim,
    pd_step,
    pd_steps_to_reach,
    pd_steps_to_reach_many,
)
from factory.generators.stroke_cache import WALL_MARGIN, StrokeCache
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


def _vertex_contacts(planner: PushPlanner) -> np.ndarray:
    """(C,) bool: contacts on a corner of the T's outline (a push there balances on it)."""
    at = np.isclose(planner._body_points[:, None], geo.T_OUTLINE[None]).all(axis=-1)
    return np.asarray(at.any(axis=1))


def test_cached_strokes_equal_simulating_at_the_pose() -> None:
    """Away from the walls a stroke moved by rigid motion is the stroke simulated in place
    (to rounding), except pushes balanced on a corner, which rounding can tip."""
    planner = PushPlanner(**PLANNER)
    off_corner = ~_vertex_contacts(planner)
    depths = DEPTHS[:10]
    for pose in (np.array([256.0, 250.0, 0.7]), np.array([230.0, 270.0, -2.0])):
        strokes = StrokeCache().get(planner._body_points, planner._body_normals, 8.0, depths)
        assert not strokes.near_walls(pose).any()
        moved = strokes.poses(pose)
        points = geo.to_world(planner._body_points, pose)
        normals = planner._body_normals @ geo.rotation(pose[2]).T
        starts = points + normals * (R + 8.0)
        for i in np.flatnonzero(off_corner):
            here = planner._trace(starts[i], normals[i], points[i], pose, depths)
            np.testing.assert_allclose(moved[i], here, atol=1e-6)
        assert np.ptp(moved[:, -1, :2], axis=0).max() > 10.0  # the strokes moved the block


def test_near_walls_flags_every_stroke_that_nears_a_wall() -> None:
    """The wall test never misses a stroke whose block comes within the margin of a wall."""
    planner = PushPlanner(**PLANNER)
    strokes = StrokeCache().get(planner._body_points, planner._body_normals, 8.0, DEPTHS)
    sim = PushTSim(walls=False)
    sweeps = []  # each stroke's outline corners over all its substeps, from the origin
    for point, normal in zip(planner._body_points, planner._body_normals, strict=True):
        start = point + normal * (R + 8.0)
        sim.set_state(start, np.zeros(2), np.zeros(3))
        traj = sim.push_trajectory(start, -normal, 8.0 + DEPTHS[-1], 8.0 + DEPTHS)[1]
        sweeps.append(np.concatenate([geo.t_outline(p) for p in np.vstack([np.zeros(3), traj])]))
    rng = np.random.default_rng(0)
    flagged = 0
    for _ in range(40):
        pose = np.array([*rng.uniform(60.0, 450.0, 2), rng.uniform(-np.pi, np.pi)])
        pts = geo.to_world(np.asarray(sweeps), pose)
        gap = np.minimum(pts - WALL_LO, WALL_HI - pts).min(axis=(1, 2))
        near = strokes.near_walls(pose)
        assert np.all(near[gap < WALL_MARGIN])  # conservative
        assert np.all(gap[near] < WALL_MARGIN + 1.0)  # and tight
        flagged += int(near.sum())
    assert 0 < flagged < 40 * len(sweeps)


def test_push_trajectory_matches_push_poses() -> None:
    pose = np.array([250.0, 240.0, 0.4])
    start, direction, reach = np.array([250.0, 205.0]), np.array([0.0, 1.0]), np.array([5.0, 59.0])
    sim = PushTSim()
    sim.set_state(start, np.zeros(2), pose)
    poses = sim.push_poses(start, direction, 60.0, reach)
    sim.set_state(start, np.zeros(2), pose)
    again, traj = sim.push_trajectory(start, direction, 60.0, reach)
    np.testing.assert_array_equal(again, poses)
    np.testing.assert_array_equal(traj[-1], poses[-1])
    assert len(traj) > 20


def test_value_is_log_keypoint_error_plus_walls() -> None:
    planner = PushPlanner(**PLANNER)
    rng = np.random.default_rng(2)
    poses = np.c_[rng.uniform(0.0, 512.0, (500, 2)), rng.uniform(-7.0, 7.0, 500)]
    want = np.log(geo.keypoint_errors(poses) + 0.05) + 0.5 * wall_penalty(poses, 40.0)
    np.testing.assert_array_equal(planner.value(poses), want)  # bit for bit


def test_pd_step_matches_array_reference() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        pos, vel, target = rng.uniform(0, 512, 2), rng.normal(0, 300, 2), rng.uniform(0, 512, 2)
        ref_pos, ref_vel = pos.copy(), vel.copy()
        for _ in range(10):
            ref_vel = ref_vel + (100.0 * (target - ref_pos) - 20.0 * ref_vel) * 0.01
            ref_pos = ref_pos + ref_vel * 0.01
        got_pos, got_vel = pd_step(pos, vel, target)
        np.testing.assert_array_equal(got_pos, ref_pos)
        np.testing.assert_array_equal(got_vel, ref_vel)


def test_pose_filter_noise_is_numpys_median() -> None:
    rng = np.random.default_rng(4)
    f = PoseFilter(frames=8, sigmas=3.0, floor=2.0)
    poses = [np.array([300.0, 200.0, 1.0]) + rng.normal(0, [5.0, 5.0, 0.05]) for _ in range(21)]
    for p in poses:
        f.update(p, still=True)
    jumps = [
        (np.linalg.norm(a[:2] - b[:2]), np.degrees(abs(geo.wrap_angle(a[2] - b[2]))))
        for a, b in zip(poses[1:], poses[:-1], strict=True)
    ]
    med = np.median(np.asarray(jumps), axis=0)
    assert f.noise() == (med[0] / (1.1774 * np.sqrt(2.0)), med[1] / (0.6745 * np.sqrt(2.0)))


def _reference_around(router: Router, a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    """The router's way around, one segment test at a time (the unbatched algorithm)."""
    ring, n = router.ring, len(router.ring)
    ia = int(np.argmin(np.linalg.norm(ring - a, axis=1)))
    ib = int(np.argmin(np.linalg.norm(ring - b, axis=1)))
    options = []
    for sign, count in ((1, (ib - ia) % n), (-1, (ia - ib) % n)):
        seq = [ring[(ia + sign * k) % n] for k in range(count + 1)] + [b]
        out: list[np.ndarray] = []
        here, i = a, 0
        while i < len(seq) - 1:
            j = len(seq) - 1
            while j > i and not router.clear(here, seq[j]):
                j -= 1
            if j == len(seq) - 1:
                break
            out.append(seq[j])
            here, i = seq[j], (j if j > i else i + 1)
        full = [a, *out, b]
        hits = sum(not router.clear(p, q) for p, q in itertools.pairwise(full))
        length = float(np.sum(np.linalg.norm(np.diff(np.vstack(full), axis=0), axis=1)))
        options.append((hits, length, out))
    return min(options, key=lambda o: (o[0], o[1]))[2]


def test_router_batched_sight_matches_segment_by_segment() -> None:
    rng = np.random.default_rng(5)
    contacts = make_contacts(8.0)
    compared = 0
    for _ in range(25):
        pose = np.array([*rng.uniform(80.0, 430.0, 2), rng.uniform(-np.pi, np.pi)])
        router = Router(pose, R + 6.0)
        for _ in range(6):
            agent = rng.uniform(0.0, 512.0, 2)
            c = contacts[int(rng.integers(len(contacts)))]
            goal = geo.to_world(c.point, pose) + geo.rotation(pose[2]) @ c.normal * 23.0
            if router.clear(agent, goal) or not router.clear(agent, agent):
                continue
            got, want = router._around(agent, goal), _reference_around(router, agent, goal)
            assert len(got) == len(want) and all(map(np.array_equal, got, want))
            compared += 1
    assert compared > 30


def test_contacts_built_once_and_read_only() -> None:
    a, b = make_contacts(8.0), make_contacts(8.0)
    assert a is not b and all(x is y for x, y in zip(a, b, strict=True))
    with pytest.raises(ValueError):
        a[0].point[0] = 1.0


def test_warm_strokes_leaves_no_stroke_set_for_the_plans_to_simulate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After :meth:`PushPlanner.warm_strokes` the expert's plans, from far and near
    poses alike, find every stroke set they ask for already simulated."""
    from factory.generators import stroke_cache

    cache = StrokeCache()
    monkeypatch.setattr("factory.generators.push_planner.STROKES", cache)
    made: list[int] = []
    simulate = cache._simulate

    def counted(*args: object) -> object:
        made.append(1)
        return simulate(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(cache, "_simulate", counted)
    expert = ExpertGenerator()
    expert.planner.warm_strokes()
    warmed = len(made)
    assert warmed == int(np.sum(DEPTHS <= 130.0) - np.sum(DEPTHS <= 3.0)) + 1
    assert warmed <= stroke_cache.CACHE_SETS
    world = PushTWorld(batch_size=1, resolution=32)
    for seed in (100000, 100001, 100002):
        obs = world.reset(seeds=np.array([seed]))
        expert.reset(seed, obs.item(0))
        for _ in range(60):
            obs = world.step(np.asarray(expert.act(obs.item(0)), np.float32)[None])
    world.close()
    assert len(made) == warmed  # no plan simulated a set of its own


def _world_frame_ring(pose: np.ndarray, inflate: float) -> np.ndarray:
    """The router's ring built in board coordinates, as it was before the body frame."""
    import shapely

    obstacle = geo.t_polygon(pose).buffer(inflate, quad_segs=4)
    hull = shapely.convex_hull(obstacle).buffer(3.0, quad_segs=2)
    return np.clip(np.asarray(hull.exterior.coords)[:-1], 2.0, 510.0)


def test_body_frame_router_is_the_board_frame_router_moved() -> None:
    """The ring built once in the body frame and moved to a pose is the ring built at the
    pose (up to a cyclic shift and rounding), near walls too; and its segment tests agree
    with shapely's on the inflated T at that pose."""
    import shapely

    rng = np.random.default_rng(11)
    for k in range(40):
        lo, hi = (20.0, 490.0) if k % 2 else (90.0, 420.0)
        pose = np.array([*rng.uniform(lo, hi, 2), rng.uniform(-np.pi, np.pi)])
        router, want = Router(pose, R + 6.0), _world_frame_ring(pose, R + 6.0)
        assert len(router.ring) == len(want)
        shift = int(np.argmin(np.linalg.norm(want - router.ring[0], axis=1)))
        np.testing.assert_allclose(np.roll(want, -shift, axis=0), router.ring, atol=1e-6)
        obstacle = geo.t_polygon(pose).buffer(R + 6.0, quad_segs=4)
        a, b = rng.uniform(0.0, 512.0, (200, 2)), rng.uniform(0.0, 512.0, (200, 2))
        truth = ~shapely.intersects(obstacle, shapely.linestrings(np.stack([a, b], axis=1)))
        assert np.array_equal(router.clear_many(a, b), truth)
        ring = router.ring
        segs = np.stack([np.repeat(ring, len(ring), 0), np.tile(ring, (len(ring), 1))], axis=1)
        sight = ~shapely.intersects(obstacle, shapely.linestrings(segs)).reshape(len(ring), -1)
        mismatch = np.sum(np.stack([router.ring_sight(i) for i in range(len(ring))]) != sight)
        assert mismatch == 0
