"""Pile fidelity metrics: known answers on hand-placed discs rendered by pile_render."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from factory.envs import pile_geometry as geo
from factory.envs import pile_render as pr
from factory.envs.pile_sim import pile_layout
from factory.eval import pile_metrics as pm

RES = 96
FAR_AGENT = (480.0, 30.0)  # a corner clear of every disc placed below


def _views(discs: list[list[float]] | np.ndarray, agent: tuple[float, float] = FAR_AGENT) -> dict:
    scene = np.concatenate([np.asarray(agent, float), np.asarray(discs, float).ravel()])
    return pr.render_views(scene, RES)


def _blur(img: np.ndarray) -> np.ndarray:
    """A 3 x 3 binomial blur (a learned renderer's softness)."""
    f = np.pad(img.astype(np.float64), ((1, 1), (1, 1), (0, 0)), mode="edge")
    k = np.outer([1, 2, 1], [1, 2, 1]) / 16.0
    h, w = img.shape[:2]
    out = sum(k[i, j] * f[i : i + h, j : j + w] for i in range(3) for j in range(3))
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def test_disc_colours_classify_with_blends() -> None:
    """Pure palette colours read 0 or 1 (the side view's shaded puck side is disc too);
    an even disc / board blend reads half, a disc / goal blend a quarter disc."""
    disc, board, goal = np.array(pr.DISC_RGB), np.array(pr.BOARD_RGB), np.array(pr.GOAL_RGB)
    colours = [
        disc,
        board,
        goal,
        np.array(pr.AGENT_RGB),
        disc * pr.SHADE,
        (disc + board) / 2,
        0.25 * disc + 0.75 * goal,
    ]
    frame = np.rint(np.stack(colours))[None].astype(np.uint8)  # (1, 7, 3)
    top = pm.disc_coverage(frame, "top")[0]
    side = pm.disc_coverage(frame, "side")[0]
    np.testing.assert_allclose(top[:4], [1, 0, 0, 0])
    np.testing.assert_allclose(side[:5], [1, 0, 0, 0, 1])
    np.testing.assert_allclose(top[5:], [0.5, 0.25], atol=0.01)
    mask = pm.disc_mask(frame, "top")[0]
    assert mask[:4].tolist() == [True, False, False, False] and mask[5] and not mask[6]
    with pytest.raises(ValueError, match="unknown pile camera"):
        pm.disc_mask(frame, "front")


def test_a_frame_against_itself_is_perfect() -> None:
    """IoU 1 in both views, zero swept, position and cross-view count errors; a window
    of the same state never moves."""
    agent, discs = pile_layout(3, 30)
    v = _views(discs, tuple(agent))
    for cam in pm.VIEWS:
        assert pm.disc_iou(v[cam], v[cam], cam) == 1.0
    state = discs.ravel()
    assert pm.swept_fraction_error(state, state) == 0.0
    assert pm.disc_position_error(state, state) == 0.0
    assert pm.hold_still_drift(np.stack([state] * 5)) == (0.0, False)


def test_spread_discs_agree_across_views() -> None:
    """Ten discs well apart (none hides another): both views count ten, and the
    centroids they imply are within 1.5 px of each other."""
    discs = [[80.0 + 80 * (i % 5), 120.0 + 200 * (i // 5)] for i in range(10)]
    v = _views(discs)
    gap, dist = pm.cross_view(v["top"][None], v["side"][None])
    assert gap.tolist() == [0.0] and dist[0] < 1.5


def test_a_permuted_disc_order_is_no_error() -> None:
    """Discs are unordered: the same discs in another order are the same scene."""
    _, discs = pile_layout(5, 30)
    perm = np.random.default_rng(0).permutation(30)
    state, permuted = discs.ravel(), discs[perm].ravel()
    assert pm.disc_position_error(permuted, state) == 0.0
    assert pm.swept_fraction_error(permuted, state) == 0.0
    rows, cols = pm.match_discs(discs[perm], discs)
    assert np.array_equal(perm[rows], cols)
    assert pm.disc_iou(_views(discs[perm])["top"], _views(discs)["top"], "top") == 1.0


def test_a_shifted_disc_gives_its_shift() -> None:
    """Disc 0 moved by (3, 4) px: mean position error 5 / N. A disc moved into the goal:
    swept error 1 / N. A disc moved far away: top IoU (N - 1) / (N + 1) (equal areas)."""
    _, discs = pile_layout(7, 30)
    moved = discs.copy()
    moved[0] += (3.0, 4.0)
    assert pm.disc_position_error(moved.ravel(), discs.ravel()) == pytest.approx(5.0 / 30)
    inside = discs.copy()
    inside[0] = geo.GOAL_CENTER
    assert pm.swept_fraction_error(inside.ravel(), discs.ravel()) == pytest.approx(1 / 30)
    assert pm.disc_position_error(np.array([[3.0, 4.0]]), np.zeros((1, 2))) == pytest.approx(5)
    far = np.array([[100.0 + 40 * i, 100.0] for i in range(5)])
    far_moved = far.copy()
    far_moved[0] = (100.0, 400.0)
    iou = pm.disc_iou(_views(far_moved)["top"], _views(far)["top"], "top")
    assert iou == pytest.approx(4 / 6, abs=0.03)


def test_unequal_counts_match_the_fewer() -> None:
    """Two predicted discs against three true ones: both match their nearest true disc."""
    true = np.array([[0.0, 0.0], [100.0, 0.0], [200.0, 0.0]])
    pred = np.array([[201.0, 0.0], [0.0, 2.0]])
    rows, cols = pm.match_discs(pred, true)
    assert sorted(zip(rows.tolist(), cols.tolist(), strict=True)) == [(0, 2), (1, 0)]
    assert pm.disc_position_error(pred.ravel(), true.ravel()) == pytest.approx(1.5)
    rows, cols = pm.match_discs(true, pred)  # more predicted than true
    assert sorted(zip(rows.tolist(), cols.tolist(), strict=True)) == [(0, 1), (2, 0)]


def test_the_matching_is_the_least_total_distance() -> None:
    """Where the nearest pair first is wrong: true discs at x 0 and 4, predicted at 2.5
    and 6.5; greedy would pair 2.5 with 4 and leave 6.5 to 0 (mean 4), the best is 2.5.
    On random costs the assignment equals the brute-force minimum."""
    true = np.array([[0.0, 0.0], [4.0, 0.0]])
    pred = np.array([[2.5, 0.0], [6.5, 0.0]])
    assert pm.disc_position_error(pred.ravel(), true.ravel()) == pytest.approx(2.5)
    rng = np.random.default_rng(0)
    for trial in range(60):
        n = int(rng.integers(1, 6))
        m = int(rng.integers(n, 7))
        cost = rng.random((n, m)) * 10
        if trial % 3 == 0:
            cost = np.round(cost)  # ties
        cols = pm.assignment(cost)
        assert len(set(cols.tolist())) == n
        best = min(
            sum(cost[i, p[i]] for i in range(n)) for p in itertools.permutations(range(m), n)
        )
        assert cost[np.arange(n), cols].sum() == pytest.approx(best)


def test_counts_and_centroids_of_lone_discs() -> None:
    """One disc anywhere counts one in both views, its centre read back within 2 px (top)
    and 3 px (side, through the perspective camera)."""
    for x, y in [(40.0, 60.0), (256.0, 256.0), (470.0, 470.0), (100.0, 400.0)]:
        v = _views([[x, y]])
        for cam, tol in (("top", 2.0), ("side", 3.0)):
            fd = pm.frame_discs(v[cam], cam)
            assert fd.count == 1 and fd.components == 1, (cam, x, y, fd)
            assert np.linalg.norm(fd.centroid - (x, y)) <= tol, (cam, x, y, fd.centroid)
    empty = pm.frame_discs(_views(np.zeros((0, 2)))["top"], "top")
    assert empty.count == 0 and np.isnan(empty.centroid).all()


def test_merged_and_occluded_pairs() -> None:
    """Two touching discs side by side are one blob in both views but count two by area.
    One right behind the other in the side view is one blob whose far disc is partly
    hidden, still counted two. A column of five behind each other hides so much of the
    far pucks' silhouettes that they count four, but their top faces, which nothing
    hides, still count five: the face counter agrees with the top view."""
    pair = _views([[246.0, 300.0], [266.0, 300.0]])
    for cam in pm.VIEWS:
        fd = pm.frame_discs(pair[cam], cam)
        assert (fd.components, fd.count) == (1, 2), (cam, fd)
    behind = _views([[256.0, 300.0], [256.0, 320.0]])["side"]
    for faces in (False, True):
        fd = pm.frame_discs(behind, "side", faces)
        assert (fd.components, fd.count) == (1, 2), faces
    assert pm.frame_discs(behind, "side").estimate < 1.9  # partly hidden
    column = _views([[256.0, 60.0 + 20 * i] for i in range(5)])
    top, side = pm.frame_discs(column["top"], "top"), pm.frame_discs(column["side"], "side")
    assert (top.count, side.count) == (5, 4)
    assert pm.frame_discs(column["side"], "side", faces=True).count == 5
    gap, dist = pm.cross_view(column["top"][None], column["side"][None])
    assert gap.tolist() == [1.0] and dist[0] < 3.0
    gap, _ = pm.cross_view(column["top"][None], column["side"][None], faces=True)
    assert gap.tolist() == [0.0]


def test_face_coverage_reads_only_the_lit_top() -> None:
    """From the side a puck's lit top is face and its shaded side is not, though both
    are disc; from above the whole disc is face."""
    disc, board = np.array(pr.DISC_RGB), np.array(pr.BOARD_RGB)
    colours = [disc, disc * pr.SHADE, board, (disc + disc * pr.SHADE) / 2]
    frame = np.rint(np.stack(colours))[None].astype(np.uint8)  # (1, 4, 3)
    np.testing.assert_allclose(pm.face_coverage(frame, "side")[0], [1, 0, 0, 0.5], atol=0.01)
    np.testing.assert_allclose(pm.disc_coverage(frame, "side")[0], [1, 1, 0, 1], atol=0.01)
    np.testing.assert_array_equal(pm.face_coverage(frame, "top"), pm.disc_coverage(frame, "top"))


def test_a_disc_under_the_agent_is_not_seen_from_above() -> None:
    """The agent is drawn over a disc it covers: the top view counts one disc fewer."""
    v = _views([[200.0, 200.0], [400.0, 400.0]], agent=(200.0, 200.0))
    assert pm.frame_discs(v["top"], "top").count == 1


def test_a_seeded_pile_counts_in_both_views() -> None:
    """30 discs of seeded (dense) piles: the top view counts 30 and its centroid is the
    discs' mean within 0.5 px. From the side the silhouettes lose up to 3 discs to
    occlusion; the faces, where the lit tops of a dense pile meet, read a little more
    than 30, at most 2 more here (31 to 32 on seeds 0 to 7), and centroids are within
    2 px."""
    for seed in range(3):
        agent, discs = pile_layout(seed, 30)
        v = _views(discs, tuple(agent))
        top, side = pm.frame_discs(v["top"], "top"), pm.frame_discs(v["side"], "side")
        assert top.count == 30, seed
        assert np.linalg.norm(top.centroid - discs.mean(0)) < 0.5
        assert 27 <= side.count <= 29, seed
        assert 30 <= pm.frame_discs(v["side"], "side", faces=True).count <= 32, seed
        assert np.linalg.norm(side.centroid - discs.mean(0)) < 2.0


def test_a_soft_render_reads_more_face() -> None:
    """The face counter's price: a 3 x 3 blur of a side view blends the pucks' shaded
    sides towards their lit tops, so a dense pile reads at least 3 discs more face, while
    the silhouette count moves by under 2."""
    for seed in range(3):
        agent, discs = pile_layout(seed, 30)
        side = _views(discs, tuple(agent))["side"]
        sharp, soft = (pm.frame_discs(f, "side", faces=True) for f in (side, _blur(side)))
        assert soft.estimate >= sharp.estimate + 3.0, seed
        whole = [pm.frame_discs(f, "side").estimate for f in (side, _blur(side))]
        assert abs(whole[1] - whole[0]) < 2.0, seed


def test_a_blurred_render_still_reads() -> None:
    """A 3 x 3 blur keeps the top view's count within one disc and its IoU high."""
    agent, discs = pile_layout(1, 30)
    top = _views(discs, tuple(agent))["top"]
    blurred = _blur(top)
    assert abs(pm.frame_discs(blurred, "top").count - 30) <= 1
    assert pm.disc_iou(blurred, top, "top") > 0.75


def test_components_label_4_connected_blobs() -> None:
    mask = np.array(
        [
            [1, 1, 0, 0, 1],
            [0, 1, 0, 1, 1],
            [1, 0, 0, 0, 0],
            [1, 0, 1, 0, 1],
        ],
        bool,
    )
    labels, n = pm.components(mask)
    assert n == 5  # diagonal neighbours are separate
    assert (labels[~mask] == -1).all()
    assert labels[0, 0] == labels[0, 1] == labels[1, 1]
    assert labels[0, 4] == labels[1, 3] == labels[1, 4]
    assert len({labels[2, 0], labels[0, 0], labels[3, 2], labels[3, 4]}) == 4


def test_hold_still_drift_and_pusher_clearance() -> None:
    """The largest displacement over the window, and whether it passes 1 px; the pusher
    is clear when its gap to every disc is at least the margin."""
    start = np.array([100.0, 100.0, 300.0, 300.0])
    step = np.array([[0.0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0, 0.54, 0.72]])
    window = start + step
    assert pm.hold_still_drift(window) == (pytest.approx(0.9), False)
    assert pm.hold_still_drift(window, tol_px=0.8) == (pytest.approx(0.9), True)
    window[2, 0] += 1.5
    assert pm.hold_still_drift(window) == (pytest.approx(1.5), True)
    agent = np.array([[100.0, 160.0], [100.0, 150.0]])  # gaps 35 and 25 px to disc 0
    assert pm.pusher_clear(agent, np.stack([start, start]), 30.0).tolist() == [True, False]


def test_recon_face_counts_name_the_soft_camera() -> None:
    """A renderer whose side view is a 3 x 3 blur of the real one, its top view exact:
    no top bias, a side bias of at least 3 discs per dense pile, and its count gap wider
    than the real frames' by the same; against themselves, no bias and the real gap."""
    from factory.eval.pile_fidelity import recon_face_counts

    views = [_views(d, tuple(a)) for a, d in (pile_layout(s, 30) for s in range(3))]
    real = {cam: np.stack([v[cam] for v in views]) for cam in ("top", "side")}
    soft = {"top": real["top"], "side": np.stack([_blur(f) for f in real["side"]])}
    r = recon_face_counts(soft, real, stride=1)
    assert r["recon_count_frames"] == 3 and r["recon_face_bias_top"] == 0.0
    assert r["recon_face_bias_side"] >= 3.0
    assert r["recon_face_count_gap"] >= r["recon_real_face_count_gap"] + 2.5  # type: ignore[operator]
    same = recon_face_counts(real, real, stride=1)
    assert same["recon_face_bias_top"] == same["recon_face_bias_side"] == 0.0
    assert same["recon_face_count_gap"] == same["recon_real_face_count_gap"]
