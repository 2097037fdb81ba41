"""Train a lerobot policy on a state-only LeRobot dataset, with the whole dataset in RAM.

``lerobot-train`` reads every sample through the dataset's per-item query: on the 2-core
CPU an action chunk of 16 costs 4 ms per sample, 0.26 s of a 0.4 s step at batch 64, for
a model whose update takes 0.15 s. Here the numeric columns are read once into arrays
and each batch is gathered with one index operation, with lerobot's own padding rule
(indices clamped to the episode, ``<key>_is_pad`` marking the clamped ones).

Everything else is lerobot's: the policy class and its config (``make_policy``), the
pre/post-processors and their normalisation statistics (``make_pre_post_processors``),
the optimizer and scheduler presets, gradient clipping, and the checkpoint format
(``save_pretrained`` of the policy and both processors), so ``lerobot-eval
--policy.path=CKPT`` loads what this writes. One addition, off by default: ``ema``, an
exponential moving average of the weights (diffusion_policy's recipe, which lerobot's
trainer does not have); its checkpoints then hold the averaged weights. Image policies
are refused: train them with ``lerobot-train``, whose video decoding this does not
replace.
"""

from __future__ import annotations

import contextlib
import json
import logging
import resource
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from factory.errors import FactoryError

log = logging.getLogger(__name__)

OnStep = Callable[[int, int, float], None]  # (step, total steps, loss)


@dataclass(frozen=True)
class PolicyTrainConfig:
    """One training run: ``policy`` (a lerobot policy type) with config ``overrides`` on the
    dataset at ``root``, ``steps`` updates of ``batch_size``, a checkpoint at each step of
    ``save_steps`` (the last step always) under ``out/checkpoints/<step>/pretrained_model``."""

    root: Path
    repo_id: str
    out: Path
    policy: str = "act"
    overrides: dict[str, Any] = field(default_factory=dict)
    steps: int = 4000
    batch_size: int = 64
    save_steps: Sequence[int] = ()
    seed: int = 1000
    device: str = "cpu"
    lr_schedule: str = "preset"  # "preset": the policy's own; "cosine": warm-up, cosine decay
    ema: float = 0.0  # the EMA's largest decay (0: no EMA); checkpoints hold the EMA weights

    def checkpoint_steps(self) -> list[int]:
        return sorted({*(s for s in self.save_steps if 0 < s <= self.steps), self.steps})


class FrameTable:
    """A dataset's numeric columns in RAM and its episode bounds.

    ``columns[key]``: (N, D) float32; ``start``/``end``: (N,) int64, the first and one past
    the last frame of each frame's episode.
    """

    def __init__(self, columns: dict[str, np.ndarray], episode: np.ndarray) -> None:
        self.columns = columns
        n = len(episode)
        change = np.flatnonzero(np.diff(episode)) + 1
        bounds = np.concatenate([[0], change, [n]])
        lengths = np.diff(bounds)
        self.start = np.repeat(bounds[:-1], lengths)
        self.end = np.repeat(bounds[1:], lengths)
        self.n = n

    def sample_from(self, drop_last: int = 0) -> np.ndarray:
        """Frame indices a batch may start at: all but each episode's last ``drop_last``
        (lerobot-train's ``EpisodeAwareSampler`` with the policy's ``drop_n_last_frames``)."""
        ok = np.flatnonzero(np.arange(self.n) < self.end - drop_last)
        return ok if len(ok) else np.arange(self.n)

    @classmethod
    def from_dataset(cls, dataset: Any, keys: Sequence[str]) -> FrameTable:
        hf = dataset.hf_dataset.with_format("numpy")
        cols = {k: np.asarray(np.stack(hf[k]), np.float32).reshape(len(hf), -1) for k in keys}
        return cls(cols, np.asarray(hf["episode_index"], np.int64))

    def batch(self, index: np.ndarray, deltas: dict[str, list[int] | None]) -> dict[str, Any]:
        """Frames ``index`` (B,): each key at ``index + delta`` clamped to its episode,
        (B, D) without deltas or (B, T, D) with them, plus ``<key>_is_pad`` (B, T) bool."""
        import torch

        out: dict[str, Any] = {}
        for key, col in self.columns.items():
            d = deltas.get(key)
            if d is None:
                out[key] = torch.from_numpy(col[index])
                continue
            want = index[:, None] + np.asarray(d)[None]  # (B, T)
            lo, hi = self.start[index][:, None], self.end[index][:, None] - 1
            out[key] = torch.from_numpy(col[np.clip(want, lo, hi)])
            out[f"{key}_is_pad"] = torch.from_numpy((want < lo) | (want > hi))
        return out


def _deltas(cfg: Any, keys: Sequence[str]) -> dict[str, list[int] | None]:
    """lerobot's ``resolve_delta_timestamps`` rule, in frames."""
    out: dict[str, list[int] | None] = {}
    for key in keys:
        if key == "action":
            out[key] = cfg.action_delta_indices
        elif key.startswith("observation."):
            out[key] = cfg.observation_delta_indices
    return out


def _build(cfg: PolicyTrainConfig) -> tuple[Any, Any, Any, Any]:
    """(dataset, policy, preprocessor, postprocessor), through lerobot's factories."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    from lerobot.policies import make_policy, make_pre_post_processors
    from lerobot.policies.factory import make_policy_config

    info = cfg.root / "meta" / "info.json"
    if not info.is_file():
        raise FactoryError(f"{cfg.root} is not a LeRobot dataset (no meta/info.json)")
    if cfg.steps < 1 or cfg.batch_size < 1:
        raise FactoryError(f"steps and batch size must be >= 1, got {cfg.steps}, {cfg.batch_size}")
    if cfg.ema and not 0.0 < cfg.ema < 1.0:
        raise FactoryError(f"--ema must be 0 (off) or a decay in (0, 1), got {cfg.ema}")
    if cfg.lr_schedule not in LR_SCHEDULES:
        raise FactoryError(f"--lr-schedule must be one of {', '.join(LR_SCHEDULES)}")
    features = json.loads(info.read_text()).get("features", {})
    cameras = [k for k, ft in features.items() if ft.get("dtype") in ("image", "video")]
    if cameras:
        raise FactoryError(
            f"{cfg.root} has cameras ({', '.join(cameras)}); this trainer is for state-only "
            "datasets: export with --obs environment_state_agent_pos, or use lerobot-train"
        )
    overrides = dict(cfg.overrides)
    if "normalization_mapping" in overrides:  # JSON strings -> lerobot's enum
        from lerobot.configs import NormalizationMode

        modes = overrides["normalization_mapping"]
        overrides["normalization_mapping"] = {k: NormalizationMode(v) for k, v in modes.items()}
    try:
        pcfg = make_policy_config(cfg.policy, device=cfg.device, push_to_hub=False, **overrides)
    except (TypeError, ValueError, AttributeError) as err:
        raise FactoryError(f"policy {cfg.policy!r} with {cfg.overrides}: {err}") from None
    dataset = LeRobotDataset(cfg.repo_id, root=cfg.root, video_backend="pyav")
    policy = make_policy(cfg=pcfg, ds_meta=dataset.meta)
    pre, post = make_pre_post_processors(policy_cfg=pcfg, dataset_stats=dataset.meta.stats)
    return dataset, policy, pre, post


LR_SCHEDULES = ("preset", "cosine")
COSINE_FLOOR = 0.05  # the cosine schedule decays to this fraction of the peak rate


def _scheduler(cfg: PolicyTrainConfig, pcfg: Any) -> Any:
    """The run's lerobot scheduler config: the policy's preset (None for ACT: a constant
    rate), or a linear warm-up over 5% of the steps then a cosine decay to
    ``COSINE_FLOOR`` of the peak at the last step."""
    if cfg.lr_schedule == "preset":
        return pcfg.get_scheduler_preset()
    from lerobot.optim.schedulers import CosineDecayWithWarmupSchedulerConfig

    peak = float(pcfg.get_optimizer_preset().lr)
    return CosineDecayWithWarmupSchedulerConfig(
        num_warmup_steps=max(1, cfg.steps // 20),
        num_decay_steps=cfg.steps,
        peak_lr=peak,
        decay_lr=peak * COSINE_FLOOR,
    )


class WeightEma:
    """An exponential moving average of a module's parameters, as diffusion_policy's
    ``EMAModel`` keeps it: at update ``t`` (1, 2, ...) the decay is
    ``min(max_decay, 1 - (1 + t) ** -power)``, so early updates average over few steps
    and late ones over about ``1 / (1 - decay)``. Buffers are not averaged."""

    def __init__(self, module: Any, max_decay: float, power: float = 0.75) -> None:
        if not 0.0 < max_decay < 1.0:
            raise FactoryError(f"the EMA's decay must be in (0, 1), got {max_decay}")
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.shadow = [p.detach().clone() for p in self.params]
        self.max_decay, self.power, self.t = max_decay, power, 0

    def decay(self) -> float:
        return float(min(self.max_decay, 1.0 - (1.0 + self.t) ** -self.power))

    def update(self) -> None:
        import torch

        self.t += 1
        with torch.no_grad():
            live = [p.detach() for p in self.params]
            torch._foreach_lerp_(self.shadow, live, 1.0 - self.decay())

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The module holds the averaged weights inside the block, its own after."""
        import torch

        with torch.no_grad():
            kept = [p.detach().clone() for p in self.params]
            torch._foreach_copy_([p.data for p in self.params], self.shadow)
            try:
                yield
            finally:
                torch._foreach_copy_([p.data for p in self.params], kept)


def save_checkpoint(policy: Any, pre: Any, post: Any, folder: Path) -> None:
    """The policy and both processors, as ``lerobot-train`` saves ``pretrained_model``;
    written beside ``folder`` and renamed into place."""
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save_pretrained(tmp)
    pre.save_pretrained(tmp)
    post.save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def train_policy(cfg: PolicyTrainConfig, on_step: OnStep | None = None) -> dict[str, Any]:
    """Train and checkpoint; returns ``{"checkpoints", "loss", "wall_s", "cpu_s", ...}``
    (also written to ``out/train_info.json``). Each finished checkpoint is kept; a rerun
    starts over from step 0 (runs are minutes long)."""
    import torch

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    dataset, policy, pre, post = _build(cfg)
    keys = [*policy.config.input_features, *policy.config.output_features]
    table = FrameTable.from_dataset(dataset, keys)
    deltas = _deltas(policy.config, keys)
    starts = table.sample_from(int(getattr(policy.config, "drop_n_last_frames", 0) or 0))
    optimizer = policy.config.get_optimizer_preset().build(policy.get_optim_params())
    sched_cfg = _scheduler(cfg, policy.config)
    scheduler = sched_cfg.build(optimizer, cfg.steps) if sched_cfg is not None else None
    clip = float(policy.config.get_optimizer_preset().grad_clip_norm)
    saves = cfg.checkpoint_steps()
    ema = WeightEma(policy, cfg.ema) if cfg.ema else None
    t0, c0 = time.monotonic(), _cpu_s()
    losses: list[float] = []
    policy.train()
    for step in range(1, cfg.steps + 1):
        batch = pre(table.batch(starts[rng.integers(0, len(starts), cfg.batch_size)], deltas))
        loss, _ = policy.forward(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad()
        if scheduler is not None:
            scheduler.step()
        if ema is not None:
            ema.update()
        losses.append(float(loss.item()))
        if on_step is not None:
            on_step(step, cfg.steps, losses[-1])
        if step in saves:
            folder = cfg.out / "checkpoints" / f"{step:06d}" / "pretrained_model"
            folder.parent.mkdir(parents=True, exist_ok=True)
            with ema.applied() if ema is not None else contextlib.nullcontext():
                save_checkpoint(policy, pre, post, folder)
            log.info("step %d: loss %.4f, saved %s", step, np.mean(losses[-100:]), folder)
    info = {
        "config": {**asdict(cfg), "root": str(cfg.root), "out": str(cfg.out)},
        "checkpoints": saves,
        "frames": table.n,
        "loss_last_100": round(float(np.mean(losses[-100:])), 6),
        "lr_last": float(optimizer.param_groups[0]["lr"]),
        "wall_s": round(time.monotonic() - t0, 1),
        "cpu_s": round(_cpu_s() - c0, 1),
    }
    (cfg.out / "train_info.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process and its finished children."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
