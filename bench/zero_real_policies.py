"""The state policies of issue 20: one table that ``bench/zero_real_select.py`` compares on
R alone and ``bench/zero_real_data.py --state-policy NAME`` trains on every dataset.

Each is a lerobot policy type, its config overrides, the learning-rate schedule and the
EMA's largest decay, as ``factory policy train`` takes them (``--policy``, ``--config``,
``--lr-schedule``, ``--ema``).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

NORM = {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ENV": "MEAN_STD", "ACTION": "MEAN_STD"}
MIN_MAX = {"VISUAL": "MEAN_STD", "STATE": "MIN_MAX", "ENV": "MIN_MAX", "ACTION": "MIN_MAX"}
ACT128: dict[str, Any] = {
    "normalization_mapping": NORM, "dim_model": 128, "n_heads": 4, "dim_feedforward": 512,
    "n_encoder_layers": 2, "n_decoder_layers": 1, "chunk_size": 16, "n_action_steps": 16,
    "use_vae": False, "optimizer_lr": 3e-4,
}  # fmt: skip
VAE = {"use_vae": True, "n_vae_encoder_layers": 1}
DIFFUSION_SMALL: dict[str, Any] = {
    "normalization_mapping": MIN_MAX, "n_obs_steps": 2, "horizon": 16, "n_action_steps": 8,
    "down_dims": [64, 128, 256], "diffusion_step_embed_dim": 64,
    "noise_scheduler_type": "DDIM", "num_train_timesteps": 100, "num_inference_steps": 10,
}  # fmt: skip


class Candidate(NamedTuple):
    """A lerobot policy type, its config overrides, the learning-rate schedule
    (``factory policy train --lr-schedule``) and the EMA's largest decay (``--ema``)."""

    policy: str
    overrides: dict[str, Any]
    lr_schedule: str = "preset"
    ema: float = 0.0

    def train_args(self) -> list[str]:
        """``factory policy train``'s flags for this policy."""
        return [
            "--policy", self.policy, "--config", json.dumps(self.overrides),
            "--lr-schedule", self.lr_schedule, "--ema", str(self.ema),
        ]  # fmt: skip

    def record(self) -> dict[str, Any]:
        """The policy as the experiment's config records it (JSON types only)."""
        return json.loads(json.dumps(self._asdict()))


CANDIDATES: dict[str, Candidate] = {
    "act128": Candidate("act", ACT128),  # the experiment's first state policy
    "act128_vae": Candidate("act", {**ACT128, **VAE}),
    "act128_cosine": Candidate("act", ACT128, "cosine"),
    "act128_vae_cosine": Candidate("act", {**ACT128, **VAE}, "cosine"),
    "diffusion_small": Candidate("diffusion", DIFFUSION_SMALL),  # lerobot's preset: cosine
    "diffusion_small_ema": Candidate("diffusion", DIFFUSION_SMALL, ema=0.9999),  # DP's EMA
    # a cheaper step (0.08 s against 0.155), so more of them in the same minutes
    "diffusion_narrow": Candidate("diffusion", {**DIFFUSION_SMALL, "down_dims": [32, 64, 128]}),
    # the same network and steps, a 3x larger peak learning rate (still rising at the end)
    "diffusion_small_lr3": Candidate("diffusion", {**DIFFUSION_SMALL, "optimizer_lr": 3e-4}),
    "diffusion_small_lr10": Candidate("diffusion", {**DIFFUSION_SMALL, "optimizer_lr": 1e-3}),
}
ACT_TINY: dict[str, Any] = {
    "dim_model": 32, "n_heads": 2, "dim_feedforward": 64, "n_encoder_layers": 1,
    "n_decoder_layers": 1, "chunk_size": 8, "n_action_steps": 8, "use_vae": False,
}  # fmt: skip
SMOKE: dict[str, Candidate] = {  # the --tiny run's: seconds, not a result
    "act_tiny": Candidate("act", ACT_TINY),
    "diffusion_tiny": Candidate(
        "diffusion",
        {**DIFFUSION_SMALL, "down_dims": [16, 32], "diffusion_step_embed_dim": 16},
        ema=0.99,
    ),
}


def state_policy(name: str) -> Candidate:
    """The candidate ``name`` (``ValueError`` naming the valid ones otherwise)."""
    table = {**CANDIDATES, **SMOKE}
    if name not in table:
        raise ValueError(f"--state-policy must be one of {', '.join(table)}, got {name!r}")
    return table[name]
