"""Model directories: bit-exact round trip and one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from factories import tiny_config

from factory.errors import ModelError
from factory.model import (
    WorldModelConfig,
    build_part,
    load_model_dir,
    read_config,
    save_part,
)
from factory.model.checkpoint import load_training_state, save_training_state


def write_model(d: Path, cfg: WorldModelConfig | None = None) -> WorldModelConfig:
    """Save every part with random (non-default) weights and buffers."""
    cfg = cfg or tiny_config()
    torch.manual_seed(0)
    for name in ("autoencoder", "dynamics", "probe"):
        module = build_part(name, cfg)
        with torch.no_grad():
            for t in module.state_dict().values():
                if t.is_floating_point():
                    t.add_(torch.randn_like(t) * 0.05)
        cfg = save_part(d, name, module, cfg, steps=3, wall_s=1.5, data="/data/store.zarr")
    return cfg


def test_config_json_round_trip() -> None:
    cfg = tiny_config().with_parts("dynamics", "autoencoder")
    again = WorldModelConfig.from_json(cfg.to_json())
    assert again == cfg
    assert again.parts == ("autoencoder", "dynamics")
    with pytest.raises(ValueError):
        WorldModelConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_round_trip_is_bit_exact(tmp_path: Path) -> None:
    cfg = write_model(tmp_path)
    assert read_config(tmp_path) == cfg
    wm = load_model_dir(tmp_path)
    again = load_model_dir(tmp_path)
    originals = {n: build_part(n, cfg) for n in ("autoencoder", "dynamics", "probe")}
    for name in originals:
        saved = getattr(wm, name).state_dict()
        assert set(saved) == set(originals[name].state_dict())
        for key, t in saved.items():
            assert torch.equal(t, getattr(again, name).state_dict()[key]), key
    frames = np.random.default_rng(0).integers(0, 256, (2, 2, 32, 32, 3), dtype=np.uint8)
    outs = []
    for model in (wm, again):
        model.start(frames, np.zeros((2, 1, 2), np.float32), seed=3)
        outs.append([model.step(np.full((2, 2), 200.0, np.float32)) for _ in range(3)])
    for a, b in zip(*outs, strict=True):
        assert np.array_equal(a.frames, b.frames) and np.array_equal(a.state, b.state)
        assert torch.equal(a.latents, b.latents)


def test_load_subset_of_parts(tmp_path: Path) -> None:
    write_model(tmp_path)
    wm = load_model_dir(tmp_path, parts=["probe"])
    assert wm.probe is not None and wm.autoencoder is None and wm.dynamics is None


def test_provenance(tmp_path: Path) -> None:
    write_model(tmp_path)
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov["data"] == "/data/store.zarr"
    assert isinstance(prov["git_commit"], str) and prov["git_commit"]
    assert prov["parts"]["dynamics"]["steps"] == 3
    assert prov["parts"]["probe"]["wall_s"] == 1.5
    assert "created" in prov


def test_refuses_missing_and_foreign_dirs(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        load_model_dir(tmp_path / "nope")
    with pytest.raises(ModelError, match="not a model directory"):
        load_model_dir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"format": "someone.else", "x": 1}))
    with pytest.raises(ModelError, match="not a model directory"):
        load_model_dir(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelError):
        load_model_dir(tmp_path)


def test_refuses_missing_part(tmp_path: Path) -> None:
    cfg = tiny_config()
    save_part(tmp_path, "autoencoder", build_part("autoencoder", cfg), cfg)
    with pytest.raises(ModelError, match="no dynamics part"):
        load_model_dir(tmp_path, parts=["autoencoder", "dynamics"])
    write_model(tmp_path)
    (tmp_path / "probe.safetensors").unlink()
    with pytest.raises(ModelError, match=r"probe\.safetensors is missing"):
        load_model_dir(tmp_path)


def test_refuses_shape_mismatch(tmp_path: Path) -> None:
    cfg = write_model(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    data["dynamics"]["channels"] = [16, 32]
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ModelError, match=r"dynamics\.safetensors: tensor '.*' has shape"):
        load_model_dir(tmp_path)
    data["dynamics"]["channels"] = list(cfg.dynamics.channels)
    data["dynamics"]["action_dim"] = 3
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ModelError, match=r"has shape \(2,\) but the config expects \(3,\)"):
        load_model_dir(tmp_path)


def test_refuses_incompatible_world(tmp_path: Path) -> None:
    write_model(tmp_path)
    wm = load_model_dir(tmp_path)
    wm.check_compatible(action_dim=2, image_shape=(32, 32, 3))
    with pytest.raises(ModelError, match="action_dim 2"):
        wm.check_compatible(action_dim=6)
    with pytest.raises(ModelError, match=r"\(96, 96, 3\)"):
        wm.check_compatible(image_shape=(96, 96, 3))


def test_training_state_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    for _ in range(3):
        opt.zero_grad()
        net(torch.randn(4, 3)).square().mean().backward()
        opt.step()
    gen = torch.Generator().manual_seed(5)
    save_training_state(tmp_path, "probe", opt, {"step": 3, "elapsed_s": 1.0}, gen)
    expected_next = torch.randn(4, generator=gen)
    opt2 = torch.optim.AdamW(net.parameters(), lr=5.0)
    gen2 = torch.Generator().manual_seed(99)
    state = load_training_state(tmp_path, "probe", opt2, gen2)
    assert state == {"step": 3, "elapsed_s": 1.0}
    assert opt2.param_groups[0]["lr"] == 1e-3
    for p in net.parameters():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt.state[p][key], opt2.state[p][key])
    assert torch.equal(torch.randn(4, generator=gen2), expected_next)
    assert load_training_state(tmp_path, "dynamics", opt2) is None
