"""Slow: ``lerobot-eval`` scores one tiny ACT checkpoint (``lerobot-train``, 2 CPU steps on
a ``factory export lerobot`` dataset) for 2 episodes in lerobot's ``pusht`` env and in
``--env.type=demofactory`` (a tiny world model), offline (``pytest -m slow``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from factories import write_tiny_model_dir
from typer.testing import CliRunner

from pipelines.cli import app

pytest.importorskip("lerobot.scripts.lerobot_eval")
pytestmark = pytest.mark.slow

REPO = "local/pusht_export"
BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
SMALL_ACT = [
    "--policy.type=act",
    "--policy.pretrained_backbone_weights=null",
    "--policy.dim_model=64",
    "--policy.n_heads=2",
    "--policy.dim_feedforward=128",
    "--policy.n_encoder_layers=1",
    "--policy.n_decoder_layers=1",
    "--policy.chunk_size=8",
    "--policy.n_action_steps=8",
]


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    return log


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("evalplug")
    store, export, run = base / "pusht.zarr", base / "lerobot", base / "run"
    runner = CliRunner()
    args = ["collect", "--generator", "expert", "--episodes", "2", "--steps", "16"]
    assert runner.invoke(app, [*args, "--out", str(store)]).exit_code == 0
    result = runner.invoke(app, ["export", "lerobot", str(store), str(export), "--repo-id", REPO])
    assert result.exit_code == 0, result.output
    _run(
        [
            str(BIN / "lerobot-train"),
            f"--dataset.repo_id={REPO}",
            f"--dataset.root={export}",
            "--dataset.video_backend=pyav",
            "--policy.device=cpu",
            "--policy.push_to_hub=false",
            *SMALL_ACT,
            "--steps=2",
            "--batch_size=2",
            "--num_workers=0",
            "--save_freq=2",
            "--wandb.enable=false",
            f"--output_dir={run}",
        ]
    )
    ckpt = run / "checkpoints" / "last" / "pretrained_model"
    assert (ckpt / "model.safetensors").is_file()
    return ckpt


@pytest.mark.parametrize("env", ["pusht", "demofactory"])
def test_lerobot_eval_two_episodes(checkpoint: Path, tmp_path: Path, env: str) -> None:
    out = tmp_path / "eval"
    env_args = {
        "pusht": ["--env.type=pusht", "--eval.use_async_envs=false"],
        "demofactory": [
            "--env.type=demofactory",
            f"--env.model={write_tiny_model_dir(tmp_path / 'model')}",
            "--env.device=cpu",
            "--env.image_size=96",  # the tiny model's 32 px frames, at the export's size
        ],
    }[env]
    _run(
        [
            str(BIN / "lerobot-eval"),
            f"--policy.path={checkpoint}",
            "--policy.device=cpu",
            *env_args,
            "--env.episode_length=6",
            "--eval.n_episodes=2",
            "--eval.batch_size=2",
            f"--output_dir={out}",
        ]
    )
    info = json.loads((out / "eval_info.json").read_text())
    episodes = [e for task in info["per_task"] for e in task["metrics"]["successes"]]
    assert len(episodes) == 2
    assert 0.0 <= info["overall"]["pc_success"] <= 100.0
    assert list((out / "videos").rglob("*.mp4")), "lerobot-eval rendered no episode video"
