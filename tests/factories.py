"""Factories for tests: tiny world models (32 px, random weights) and their directories."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from factory.model import (
    Autoencoder,
    AutoencoderConfig,
    ConsistencyConfig,
    Dynamics,
    DynamicsConfig,
    ProbeConfig,
    StateProbe,
    WorldModel,
    WorldModelConfig,
    save_part,
)
from factory.model.object_set.config import ObjectSetConfig
from factory.model.object_set.dynamics import SetDynamics
from factory.model.object_set.model import ObjectSetModel
from factory.model.object_set.reader import SetReader
from factory.model.object_set.renderer import SetRenderer
from factory.model.object_state.config import ObjectStateConfig
from factory.model.object_state.dynamics import ObjectDynamics
from factory.model.object_state.geometry import wrap_angle
from factory.model.object_state.model import ObjectStateModel
from factory.model.object_state.reader import StateReader
from factory.model.object_state.renderer import Sprite, SpriteRenderer


def tiny_config(context: int = 3, action_dim: int = 2, size: int = 32) -> WorldModelConfig:
    """A world-model config small enough to run a step in milliseconds."""
    lat = size // 4
    return WorldModelConfig(
        autoencoder=AutoencoderConfig(image_size=(size, size), channels=(8, 16), blocks=(1, 1)),
        dynamics=DynamicsConfig(
            latent_size=(lat, lat),
            context=context,
            channels=(16, 24),
            emb_dim=32,
            state_head_channels=8,
            action_dim=action_dim,
        ),
        probe=ProbeConfig(image_size=(size, size), channels=(8, 16), keypoints=4, hidden=32),
        consistency=ConsistencyConfig(s0=4, s1=8, sigma_max=20.0),
        name="tiny",
    )


def tiny_world_model(
    context: int = 3, seed: int = 0, action_dim: int = 2, world: str = "pusht", discs: int = 30
) -> WorldModel:
    """A :class:`WorldModel` of ``world`` with random, non-degenerate weights; a pile one
    reads its ``discs`` discs' x, y with a dynamics task head, as ``factory train all --env
    pile`` makes it."""
    torch.manual_seed(seed)
    cfg = tiny_config(context, action_dim).with_parts("autoencoder", "dynamics", "probe")
    if world == "pile":
        dyn_cfg = dataclasses.replace(cfg.dynamics, task_dim=2 * discs, task_angle=False)
        cfg = dataclasses.replace(cfg, dynamics=dyn_cfg)
    cfg = dataclasses.replace(cfg, world=world)
    dyn = Dynamics(cfg.dynamics, cfg.consistency)
    ae = Autoencoder(cfg.autoencoder)
    for p in [*dyn.parameters(), *ae.decoder.out.parameters()]:  # no zero-init outputs
        torch.nn.init.normal_(p, std=0.05)
    return WorldModel(cfg, ae, dyn, StateProbe(cfg.probe)).eval()


def write_tiny_model_dir(
    path: Path,
    context: int = 3,
    action_dim: int = 2,
    camera: str = "top",
    world: str = "pusht",
    discs: int = 30,
) -> Path:
    """Save a tiny model's three parts into ``path`` (a loadable model directory), a model
    of the store camera ``camera`` in ``world`` (the env of the data it was trained on;
    :func:`tiny_world_model`)."""
    wm = tiny_world_model(context, action_dim=action_dim, world=world, discs=discs)
    cfg = dataclasses.replace(wm.config, camera=camera)
    parts = {"autoencoder": wm.autoencoder, "dynamics": wm.dynamics, "probe": wm.probe}
    for name, module in parts.items():
        assert module is not None
        cfg = save_part(path, name, module, cfg, steps=1, wall_s=0.0, data="tests")
    return path


def assert_one_line_error(result: Any, *needles: str) -> None:
    """A CLI result (typer's CliRunner) is exit code 2 with one line, no traceback, and
    every ``needle`` in it."""
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    for needle in needles:
        assert needle in text, text


def tiny_object_state_config(size: int = 32) -> ObjectStateConfig:
    """An ``object_state`` config small enough to run a step in milliseconds."""
    base = ObjectStateConfig()
    return dataclasses.replace(
        base,
        dynamics=dataclasses.replace(base.dynamics, hidden=32, layers=2),
        renderer=dataclasses.replace(base.renderer, image_size=(size, size)),
        reader=dataclasses.replace(base.reader, image_size=(size, size), width=8),
        name="tiny",
    )


def set_sprite(sprite: Sprite, rgb: torch.Tensor, opaque: torch.Tensor) -> None:
    """Give a sprite colours ``rgb`` (3, S, S) in (0, 1) (or (3,) for one colour) and
    alpha sigmoid(8) where ``opaque`` (S, S) is True, sigmoid(-8) elsewhere."""
    n = sprite.alpha.shape[-1]
    colour = rgb.reshape(3, 1, 1).expand(3, n, n) if rgb.dim() == 1 else rgb
    with torch.no_grad():
        sprite.rgb.copy_(torch.logit(colour.clamp(1e-4, 1 - 1e-4)))  # colour logits
        sprite.alpha.copy_(torch.where(opaque, 8.0, -8.0)[None])


def pusht_scene(n: int, seed: int) -> tuple[torch.Tensor, ...]:
    """prev, cur (n, 5) and prev_action, action (n, 2): an agent near a block."""
    g = torch.Generator().manual_seed(seed)
    cur = torch.empty(n, 5)
    cur[:, 2:4] = torch.rand(n, 2, generator=g) * 200 + 156
    cur[:, 4] = (torch.rand(n, generator=g) * 2 - 1) * 3.0
    cur[:, :2] = cur[:, 2:4] + torch.randn(n, 2, generator=g) * 60
    prev = cur + torch.randn(n, 5, generator=g) * torch.tensor([4.0, 4, 2, 2, 0.02])
    prev[:, 4] = wrap_angle(prev[:, 4])
    pa = cur[:, :2] + torch.randn(n, 2, generator=g) * 20
    a = cur[:, :2] + torch.randn(n, 2, generator=g) * 20
    return prev, cur, pa, a


def tiny_object_state_model(seed: int = 0, size: int = 32) -> ObjectStateModel:
    """An :class:`ObjectStateModel` with all three parts and random, non-degenerate
    weights: the block and agent sprites have opaque patches (frames are not blank) and
    the block MLP's zero-initialised last layer is random."""
    torch.manual_seed(seed)
    cfg = tiny_object_state_config(size).with_parts("dynamics", "renderer", "reader")
    dyn = ObjectDynamics(cfg.dynamics)
    for p in dyn.block[-1].parameters():
        torch.nn.init.normal_(p, std=0.5)
    ren = SpriteRenderer(cfg.renderer)
    for sprite, lo, hi in ((ren.block, 0.3, 0.7), (ren.agent, 0.25, 0.75)):
        n = sprite.alpha.shape[-1]
        a, b = round(lo * n), round(hi * n)
        opaque = torch.zeros(n, n, dtype=torch.bool)
        opaque[a:b, a:b] = True
        set_sprite(sprite, torch.rand(3, n, n) * 0.9 + 0.05, opaque)
    reader = StateReader(cfg.reader, board=cfg.renderer.board)
    return ObjectStateModel(cfg, dynamics=dyn, renderer=ren, reader=reader).eval()


def _write_state_model(path: Path, model: Any) -> Path:
    """Save a state kind's three parts (dynamics, renderer, reader) into ``path``."""
    cfg: Any = model.config
    parts = {"dynamics": model.dynamics, "renderer": model.renderer, "reader": model.reader}
    for name, module in parts.items():
        assert module is not None
        cfg = save_part(path, name, module, cfg, steps=1, wall_s=0.0, data="tests")
    return path


def write_tiny_object_state_dir(path: Path, seed: int = 0) -> Path:
    """Save a tiny object_state model's three parts into ``path`` (a model directory)."""
    return _write_state_model(path, tiny_object_state_model(seed))


def tiny_object_set_config(size: int = 32, n_discs: int = 30) -> ObjectSetConfig:
    """An ``object_set`` config (pile: top and side cameras) small enough to run a step in
    milliseconds."""
    base = ObjectSetConfig()
    return dataclasses.replace(
        base,
        dynamics=dataclasses.replace(base.dynamics, hidden=16, mlp_layers=1, message_steps=1),
        renderer=dataclasses.replace(base.renderer, image_size=(size, size)),
        reader=dataclasses.replace(base.reader, image_size=(size, size), width=8, layers=2),
        n_discs=n_discs,
        name="tiny",
    )


def tiny_object_set_model(seed: int = 0, size: int = 32, n_discs: int = 30) -> ObjectSetModel:
    """An :class:`ObjectSetModel` with all three parts and random, non-degenerate
    weights: every camera's sprites have opaque centres (frames are not blank) and the
    dynamics' zero-initialised output layer is random (active discs move)."""
    torch.manual_seed(seed)
    cfg = tiny_object_set_config(size, n_discs).with_parts("dynamics", "renderer", "reader")
    dyn = SetDynamics(cfg.dynamics)
    for p in dyn.out[-1].parameters():
        torch.nn.init.normal_(p, std=0.5)
    ren = SetRenderer(cfg.renderer)
    for name in cfg.cameras:
        cam = ren.camera(name)
        for sprite, radius in ((cam.disc, 0.4), (cam.agent, 0.35)):
            n = sprite.alpha.shape[-1]
            c = (torch.arange(n) + 0.5) / n * 2 - 1
            opaque = c[:, None] ** 2 + c[None, :] ** 2 < radius**2
            set_sprite(sprite, torch.rand(3) * 0.9 + 0.05, opaque)
    reader = SetReader(cfg.reader, cfg.n_discs, board=cfg.renderer.board)
    return ObjectSetModel(cfg, dynamics=dyn, renderer=ren, reader=reader).eval()


def write_tiny_object_set_dir(path: Path, seed: int = 0, n_discs: int = 30) -> Path:
    """Save a tiny object_set model's three parts into ``path`` (a model directory)."""
    return _write_state_model(path, tiny_object_set_model(seed, n_discs=n_discs))
