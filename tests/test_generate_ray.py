"""``factory generate`` on Ray: exactly-N after a worker dies, resume, replay, bad input,
where the workers land (GPU shares on a cluster that declares GPUs, two nodes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import assert_one_line_error, write_tiny_model_dir
from typer.testing import CliRunner

from factory.envs.pusht import pusht_spec
from factory.errors import FactoryError
from factory.gen import GeneratedEpisode
from factory.gen.placement import worker_options
from factory.gen.plan import GenerateConfig
from factory.gen.writer import GenProgress, Writer, summarise
from factory.record import open_output
from factory.store import EpisodeMeta, EpisodeStore
from pipelines.cli import app
from pipelines.generate import prepare_generate, run_generate
from pipelines.generate_ray import worker_device

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model_dir(tmp_path_factory.mktemp("gen") / "model")


def _generate(model: Path, out: Path, *extra: str) -> Any:
    args = ["generate", "--model", str(model), "--out", str(out), "--batch-size", "2", *extra]
    return runner.invoke(app, args)


def test_exactly_n_after_a_worker_is_killed(
    ray_session: Any, model_dir: Path, tmp_path: Path
) -> None:
    """Two workers run the probe-driven expert; one is killed mid-batch. The store still
    ends with exactly N episodes, each seed once, each with the probe's score."""
    out = tmp_path / "g.zarr"
    killed: list[str] = []

    def kill_once(p: GenProgress) -> None:
        if not killed and p.written == 2:  # the worker that just delivered is mid-batch
            killed.append(p.worker)
            ray_session.kill(ray_session.get_actor(p.worker), no_restart=True)

    cfg = GenerateConfig(
        out=out,
        generator="expert",
        episodes=12,
        model=model_dir,
        steps=20,
        batch_size=2,
        workers=2,
    )
    summary = run_generate(cfg, kill_once)
    assert killed and summary["worker_restarts"] == 1
    assert summary["requeued"] >= 1  # the killed worker's episode in flight was redone
    assert summary["episodes"] == 12 and summary["tried"] == 12
    with EpisodeStore.open(out) as store:
        metas = store.all_meta()
        assert sorted(m.seed for m in metas) == list(range(12))  # exactly N, none twice
        assert max(store.episode_lengths.tolist()) <= 21
        for m in metas:
            assert m.source == "world_model" and m.generator == "expert"
            assert m.extra["task_state"] == "probe" and 0.0 <= (m.score or 0.0) <= 1.0
            assert m.model_id is not None and m.model_id.startswith("model@")


def test_replay_resumes_without_duplicates(
    ray_session: Any, model_dir: Path, tmp_path: Path
) -> None:
    """Replay of real episodes from their real first frames, perturbed; a rerun with
    --append and a larger N adds only the missing seeds; a third run does nothing."""
    src = tmp_path / "src.zarr"
    collected = runner.invoke(
        app,
        ["collect", "--out", str(src), "--episodes", "2", "--steps", "6", "--resolution", "32"],
    )
    assert collected.exit_code == 0, collected.output
    out = tmp_path / "rp.zarr"
    base = ("--generator", "replay", "--source", str(src), "--noise", "2", "--time-warp", "0.2")
    first = _generate(model_dir, out, "--episodes", "2", *base, "--json")
    assert first.exit_code == 0, first.output
    summary = json.loads(first.stdout)
    assert {"episodes", "frames", "frames_per_s", "successes"} <= set(summary)
    assert summary["episodes"] == 2 and summary["frames_per_s"] > 0
    with EpisodeStore.open(out) as store:
        kept = {m.seed: store.episode(i)["image"].copy() for i, m in enumerate(store.all_meta())}
    again = _generate(model_dir, out, "--episodes", "3", "--append", *base, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["skipped"] == 2
    with EpisodeStore.open(out) as store, EpisodeStore.open(src) as source:
        metas = store.all_meta()
        assert sorted(m.seed for m in metas) == [0, 1, 2]
        for i, m in enumerate(metas):
            if m.seed in kept:
                np.testing.assert_array_equal(store.episode(i)["image"], kept[m.seed])
            assert m.extra["initial"] == "store" and m.extra["source"] == str(src)
            assert m.generator_params["perturb"] == {"noise": 2.0, "time_warp": 0.2}
            real = source.episode(m.extra["source_episode"])
            np.testing.assert_array_equal(store.episode(i)["image"][0], real["image"][0])
    done = _generate(model_dir, out, "--episodes", "3", "--append", *base, "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["tried"] == 0


def _episode(seed: int, success: bool) -> GeneratedEpisode:
    data = {
        "image": np.zeros((3, 32, 32, 3), np.uint8),
        "action": np.zeros((3, 2), np.float32),
        "state": np.zeros((3, 2), np.float32),
        "task_state": np.zeros((3, 3), np.float32),
    }
    meta = EpisodeMeta(source="world_model", generator="expert", seed=seed, success=success)
    return GeneratedEpisode(data, meta)


def test_only_success_keeps_successes_and_counts_tries(model_dir: Path, tmp_path: Path) -> None:
    """The single writer: with only_success it stores the probe's successes only, counts
    every try, and never writes a seed twice."""
    cfg = GenerateConfig(out=tmp_path / "s.zarr", episodes=4, model=model_dir, only_success=True)
    plan = prepare_generate(cfg)
    writer = Writer(plan, None)
    assert plan.store is None and not cfg.out.exists()  # created on the first episode
    with plan.output():
        for seed, ok in [(0, True), (1, False), (2, True), (2, True), (3, False)]:
            writer.add(_episode(seed, ok), "w0", ("w0",), 0)
        s = summarise(writer, plan, {"generate_s": 1.0})
    assert (s["tried"], s["kept"], s["episodes"], s["successes"]) == (4, 2, 2, 2)
    assert s["frames"] == 6 and s["frames_generated"] == 12 and s["success_rate"] == 0.5
    with EpisodeStore.open(cfg.out) as store:
        assert [m.seed for m in store.all_meta()] == [0, 2]


@pytest.mark.parametrize(
    ("case", "needles"),
    [
        ("action_dim", ("3-D actions",)),
        ("address", ("no Ray cluster answers",)),
        ("episodes", ("--episodes must be positive",)),
        ("no_source", ("--source",)),
        ("missing_source", ("does not exist",)),
        ("schema", ("different schema",)),
        ("unknown_generator", ("unknown generator",)),
        ("gpus_negative", ("--gpus-per-worker must be >= 0",)),
        ("gpus_not_whole", ("whole GPUs only",)),
        ("gpus_with_cpu", ("--device cpu but --gpus-per-worker 0.5",)),
        ("no_gpus_with_cuda", ("--device cuda but --gpus-per-worker 0",)),
    ],
)
def test_bad_input_is_refused_before_any_work(
    case: str, needles: tuple[str, ...], model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.zarr"
    model, extra = model_dir, ["--episodes", "2"]
    if case == "action_dim":
        model = write_tiny_model_dir(tmp_path / "m3", action_dim=3)
    elif case == "address":
        extra += ["--ray-address", "127.0.0.1:1"]
    elif case == "episodes":
        extra = ["--episodes", "0"]
    elif case == "no_source":
        extra += ["--generator", "replay"]
    elif case == "missing_source":
        extra += ["--generator", "replay", "--source", str(tmp_path / "nope.zarr")]
    elif case == "schema":
        open_output(out, pusht_spec(16), 16, append=False).close()
        extra += ["--append"]
    elif case.startswith(("gpus", "no_gpus")):
        extra += {
            "gpus_negative": ["--gpus-per-worker=-1"],
            "gpus_not_whole": ["--gpus-per-worker", "1.5"],
            "gpus_with_cpu": ["--gpus-per-worker", "0.5", "--device", "cpu"],
            "no_gpus_with_cuda": ["--gpus-per-worker", "0", "--device", "cuda"],
        }[case]
    else:
        extra += ["--generator", "dance"]
    assert_one_line_error(_generate(model, out, *extra), *needles)
    if case != "schema":
        assert not out.exists()


def test_ray_refusal_after_connect_leaves_no_store(
    ray_session: Any, model_dir: Path, tmp_path: Path
) -> None:
    """Ray answers but cannot run the workers (too few CPUs): nothing is created."""
    out = tmp_path / "none.zarr"
    result = _generate(model_dir, out, "--episodes", "2", "--workers", "5")
    assert_one_line_error(result, "need 5 CPUs")
    assert not out.exists()


def _plan_cfg(workers: int, gpus: float | None, device: str = "auto") -> GenerateConfig:
    return GenerateConfig(out=Path("unused"), workers=workers, gpus_per_worker=gpus, device=device)


SPREAD = "SPREAD"


@pytest.mark.parametrize(
    ("workers", "gpus", "cluster", "node_gpus", "expected"),
    [
        # a quarter GPU each: 8 fit on 2 GPUs, 4 to a GPU
        (8, 0.25, {"CPU": 8, "GPU": 2}, [2], {"num_gpus": 0.25, "num_cpus": 1.0}),
        (9, 0.25, {"CPU": 9, "GPU": 2}, [2], "2 GPUs hold 8"),
        # a share must fit inside one GPU: 0.3 gives 3 a GPU (not 2 / 0.3 = 6.7 in all)
        (7, 0.3, {"CPU": 8, "GPU": 2}, [2], "2 GPUs hold 6"),
        (4, 0.5, {"CPU": 4, "GPU": 2}, [1, 1], {"num_gpus": 0.5, "num_cpus": 1.0}),
        (2, 2.0, {"CPU": 4, "GPU": 4}, [2, 2], {"num_gpus": 2.0, "num_cpus": 1.0}),
        (3, 2.0, {"CPU": 4, "GPU": 5}, [3, 2], "5 GPUs hold 2"),
        # the default: one whole GPU each where the cluster has GPUs, else CPUs
        (2, None, {"CPU": 2, "GPU": 2}, [2], {"num_gpus": 1.0, "num_cpus": 1.0}),
        (3, None, {"CPU": 4, "GPU": 2}, [2], "2 GPUs hold 2"),
        (2, None, {"CPU": 2}, [0], {"num_cpus": 1.0}),
        (2, 0.0, {"CPU": 2, "GPU": 2}, [2], {"num_cpus": 1.0}),  # 0: CPU workers
        (2, 0.5, {"CPU": 2}, [0], "0 GPUs hold 0"),
        (8, 0.25, {"CPU": 4, "GPU": 2}, [2], "need 8 CPUs"),  # each GPU worker takes a CPU
    ],
)
def test_worker_plan(
    workers: int,
    gpus: float | None,
    cluster: dict[str, float],
    node_gpus: list[float],
    expected: dict[str, float] | str,
) -> None:
    """What each worker asks Ray for, or the one line that refuses the plan."""
    cfg = _plan_cfg(workers, gpus)
    if isinstance(expected, str):
        with pytest.raises(FactoryError, match=expected):
            worker_options(cfg, cluster, node_gpus)
        return
    assert worker_options(cfg, cluster, node_gpus) == {**expected, "scheduling_strategy": SPREAD}


def test_worker_device_never_falls_back_to_the_cpu() -> None:
    """A worker Ray gave a GPU runs on it, or refuses where torch has no CUDA (with
    --device auto as with cuda); one given none runs on the CPU."""
    assert worker_device("auto", ["1"], cuda=True) == "cuda"
    assert worker_device("cuda:1", ["1"], cuda=True) == "cuda"  # Ray shows it as device 0
    assert worker_device("auto", [], cuda=True) == "cpu"
    for requested in ("auto", "cuda"):
        with pytest.raises(FactoryError, match="GPU 1 on node abc but torch there has no CUDA"):
            worker_device(requested, ["1"], cuda=False, node="abc")
    with pytest.raises(FactoryError, match="gave this worker no GPU"):
        worker_device("cuda", [], cuda=True)


GPU_SCRIPT = textwrap.dedent(
    """
    import json, logging, os, sys
    os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
    os.environ["RAY_AUTH_MODE"] = "disabled"
    from pathlib import Path
    import ray
    from typer.testing import CliRunner
    from pipelines.cli import app
    from pipelines.generate import prepare_generate
    from pipelines.generate_ray import Pool
    from factory.gen.plan import GenerateConfig

    class Probe:  # a stand-in worker that imports nothing (no torch): where did it land?
        def __init__(self, *args):
            pass

        def ready(self):
            ctx = ray.get_runtime_context()
            gpus = [str(g) for g in ctx.get_accelerator_ids()["GPU"]]
            return {"device": "probe", "node": ctx.get_node_id(), "gpus": gpus}

    tmp, model = Path(sys.argv[1]), Path(sys.argv[2])
    ray.init(num_cpus=8, num_gpus=2, include_dashboard=False, logging_level=logging.WARNING,
             object_store_memory=256 * 2**20)
    cfg = GenerateConfig(out=tmp / "p.zarr", generator="play", episodes=8, model=model,
                            steps=3, batch_size=2, workers=8, gpus_per_worker=0.25)
    pool = Pool(prepare_generate(cfg), worker_cls=Probe)
    try:
        pool.spawn(cfg.workers)
        placed = {"options": pool.options, "placement": list(pool.placement.values())}
    finally:
        pool.close()
    # a real worker given a quarter GPU on this CUDA-less machine (--device auto)
    args = ["generate", "--model", str(model), "--out", str(tmp / "g.zarr"), "--steps", "3",
            "--episodes", "2", "--batch-size", "2", "--workers", "1", "--gpus-per-worker", "0.25"]
    result = CliRunner().invoke(app, args)
    placed["cli"] = {"exit": result.exit_code, "output": result.output,
                     "store": (tmp / "g.zarr").exists()}
    ray.shutdown()
    print(json.dumps(placed))
    """
)


def _script(script: str, tmp_path: Path, model_dir: Path) -> Any:
    """Run ``script`` in a fresh Python (its own Ray); its last stdout line as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), str(model_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # 8 Ray workers on 2 cores: about 50 s, the default suite's slowest test
def test_quarter_gpu_workers_land_four_to_a_gpu(model_dir: Path, tmp_path: Path) -> None:
    """A local Ray that declares 2 GPUs, --gpus-per-worker 0.25: the 8 workers ask for a
    quarter GPU each and land 4 on GPU 0, 4 on GPU 1. A real worker given a GPU on this
    CUDA-less machine stops the run with one line naming the cause (never generating on
    the CPU instead), before any output store exists."""
    placed = _script(GPU_SCRIPT, tmp_path, model_dir)
    assert placed["options"] == {"num_gpus": 0.25, "num_cpus": 1.0, "scheduling_strategy": SPREAD}
    where = placed["placement"]
    assert len(where) == 8 and all(len(w["gpus"]) == 1 for w in where)
    assert Counter(w["gpus"][0] for w in where) == {"0": 4, "1": 4}
    cli = placed["cli"]
    assert cli["exit"] == 2 and not cli["store"], cli
    text = cli["output"].strip()
    assert len(text.splitlines()) == 1 and "Traceback" not in text, text
    assert "Ray gave a generate worker GPU" in text and "torch there has no CUDA" in text


@pytest.mark.slow  # four measured runs, three of them on Ray workers
def test_bench_generate_json(ray_session: Any, model_dir: Path) -> None:
    args = ["bench", "generate", "--model", str(model_dir), "--episodes", "4", "--steps", "3"]
    result = runner.invoke(app, [*args, "--batch-size", "2", "--repeats", "2", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {"batched_fps", "batch1_fps", "ratio"} <= set(out)
    assert out["ratio"] == pytest.approx(out["batched_fps"] / out["batch1_fps"])
    for run in ("batch1", "engine", "ray_1", "ray_2", "ray_1_expert"):
        assert out["runs"][run]["frames"] == 12
    assert out["runs"]["bare"]["frames"] == 6  # batch 2 x 3 timed steps
    assert out["pipeline_ratio"] == pytest.approx(out["batched_fps"] / out["bare_model_fps"])
    runs = out["expert_vs_play_runs"]
    assert len(runs) == 2  # --repeats 2: two interleaved play / expert pairs
    assert out["expert_vs_play"] == pytest.approx(float(np.median(runs)))
    assert runs[0] == pytest.approx(out["runs"]["ray_1_expert"]["fps"] / out["batched_fps"])


CLUSTER_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
    os.environ["RAY_AUTH_MODE"] = "disabled"
    from pathlib import Path
    from ray.cluster_utils import Cluster
    import ray
    from factory.gen.plan import GenerateConfig
    from pipelines.generate import run_generate

    tmp, model = Path(sys.argv[1]), Path(sys.argv[2])
    head = {"num_cpus": 1, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    cfg = GenerateConfig(out=tmp / "c.zarr", generator="play", episodes=6,
                         model=model, steps=4, batch_size=2, workers=2,
                         ray_address=cluster.address)
    delivered = []  # (worker, episodes written so far) per episode, from the one writer
    s = run_generate(cfg, lambda p: delivered.append((p.worker, p.written)))
    s.pop("store")
    s["delivered"] = delivered
    ray.init(address=cluster.address)  # run_generate left the cluster it joined
    s["cluster_nodes"] = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    print(json.dumps(s))
    ray.shutdown()
    cluster.shutdown()
    """
)


@pytest.mark.slow  # two simulated nodes: ~30-60 s on the shared 2-core CPU
def test_two_node_cluster(model_dir: Path, tmp_path: Path) -> None:
    """Two simulated nodes of one CPU each, two workers: one lands on each node, both
    deliver episodes, and the driver's one writer commits exactly N, each seed once."""
    summary = _script(CLUSTER_SCRIPT, tmp_path, model_dir)
    assert summary["episodes"] == 6 and summary["tried"] == 6 and summary["worker_nodes"] == 2
    node_of = {w["worker"]: w["node"] for w in summary["placement"]}
    assert len(node_of) == 2 and set(node_of.values()) == set(summary["cluster_nodes"])
    assert summary["device"] == "cpu" and all(not w["gpus"] for w in summary["placement"])
    workers = [w for w, _ in summary["delivered"]]
    assert set(workers) == set(node_of)  # episodes came from workers on both nodes
    assert [n for _, n in summary["delivered"]] == list(range(1, 7))  # one writer, in order
    with EpisodeStore.open(tmp_path / "c.zarr") as store:
        assert sorted(m.seed for m in store.all_meta()) == list(range(6))


def test_connect_leaves_ray_auth_mode_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``connect`` never sets RAY_AUTH_MODE: Ray reads it when imported, and setting it
    afterwards left the driver without a token for the cluster it started
    (InvalidAuthToken). A local cluster gets token auth by Ray's own default."""
    import ray

    from pipelines.generate_ray import connect

    seen: list[tuple[str | None, str | None]] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)

    def init(address: str | None = None, **_: Any) -> None:
        seen.append((address, os.environ.get("RAY_AUTH_MODE")))

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setenv("RAY_AUTH_MODE", "unset")  # so that the teardown restores the original
    monkeypatch.delenv("RAY_AUTH_MODE")
    assert connect("10.0.0.1:6379") and seen[-1] == ("10.0.0.1:6379", None)
    assert connect(None) and seen[-1] == (None, None)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert connect(None) and seen[-1] == (None, "disabled")  # the user's choice wins
