"""Slow: ``lerobot-train`` runs a few CPU steps of a small ACT and a small diffusion policy
on a ``factory export lerobot`` dataset, offline (``pytest -m slow``)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipelines.cli import app

pytest.importorskip("lerobot.datasets.lerobot_dataset")
pytestmark = pytest.mark.slow

REPO = "local/pusht_export"
SMALL = {
    "act": [
        "--policy.pretrained_backbone_weights=null",
        "--policy.dim_model=64",
        "--policy.n_heads=2",
        "--policy.dim_feedforward=128",
        "--policy.n_encoder_layers=1",
        "--policy.n_decoder_layers=1",
        "--policy.chunk_size=8",
        "--policy.n_action_steps=8",
    ],
    "diffusion": [
        "--policy.pretrained_backbone_weights=null",
        "--policy.down_dims=[32,64]",
        "--policy.diffusion_step_embed_dim=32",
        "--policy.n_obs_steps=2",
        "--policy.horizon=8",
        "--policy.n_action_steps=4",
        "--policy.num_train_timesteps=10",
    ],
}


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("train")
    store, out = base / "pusht.zarr", base / "lerobot"
    runner = CliRunner()
    args = ["collect", "--generator", "expert", "--episodes", "3", "--steps", "16"]
    assert runner.invoke(app, [*args, "--out", str(store)]).exit_code == 0
    result = runner.invoke(app, ["export", "lerobot", str(store), str(out), "--repo-id", REPO])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("policy", sorted(SMALL))
def test_lerobot_train_runs_on_export(export: Path, tmp_path: Path, policy: str) -> None:
    train = Path(sys.executable).parent / "lerobot-train"
    out = tmp_path / "run"
    cmd = [
        str(train),
        f"--dataset.repo_id={REPO}",
        f"--dataset.root={export}",
        "--dataset.video_backend=pyav",
        f"--policy.type={policy}",
        "--policy.device=cpu",
        "--policy.push_to_hub=false",
        *SMALL[policy],
        "--steps=3",
        "--batch_size=4",
        "--num_workers=0",
        "--log_freq=1",
        "--save_freq=3",
        "--wandb.enable=false",
        f"--output_dir={out}",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    losses = [float(x) for x in re.findall(r"step:\d+ .*?loss:([-\d.e+]+)", log)]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses), log[-3000:]
    assert (out / "checkpoints" / "last" / "pretrained_model" / "model.safetensors").is_file()
