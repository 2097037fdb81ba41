"""``factory train all``: one command from a store to a packed, evaluated model; resume
mid-stage; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from factories import assert_one_line_error, tiny_config, write_tiny_model_dir
from typer.testing import CliRunner

from factory.model import load_model_dir
from factory.store import EpisodeStore
from factory.train.all_stages import (
    STATE_FILE,
    AllProgress,
    AllStagesConfig,
    StageShares,
    run_all_stages,
    stage_budget,
)
from factory.train.data import load_episode_data
from factory.train.loop import Budget
from pipelines.cli import app

runner = CliRunner()


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("train_all") / "s.zarr"
    _ok(["collect", "--out", str(out), "--episodes", "3", "--steps", "110", "--resolution", "32"])
    return out


@pytest.fixture(scope="module")
def trained(store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """``train all`` at a tiny step budget with ``--eval``: (run dir, --json summary)."""
    out = tmp_path_factory.mktemp("run") / "run"
    args = ["train", "all", "--data", str(store), "--out", str(out), "--steps", "5"]
    evaluate = ["--eval", str(store), "--eval-episodes", "1", "--stability-frames", "20"]
    summary = json.loads(_ok([*args, "--device", "cpu", *evaluate, "--json"]))
    return out, summary


def test_summary_and_outputs(trained: tuple[Path, dict[str, Any]]) -> None:
    out, summary = trained
    assert summary["device"] == "cpu" and summary["model"] == str(out / "model")
    # the store has the task state: the dynamics reads it (task head), so no image probe
    assert list(summary["stages"]) == ["autoencoder", "latents", "dynamics", "heads", "decoder"]
    for stage, rec in summary["stages"].items():
        assert rec["wall_s"] > 0 and rec["samples_per_s"] > 0, stage
    steps = {s: r["steps"] for s, r in summary["stages"].items() if s != "latents"}
    assert steps == {"autoencoder": 1, "dynamics": 3, "heads": 1, "decoder": 1}
    assert sum(summary["shares"].values()) == pytest.approx(1.0)
    fid = json.loads((out / "fidelity.json").read_text())
    assert summary["fidelity"]["recon_psnr"] == fid["recon_psnr"]
    assert "h10_psnr" in summary["fidelity"] and "stability_nan" in summary["fidelity"]
    model = load_model_dir(out / "model")
    assert model.dynamics is not None and model.dynamics.task_head is not None
    assert model.has_task_reader and model.dynamics.cfg.objective == "x0"
    assert not list((out / "model").glob("*.optim.*"))


def test_model_accepted_by_eval_teleop_generate(
    trained: tuple[Path, dict[str, Any]], store: Path, tmp_path: Path, ray_session: Any
) -> None:
    model = str(trained[0] / "model")
    fid = ["eval", "fidelity", "--model", model, "--data", str(store), "--episodes", "1"]
    assert "horizons" in json.loads(
        _ok([*fid, "--stability-frames", "10", "--device", "cpu", "--json"])
    )
    teleop = ["teleop", "--model", model, "--device", "scripted", "--headless", "--fps", "100"]
    out = json.loads(
        _ok(
            [
                *teleop,
                "--episodes",
                "1",
                "--steps",
                "5",
                "--out",
                str(tmp_path / "t.zarr"),
                "--json",
            ]
        )
    )
    assert out["frames"] == 5
    gen = ["generate", "--model", model, "--generator", "play", "--episodes", "2", "--steps", "4"]
    _ok([*gen, "--batch-size", "2", "--out", str(tmp_path / "g.zarr")])
    with EpisodeStore.open(tmp_path / "g.zarr") as generated:
        assert generated.n_episodes == 2


def test_resume_continues_the_running_stage(store: Path, tmp_path: Path) -> None:
    """Interrupted at dynamics step 3 (checkpointed at 2), ``--resume`` skips the finished
    stages and goes on from dynamics step 3 to the end."""
    data = load_episode_data(store)
    out = tmp_path / "run"
    cfg = AllStagesConfig(checkpoint_every_s=0.0, log_every=1)

    def interrupt(p: AllProgress) -> None:
        if p.stage == "dynamics" and p.step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_all_stages(
            data, out, tiny_config(), Budget(steps=20), "cpu", cfg, on_progress=interrupt
        )
    state = json.loads((out / STATE_FILE).read_text())
    assert state["stages"]["autoencoder"]["status"] == "done"
    assert state["stages"]["dynamics"]["status"] == "running"
    assert json.loads((out / "dynamics.state.json").read_text())["step"] == 2

    seen: list[AllProgress] = []
    summary = run_all_stages(
        data, out, tiny_config(), Budget(steps=20), "cpu", cfg, resume=True, on_progress=seen.append
    )
    dyn_steps = [p.step for p in seen if p.stage == "dynamics"]
    assert {p.stage for p in seen} == {"dynamics", "heads", "decoder", "probe"}
    # the dynamics share: 20 steps x 0.58 / 1.06 (every stage's share) = 11
    assert dyn_steps[0] == 3 and dyn_steps[-1] == summary["stages"]["dynamics"]["steps"] == 11
    _ok(["train", "all", "--data", str(store), "--out", str(out), "--resume", "--device", "cpu"])
    assert (out / "model" / "dynamics.safetensors").is_file()


def test_minutes_shares_follow_the_time_left() -> None:
    shares, stages = StageShares(), ("autoencoder", "latents", "dynamics", "decoder", "probe")
    total = Budget(minutes=10)
    first = stage_budget("autoencoder", stages, set(), shares, total, 0.0)
    assert first.minutes == pytest.approx(10 * 0.22)
    # the autoencoder overran by a minute: the dynamics' share of what is left shrinks
    late = stage_budget("dynamics", stages, {"autoencoder"}, shares, total, 60 * 3.2)
    assert late.minutes == pytest.approx(6.8 * 0.58 / 0.78)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--steps", "0"], "positive"),
        (["--minutes", "-1"], "positive"),
        ([], "budget"),
        (["--steps", "2", "--device", "tpu"], "device"),
        (["--steps", "2", "--resume"], "train all"),
    ],
)
def test_bad_input_is_one_line(store: Path, tmp_path: Path, extra: list[str], needle: str) -> None:
    out = write_tiny_model_dir(tmp_path / "not_a_run")  # a model dir, not a train-all run
    args = [
        "train",
        "all",
        "--data",
        str(store),
        "--out",
        str(out if "--resume" in extra else tmp_path / "o"),
    ]
    assert_one_line_error(runner.invoke(app, [*args, *extra]), needle)


def test_missing_stores_and_busy_out(store: Path, tmp_path: Path) -> None:
    base = ["train", "all", "--steps", "2", "--device", "cpu"]
    missing = ["--data", str(tmp_path / "nope.zarr"), "--out", str(tmp_path / "o")]
    assert_one_line_error(runner.invoke(app, [*base, *missing]), "does not exist")
    bad_eval = ["--data", str(store), "--out", str(tmp_path / "o"), "--eval", str(tmp_path / "x")]
    assert_one_line_error(runner.invoke(app, [*base, *bad_eval]), "--eval")
    busy = write_tiny_model_dir(tmp_path / "busy")
    assert_one_line_error(
        runner.invoke(app, [*base, "--data", str(store), "--out", str(busy)]), "--resume"
    )
    one_stage = ["train", "probe", "--data", str(store), "--out", str(tmp_path / "p")]
    assert_one_line_error(runner.invoke(app, [*one_stage, "--steps", "1", "--eval", str(store)]))
