"""The continuous-batching rollout engine (factory.gen), no Ray: tiny model, 32 px."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from factories import tiny_world_model
from gt_model import GroundTruthModel

from factory.envs import pusht_geometry as geo
from factory.envs.pusht import PushTWorld
from factory.gen import GenJob, RolloutEngine, perturb_actions
from factory.generators import make_generator
from factory.generators.expert import ExpertGenerator
from factory.generators.policy import LoadedPolicy, PolicyGenerator
from factory.record import run_episode
from factory.world import Observation


def engine(batch_size: int = 3, seed: int = 0) -> RolloutEngine:
    return RolloutEngine(
        tiny_world_model(), make_generator, batch_size=batch_size, seed=seed, model_id="tiny@x"
    )


def test_every_job_comes_out_once_with_its_length_and_provenance() -> None:
    eng = engine(batch_size=3)
    jobs = [
        GenJob(seed=10 + i, generator="play", generator_params={}, steps=3 + i % 4)
        for i in range(7)
    ]
    episodes = list(eng.run(jobs))
    assert sorted(e.meta.seed or 0 for e in episodes) == [10 + i for i in range(7)]
    for ep in episodes:
        steps = 3 + ((ep.meta.seed or 0) - 10) % 4
        assert ep.data["image"].shape == (steps, 32, 32, 3)
        assert ep.data["action"].shape == (steps, 2) and ep.data["action"].dtype == np.float32
        assert ep.data["task_state"].shape == (steps, 3)
        m = ep.meta
        assert m.source == "world_model" and m.generator == "play" and m.model_id == "tiny@x"
        assert m.generator_params["max_speed"] == 40.0
        assert m.extra["task_state"] == "probe" and m.extra["initial"] == "seed"
        assert len(m.extra["initial_config"]) == 5
        assert 0.0 <= (m.score or 0.0) <= 1.0 and m.success in (True, False)
    assert eng.world.batch_size < 3  # the tail ran on a smaller batch
    eng.close()


def test_slots_refill_lazily() -> None:
    """A job is taken only when a slot frees: B at first, then one per finished episode."""
    pulled: list[int] = []

    def jobs() -> Iterator[GenJob]:
        for i in range(6):
            pulled.append(i)
            yield GenJob(seed=i, generator="play", generator_params={}, steps=2 + i)

    eng = engine(batch_size=2)
    seen = []
    for ep in eng.run(jobs()):
        seen.append(ep.meta.seed)
        assert len(pulled) <= 2 + len(seen)
    assert len(seen) == 6
    eng.close()


def test_expert_steers_by_the_probe() -> None:
    """The expert's inputs are the probe's block pose (and the model's agent state): a fresh
    expert fed the recorded observations reproduces every recorded action."""
    eng = engine(batch_size=2)
    jobs = [GenJob(seed=s, generator="expert", generator_params={}, steps=8) for s in (3, 4)]
    for ep in eng.run(jobs):
        _, block = eng.world.model.read_frames(ep.data["image"])
        np.testing.assert_allclose(ep.data["task_state"], block, atol=1e-4)
        expert = ExpertGenerator()
        d = ep.data
        obs = [
            Observation(d["image"][t], d["state"][t], d["task_state"][t], 0.0, False)
            for t in range(len(d["action"]))
        ]
        expert.reset(int(ep.meta.seed or 0), obs[0])
        replayed = np.stack([expert.act(o) for o in obs])
        np.testing.assert_allclose(replayed, d["action"], atol=1e-4)
        assert ep.meta.generator == "expert" and "max_score" in ep.meta.extra
    eng.close()


def test_probe_success_ends_an_expert_episode(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the probe reads the block on the goal, the score is ~1 and the episode stops."""
    eng = engine(batch_size=2)
    probe = eng.world.model.probe
    assert probe is not None

    def on_goal(frames: Any) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(frames)
        goal = torch.tensor(geo.GOAL, dtype=torch.float32)
        return torch.full((n, 2), 100.0), goal.expand(n, 3)

    monkeypatch.setattr(probe, "predict", on_goal)
    job = GenJob(seed=1, generator="expert", generator_params={}, steps=20, stop_on_success=True)
    (ep,) = list(eng.run([job]))
    assert ep.meta.success is True and (ep.meta.score or 0.0) > 0.95
    assert len(ep.data["action"]) == 2  # the first step, then the success frame
    np.testing.assert_array_equal(ep.data["action"][1], ep.data["action"][0])  # held
    eng.close()


def test_replay_from_store_frames() -> None:
    eng = engine(batch_size=2)
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    acts = rng.uniform(50, 450, (6, 2)).astype(np.float32)
    job = GenJob(
        seed=5,
        generator="replay",
        generator_params={"actions": acts[1:], "config": np.zeros(0)},
        steps=5,
        context_frames=ctx,
        context_actions=acts[:1],
        extra={"source": "s.zarr", "source_episode": 0},
    )
    (ep,) = list(eng.run([job]))
    np.testing.assert_array_equal(ep.data["action"], acts[1:])
    np.testing.assert_array_equal(ep.data["image"][0], ctx[-1])
    assert ep.meta.extra["initial"] == "store" and ep.meta.extra["source_episode"] == 0
    eng.close()


def test_perturb_actions() -> None:
    acts = np.linspace(0, 500, 40, dtype=np.float32).reshape(20, 2)
    same = perturb_actions(acts, np.random.default_rng(0))
    np.testing.assert_array_equal(same, acts)
    a = perturb_actions(acts, np.random.default_rng(1), noise=3.0, time_warp=0.3)
    b = perturb_actions(acts, np.random.default_rng(1), noise=3.0, time_warp=0.3)
    np.testing.assert_array_equal(a, b)
    assert 20 / 1.3 - 1 <= len(a) <= 20 / 0.7 + 1 and a.min() >= 0 and a.max() <= 512
    warped = perturb_actions(acts, np.random.default_rng(2), time_warp=0.5)
    assert len(warped) != 20 or not np.array_equal(warped, acts)
    with pytest.raises(ValueError):
        perturb_actions(acts, np.random.default_rng(0), time_warp=1.5)


class _FakePolicy(torch.nn.Module):
    """select_action returns the mean image brightness and the state; records its input."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))
        self.seen: list[dict[str, Any]] = []
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def select_action(self, batch: dict[str, Any]) -> torch.Tensor:
        self.seen.append(batch)
        return batch["observation.state"] * self.w


def test_policy_generator_maps_observations(tmp_path: Path) -> None:
    fake = _FakePolicy()
    loaded = LoadedPolicy(
        policy=fake,
        preprocess=lambda b: b,
        postprocess=lambda a: a + 1.0,
        images={"observation.image": (3, 16, 16)},
        inputs=frozenset(
            {"observation.image", "observation.state", "observation.environment_state"}
        ),
        action_dim=2,
        policy_type="fake",
        weights_sha256="0" * 16,
    )
    gen = PolicyGenerator(tmp_path, label="ckpt", loaded=loaded)
    obs = Observation(
        np.full((32, 32, 3), 255, np.uint8),
        np.array([10.0, 20.0], np.float32),
        np.array([1.0, 2.0, 3.0], np.float32),
        0.0,
        False,
    )
    gen.reset(0, obs)
    np.testing.assert_allclose(gen.act(obs), [11.0, 21.0])
    batch = gen._policy.seen[-1]
    assert batch["observation.image"].shape == (1, 3, 16, 16)
    assert float(batch["observation.image"].max()) == pytest.approx(1.0)
    assert batch["observation.environment_state"].tolist() == [[1.0, 2.0, 3.0]]
    assert gen.params() == {"checkpoint": "ckpt", "policy_type": "fake", "weights_sha256": "0" * 16}
    other = PolicyGenerator(tmp_path, loaded=loaded)
    assert other._policy.w is gen._policy.w  # shared weights, separate state
    assert other._policy.seen is not gen._policy.seen


def write_tiny_act(path: Path, size: int = 32) -> Path:
    """A randomly initialised, tiny LeRobot ACT checkpoint (image + state -> xy)."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    cfg = ACTConfig(
        input_features={
            "observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, size, size)),
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(2,)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(2,))},
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        chunk_size=4,
        n_action_steps=4,
        use_vae=False,
        pretrained_backbone_weights=None,
        device="cpu",
    )
    xy = {"mean": torch.full((2,), 256.0), "std": torch.full((2,), 100.0)}
    img = {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.2)}
    stats = {"observation.state": xy, "action": xy, "observation.image": img}
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    ACTPolicy(cfg).save_pretrained(path)
    pre.save_pretrained(path)
    post.save_pretrained(path)
    return path


@pytest.mark.slow  # importing lerobot takes ~15 s on the shared 2-core CPU
def test_lerobot_policy_runs_closed_loop_in_the_model(tmp_path: Path) -> None:
    ckpt = write_tiny_act(tmp_path / "act")
    eng = engine(batch_size=2)
    jobs = [
        GenJob(seed=s, generator="policy", generator_params={"path": str(ckpt)}, steps=6)
        for s in range(3)
    ]
    episodes = list(eng.run(jobs))
    assert len(episodes) == 3
    for ep in episodes:
        acts = ep.data["action"]
        assert acts.shape == (6, 2) and np.isfinite(acts).all()
        assert acts.std() > 0.0  # the policy's un-normalised outputs, not a constant
        assert ep.meta.generator == "policy"
        assert ep.meta.generator_params["policy_type"] == "act"
        assert len(ep.meta.generator_params["weights_sha256"]) == 16
    eng.close()


def _gt_engine(batch_size: int) -> RolloutEngine:
    return RolloutEngine(GroundTruthModel(32), make_generator, batch_size=batch_size)


GT_JOBS = [  # seeds 100000 and 100001: the expert succeeds within 120 steps at 32 px
    GenJob(seed=s, generator="expert", generator_params={}, steps=n, stop_on_success=stop)
    for s, n, stop in ((3, 9, False), (100000, 120, True), (4, 5, False), (100001, 120, True))
]


def test_engine_inside_the_ground_truth_generates_ground_truth_episodes() -> None:
    """With the ground truth as the model, every job's episode is the one the episode
    runner records in the env itself (up to the float32 start state), whatever the batch
    size and job order; the expert's successes stop with the hold frame."""
    runs = []
    for batch, jobs in ((2, GT_JOBS), (3, GT_JOBS[::-1])):
        eng = _gt_engine(batch)
        runs.append({ep.meta.seed: ep for ep in eng.run(jobs)})
        eng.close()
    env = PushTWorld(1, 32)
    for job in GT_JOBS:
        a, b = runs[0][job.seed], runs[1][job.seed]
        for key in ("image", "action", "state", "task_state"):
            np.testing.assert_array_equal(a.data[key], b.data[key])  # order-independent
        gen = make_generator("expert")
        stop = job.stop_on_success
        real = run_episode(env, gen, job.seed, job.steps, source="real", stop_on_success=stop)
        assert a.frames == real.frames and a.meta.success == real.meta.success
        assert a.meta.success == job.stop_on_success  # the expert's two successes
        np.testing.assert_array_equal(a.data["image"], real.data["image"])
        for key in ("action", "state", "task_state"):
            np.testing.assert_allclose(a.data[key], real.data[key], atol=1e-3)
        if job.stop_on_success:
            assert a.frames < job.steps
            np.testing.assert_array_equal(a.data["action"][-1], a.data["action"][-2])
    env.close()


def test_engine_refills_rows_then_shrinks_the_tail() -> None:
    """Batch 2, budgets 2, 6, 3: the third job takes the first row after step 2; after
    step 5 one job is left and the model steps one row."""
    model = GroundTruthModel(32)
    eng = RolloutEngine(model, make_generator, batch_size=2)
    budgets = ((0, 2), (1, 6), (2, 3))
    jobs = [GenJob(seed=s, generator="play", generator_params={}, steps=n) for s, n in budgets]
    episodes = list(eng.run(jobs))
    assert sorted((ep.meta.seed, ep.frames) for ep in episodes) == [(0, 2), (1, 6), (2, 3)]
    assert model.batches == [2, 2, 2, 2, 2, 1]
    eng.close()


def test_a_stricter_success_score_makes_the_expert_push_on_to_it() -> None:
    """``success_score`` 0.97: the model's success (the episode's stop, the expert's hold
    and the kept episode's ``meta.success``) waits for a coverage of 0.97; the same seed
    with the task's own rule stops on its first coverage above 0.95, earlier."""
    job = GenJob(seed=100000, generator="expert", generator_params={}, steps=200,
                 stop_on_success=True)  # fmt: skip
    ends = {}
    for strict in (None, 0.97):
        eng = RolloutEngine(GroundTruthModel(32), make_generator, success_score=strict)
        (ep,) = list(eng.run([job]))
        eng.close()
        assert ep.meta.success is True
        ends[strict] = (ep.frames, ep.meta.score or 0.0)
    assert 0.95 < ends[None][1] < 0.97 <= ends[0.97][1]
    assert ends[0.97][0] > ends[None][0]


def test_the_stricter_success_score_is_recorded_in_each_planned_episode(tmp_path: Path) -> None:
    from factory.gen.plan import GenerateConfig, plan_jobs

    strict = plan_jobs(GenerateConfig(out=tmp_path / "g", episodes=2, success_score=0.97), set())
    assert [j.extra for j in strict] == [{"success_score": 0.97}] * 2
    assert [j.extra for j in plan_jobs(GenerateConfig(out=tmp_path / "g"), set())] == [{}] * 10
