"""``factory bench rollout`` on a tiny model: the JSON keys and sane, measured values."""

from __future__ import annotations

from pathlib import Path

import pytest
from factories import write_tiny_model_dir

from factory.errors import FactoryError
from pipelines.bench_rollout import RolloutBenchRequest, run_rollout_bench


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model")


def test_rollout_bench_reports_measured_speeds(tiny_dir: Path) -> None:
    req = RolloutBenchRequest(model=tiny_dir, device="cpu", steps=5, warmup=1, batches=(2, 4))
    result = run_rollout_bench(req)
    assert result["device"].startswith("cpu")
    assert result["fps_batch1"] > 0
    assert set(result["throughput"]) == {"2", "4"}
    assert all(v > 0 for v in result["throughput"].values())
    ratio = result["throughput_ratio"]["4"]
    assert ratio == pytest.approx(result["throughput"]["4"] / result["fps_batch1"])


def test_rollout_bench_refuses_bad_steps(tiny_dir: Path) -> None:
    with pytest.raises(FactoryError, match="steps"):
        run_rollout_bench(RolloutBenchRequest(model=tiny_dir, device="cpu", steps=0))


def test_cli_bench_rollout_json(tiny_dir: Path) -> None:
    import json

    from typer.testing import CliRunner

    from pipelines.cli import app

    args = ["bench", "rollout", "--model", str(tiny_dir), "--device", "cpu", "--steps", "3"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"device", "fps_batch1", "throughput"} <= set(data)
    assert set(data["throughput"]) == {"10", "16", "64"}


def test_cli_bench_rollout_missing_model(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pipelines.cli import app

    result = CliRunner().invoke(app, ["bench", "rollout", "--model", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_rollout_bench_on_a_pile_model_starts_from_pile_scenes(
    tiny_dir: Path, tmp_path: Path
) -> None:
    """A pile model is started from the pile world's scenes (2 + 60 numbers, not PushT's
    5), with a PushT model as its baseline in the same run."""
    from factories import write_tiny_object_set_dir

    pile = write_tiny_object_set_dir(tmp_path / "pile")
    req = RolloutBenchRequest(model=pile, baseline=tiny_dir, device="cpu", steps=3, warmup=1,
                              batches=(2,))  # fmt: skip
    result = run_rollout_bench(req)
    assert result["kind"] == "object_set" and result["baseline"]["kind"] == "latent_grid"
    assert result["fps_batch1"] > 0 and result["fps_ratio_vs_baseline"] > 0
