"""``factory train all``: a store to a packed, evaluated model directory in one command.

    factory train all --data data/pusht_play.zarr --out runs/all --minutes 60
    factory train all --data data/pusht_play.zarr --out runs/all --minutes 60 --resume
    factory train all --data d.zarr --out runs/gpu --minutes 6 --device cuda \\
        --eval data/pusht_heldout.zarr --json
    factory train all --kind latent_grid --camera side --data pile_play.zarr --out runs/side \\
        --minutes 45

Writes the training directory ``OUT`` (every part, caches, ``train_all.json``), the
packed model ``OUT/model`` and, with ``--eval``, ``OUT/fidelity.json``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from factory.device import resolve_device
from factory.errors import FactoryError
from factory.model import read_config
from factory.model.config import MAIN_CAMERA
from factory.model.config_io import with_overrides
from factory.model.object_set.config import ObjectSetConfig
from factory.model.object_state.config import ObjectStateConfig
from factory.model.pack import pack_model
from factory.model.registry import DEFAULT_KIND, get_kind
from factory.store import EpisodeStore
from factory.train import object_set as object_set_stages
from factory.train.all_stages import (
    STATE_FILE,
    STATE_KINDS,
    AllProgressFn,
    AllStagesConfig,
    budget_table,
    plan_stages,
    read_state,
    run_all_stages,
)
from factory.train.data import EpisodeData, camera_key, load_episode_data
from factory.train.dynamics import DYNAMICS_TRAIN, DynamicsTrainOptions
from factory.train.loop import Budget
from factory.train.model_config import check_fits, default_config, task_head_overrides
from factory.train.recipes import DEFAULT_RECIPE, apply_recipe, check_recipe
from pipelines.train import check_camera_kind, check_kind_overrides

log = logging.getLogger(__name__)

MODEL_SUBDIR = "model"
FIDELITY_FILE = "fidelity.json"


@dataclass(frozen=True)
class TrainAllRequest:
    """One ``factory train all`` call."""

    data: Path
    out: Path
    minutes: float | None = None
    steps: int | None = None
    device: str = "auto"
    resume: bool = False
    eval_data: Path | None = None
    eval_episodes: int = 16
    stability_frames: int = 9000
    config: AllStagesConfig = field(default_factory=AllStagesConfig)
    recipe: str | None = DEFAULT_RECIPE
    overrides: tuple[str, ...] = ()
    kind: str | None = None
    """Model kind (None: the resumed run's, else ``object_set`` for a pile store, else
    ``latent_grid``)."""
    camera: str | None = None
    """latent_grid: the store camera to train on (None: the resumed run's, else the main
    one, ``top``; ``side``: ``data/image_side``)."""

    def resolved_camera(self) -> str:
        if self.camera is not None:
            return self.camera
        if self.resume and (self.out / STATE_FILE).is_file():
            return str(read_state(self.out).get("camera", MAIN_CAMERA))
        return MAIN_CAMERA

    def resolved_kind(self) -> str:
        if self.kind is not None:
            return self.kind
        if self.resume and (self.out / STATE_FILE).is_file():
            return str(read_state(self.out).get("kind", DEFAULT_KIND))
        if (
            self.data.exists()
            and object_set_stages.store_env(self.data) in object_set_stages.SET_WORLDS
        ):
            return "object_set"
        return DEFAULT_KIND


def _budget(req: TrainAllRequest) -> Budget:
    """The total budget; on ``--resume`` without one, the run's recorded budget."""
    minutes, steps = req.minutes, req.steps
    if (minutes is not None and minutes <= 0) or (steps is not None and steps <= 0):
        raise FactoryError("--minutes and --steps must be positive")
    if minutes is None and steps is None:
        if not req.resume:
            raise FactoryError("give a budget: --minutes M or --steps K")
        recorded = read_state(req.out)["budget"]
        minutes, steps = recorded.get("minutes"), recorded.get("steps")
    return Budget(minutes=minutes, steps=steps)


def validate(req: TrainAllRequest) -> tuple[Budget, str]:
    """Check everything that needs no data loaded: budget, device, directories."""
    budget = _budget(req)
    device = resolve_device(req.device)
    if req.resume:
        read_state(req.out)
    elif req.out.exists() and any(req.out.iterdir()):
        raise FactoryError(f"{req.out} is not empty; pass --resume to continue a run there")
    for path, what in ((req.data, "--data"), (req.eval_data, "--eval")):
        if path is not None and not path.exists():
            raise FactoryError(f"{what}: store {path} does not exist")
    with EpisodeStore.open(req.data) as store:  # refused before the plan line is printed
        missing = [k for k in ("image", "action", "state") if k not in store.schema.keys]
        if missing or store.n_episodes == 0:
            what = f"no data/{missing[0]} key" if missing else "no episodes"
            raise FactoryError(f"{req.data} has {what}; it cannot train a world model")
    if req.eval_episodes <= 0 or req.stability_frames < 0:
        raise FactoryError("--eval-episodes must be positive and --stability-frames >= 0")
    kind = get_kind(req.resolved_kind()).name
    if req.resume and read_state(req.out).get("kind", DEFAULT_KIND) != kind:
        raise FactoryError(f"--resume: {req.out} trains another kind than --kind {kind}")
    _check_camera(req, kind)
    if req.eval_data is not None:
        _check_eval_store(req.eval_data)
    if kind in STATE_KINDS:
        if not has_task_state(req.data):
            raise FactoryError(
                f"{req.data} has no object state (data/task_state), which the {kind} kind "
                "learns from; for a pixels-only store use --kind latent_grid"
            )
        if kind == "object_set":
            object_set_stages.check_set_store(req.data)
        if req.recipe not in (None, DEFAULT_RECIPE):
            raise FactoryError("--recipe configures the latent_grid dynamics only")
        check_kind_overrides(kind, req.overrides, req.resume)
        return budget, device
    try:
        check_recipe(req.recipe, req.overrides)
    except ValueError as err:
        raise FactoryError(str(err)) from err
    return budget, device


def _check_camera(req: TrainAllRequest, kind: str) -> None:
    """Refuse ``--camera`` for a state kind, one that differs from the resumed run's, and
    ``--eval`` of a model of a camera other than the main one."""
    check_camera_kind(req.camera, kind)
    camera = req.resolved_camera()
    with EpisodeStore.open(req.data) as store:
        camera_key(store, camera)
    if req.resume and req.camera is not None:
        recorded = str(read_state(req.out).get("camera", MAIN_CAMERA))
        if recorded != req.camera:
            raise FactoryError(
                f"--resume: {req.out} trains on the {recorded} camera, not --camera {req.camera}"
            )
    if req.eval_data is not None and camera != MAIN_CAMERA:
        raise FactoryError(
            f"--eval scores a {MAIN_CAMERA}-camera model; score this {camera} one beside a "
            f"{MAIN_CAMERA} one: factory eval fidelity --model TOP_MODEL --side-model "
            f"{req.out / MODEL_SUBDIR}"
        )


def _check_eval_store(path: Path) -> None:
    """Refuse a held-out store that fidelity evaluation would refuse after training."""
    from factory.eval.fidelity import HORIZONS

    with EpisodeStore.open(path) as store:
        longest = int(store.episode_lengths.max()) if store.n_episodes else 0
        if "task_state" not in store.schema.keys or "image" not in store.schema.keys:
            raise FactoryError(f"--eval: {path} has no image/task_state; it needs real episodes")
    if longest <= max(HORIZONS):
        raise FactoryError(
            f"--eval: {path} has no episode longer than {max(HORIZONS)} steps (horizon "
            f"{max(HORIZONS)} plus the model's context)"
        )


def uses_task_head(req: TrainAllRequest, has_task_state: bool) -> bool:
    """Whether the dynamics gets a task head: when the data has the task state, unless
    ``--set dynamics.task_dim=0`` says otherwise."""
    told = [o for o in req.overrides if o.replace(" ", "").startswith("dynamics.task_dim=")]
    if told:
        return told[-1].replace(" ", "") != "dynamics.task_dim=0"
    return has_task_state


def shares_for(req: TrainAllRequest, has_task_state: bool) -> dict[str, float]:
    """Stage -> fraction of the budget, as the run will use them (printed at start)."""
    kind = req.resolved_kind()
    if kind in STATE_KINDS:
        shares = dataclasses.replace(req.config.shares, kind=kind)
        return budget_table(STATE_KINDS[kind].STAGES, shares)
    stages = plan_stages(has_task_state, uses_task_head(req, has_task_state))
    return budget_table(stages, req.config.shares)


def has_task_state(path: Path) -> bool:
    with EpisodeStore.open(path) as store:
        return "task_state" in store.schema.keys


def run_train_all(req: TrainAllRequest, on_progress: AllProgressFn | None = None) -> dict[str, Any]:
    """Train every stage, pack ``OUT/model`` and (with ``eval_data``) write
    ``OUT/fidelity.json``; returns the summary (see :func:`summary`)."""
    budget, device = validate(req)
    kind = req.resolved_kind()
    camera = MAIN_CAMERA if kind in STATE_KINDS else req.resolved_camera()
    data = load_episode_data(req.data, camera=camera)
    if kind in STATE_KINDS:
        config: Any = (
            _object_state_config(req, data) if kind == "object_state" else _set_config(req, data)
        )
        if req.overrides and not req.resume:
            config = with_overrides(config, req.overrides)  # checked in validate
        result = run_all_stages(
            data, req.out, config, budget, device, req.config, req.resume, on_progress
        )
        return _finish(req, result, device)
    if (req.out / "config.json").exists():
        config = read_config(req.out)
        check_fits(config, data)
    else:
        config = dataclasses.replace(default_config(data), camera=camera)
    overrides = req.overrides
    if data.task_state is not None and not any("dynamics.task_dim" in o for o in overrides):
        # the dynamics reads the task state too (a task head), when the data has it
        overrides = (*task_head_overrides(data), *overrides)
    config, opts, _ = apply_recipe(
        config, DynamicsTrainOptions(), DYNAMICS_TRAIN, req.recipe, overrides
    )
    stages_cfg = dataclasses.replace(req.config, dynamics_options=opts)
    result = run_all_stages(
        data, req.out, config, budget, device, stages_cfg, req.resume, on_progress
    )
    return _finish(req, result, device)


def _object_state_config(req: TrainAllRequest, data: EpisodeData) -> ObjectStateConfig:
    """The run's config (resumed) or a fresh one for the data's frame size."""
    if (req.out / "config.json").exists():
        config = read_config(req.out)
        if not isinstance(config, ObjectStateConfig):
            raise FactoryError(f"{req.out} holds a {config.kind} model, not object_state")
    else:
        base = ObjectStateConfig()
        size = data.image_shape[:2]
        config = dataclasses.replace(
            base,
            renderer=dataclasses.replace(base.renderer, image_size=size),
            reader=dataclasses.replace(base.reader, image_size=size),
        )
    if tuple(config.image_shape) != data.image_shape:
        raise FactoryError(
            f"{req.data} holds {data.image_shape} frames, the model makes {config.image_shape}"
        )
    return config


def _set_config(req: TrainAllRequest, data: EpisodeData) -> ObjectSetConfig:
    """The run's object_set config (resumed) or a fresh one for the store (its frame size,
    disc count, cameras and world)."""
    if (req.out / "config.json").exists():
        config = read_config(req.out)
        if not isinstance(config, ObjectSetConfig):
            raise FactoryError(f"{req.out} holds a {config.kind} model, not object_set")
    else:
        config = object_set_stages.store_set_config(req.data, data)
    if tuple(config.image_shape) != data.image_shape:
        raise FactoryError(
            f"{req.data} holds {data.image_shape} frames, the model makes {config.image_shape}"
        )
    return config


def _finish(req: TrainAllRequest, result: dict[str, Any], device: str) -> dict[str, Any]:
    """Pack ``OUT/model``, evaluate it with ``--eval``, write the summary."""
    model_dir = req.out / MODEL_SUBDIR
    pack_model({p: req.out for p in read_config(req.out).parts}, model_dir, overwrite=True)
    result["model"] = str(model_dir)
    if req.eval_data is not None:
        fidelity = evaluate(req, model_dir, device)
        result["fidelity"] = headlines(fidelity)
        result["fidelity_file"] = str(req.out / FIDELITY_FILE)
    (req.out / "train_summary.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def evaluate(req: TrainAllRequest, model_dir: Path, device: str) -> dict[str, Any]:
    """``factory eval fidelity`` of the packed model on the held-out store."""
    from pipelines.eval_fidelity import FidelityRequest, run_fidelity

    assert req.eval_data is not None
    fid = run_fidelity(
        FidelityRequest(
            data=req.eval_data,
            model=model_dir,
            episodes=req.eval_episodes,
            stability_frames=req.stability_frames,
            device=device,
        )
    )
    (req.out / FIDELITY_FILE).write_text(json.dumps(fid, indent=1, default=str))
    return fid


RECON_HEADLINES = ("recon_psnr", "recon_iou", "recon_disc_iou", "recon_disc_iou_side")
PILE_HEADLINES = ("disc_iou_top", "disc_iou_side", "disc_err_px", "swept_err", "count_gap")


def headlines(fid: dict[str, Any]) -> dict[str, Any]:
    """The fidelity numbers worth a glance: the reconstruction's, PSNR/IoU per horizon,
    and whether the long rollout stayed sane."""
    out: dict[str, Any] = {k: fid[k] for k in RECON_HEADLINES if k in fid}
    for h, row in fid.get("horizons", {}).items():
        for key in ("psnr", "iou", "copy_psnr", "copy_iou", "block_err_px", *PILE_HEADLINES):
            if key in row:
                out[f"h{h}_{key}"] = row[key]
    stability = fid.get("stability") or {}
    for key in ("nan", "t_fraction_ratio", "block_found_frac"):
        if key in stability:
            out[f"stability_{key}"] = stability[key]
    return out


def is_training_dir(path: Path) -> bool:
    return (path / STATE_FILE).is_file()
