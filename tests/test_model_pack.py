"""``factory model pack``: a shippable model directory from parts of training directories."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from factories import assert_one_line_error, write_tiny_model_dir
from typer.testing import CliRunner

from factory.model import load_model_dir, read_config
from factory.model.checkpoint import write_config
from pipelines.cli import app

runner = CliRunner()


@pytest.fixture()
def train_dir(tmp_path: Path) -> Path:
    d = write_tiny_model_dir(tmp_path / "train")
    (d / "dynamics.optim.safetensors").write_bytes(b"training state, not shipped")
    return d


def test_pack_keeps_weights_and_drops_training_state(train_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "models" / "ship"  # the parent folder is created too
    result = runner.invoke(app, ["model", "pack", str(out), "--from", str(train_dir)])
    assert result.exit_code == 0, result.output
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "autoencoder.safetensors",
        "config.json",
        "dynamics.safetensors",
        "probe.safetensors",
        "provenance.json",
    ]
    a, b = load_model_dir(train_dir), load_model_dir(out)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert ka == kb and torch.equal(va, vb)
    prov = json.loads((out / "provenance.json").read_text())
    assert set(prov["packed_from"]) == {"autoencoder", "dynamics", "probe"}


def test_pack_takes_a_part_from_another_dir(train_dir: Path, tmp_path: Path) -> None:
    other = write_tiny_model_dir(tmp_path / "other")
    out = tmp_path / "ship"
    args = ["model", "pack", str(out), "--from", str(train_dir), "--part", f"probe={other}"]
    assert runner.invoke(app, args).exit_code == 0
    probe = (out / "probe.safetensors").read_bytes()
    assert probe == (other / "probe.safetensors").read_bytes()
    assert (out / "dynamics.safetensors").read_bytes() == (
        train_dir / "dynamics.safetensors"
    ).read_bytes()
    # repacked from the shipped dir, a part still names the training dir it came from
    again = tmp_path / "again"
    assert runner.invoke(app, ["model", "pack", str(again), "--from", str(out)]).exit_code == 0
    prov = json.loads((again / "provenance.json").read_text())
    assert prov["packed_from"]["dynamics"]["dir"] == str(train_dir)
    assert prov["packed_from"]["probe"]["dir"] == str(other)


def test_pack_refuses_parts_that_do_not_fit(train_dir: Path, tmp_path: Path) -> None:
    other = write_tiny_model_dir(tmp_path / "other")
    cfg = read_config(other)
    probe = dataclasses.replace(cfg.probe, image_size=(16, 16))
    write_config(other, dataclasses.replace(cfg, probe=probe))
    out = tmp_path / "ship"
    args = ["model", "pack", str(out), "--from", str(train_dir), "--part", f"probe={other}"]
    assert_one_line_error(runner.invoke(app, args), "probe expects")
    assert not out.exists()


def test_pack_bad_input(train_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ship"
    assert_one_line_error(runner.invoke(app, ["model", "pack", str(out)]), "nothing to pack")
    bad = ["model", "pack", str(out), "--part", f"brain={train_dir}"]
    assert_one_line_error(runner.invoke(app, bad), "unknown model part")
    assert_one_line_error(runner.invoke(app, ["model", "pack", str(out), "--part", "probe"]))
    out.mkdir()
    (out / "keep").write_text("x")
    exists = ["model", "pack", str(out), "--from", str(train_dir)]
    assert_one_line_error(runner.invoke(app, exists), "--overwrite")
    assert (out / "keep").read_text() == "x"


def test_loading_refuses_parts_that_do_not_fit(tmp_path: Path) -> None:
    """The fit check lives in ``load_model_dir``: every loader gets it, not only pack."""
    from factory.errors import ModelError

    d = write_tiny_model_dir(tmp_path / "m")
    cfg = read_config(d)
    write_config(
        d, dataclasses.replace(cfg, probe=dataclasses.replace(cfg.probe, image_size=(16, 16)))
    )
    with pytest.raises(ModelError, match="probe expects"):
        load_model_dir(d)
    load_model_dir(d, parts=("autoencoder", "dynamics"))  # the parts that do fit still load


def test_a_packed_part_trained_further_names_where_it_started(tmp_path: Path) -> None:
    from factory.model.checkpoint import update_provenance

    origin = write_tiny_model_dir(tmp_path / "train")
    update_provenance(origin, "dynamics", steps=100, wall_s=5.0)
    shipped = tmp_path / "ship"
    assert runner.invoke(app, ["model", "pack", str(shipped), "--from", str(origin)]).exit_code == 0
    update_provenance(shipped, "dynamics", steps=40, wall_s=2.0)  # a warm start, trained on
    prov = json.loads((shipped / "provenance.json").read_text())
    assert set(prov["packed_from"]) == {"autoencoder", "probe"}  # the others are as packed
    entry = prov["parts"]["dynamics"]
    assert entry["steps"] == 40 and entry["init_from"]["dir"] == str(origin)
    assert entry["init_from"]["steps"] == 100 and entry["init_from"]["wall_s"] == 5.0
    update_provenance(shipped, "dynamics", steps=80)  # a later checkpoint keeps init_from
    again = tmp_path / "again"
    assert runner.invoke(app, ["model", "pack", str(again), "--from", str(shipped)]).exit_code == 0
    prov = json.loads((again / "provenance.json").read_text())
    assert prov["packed_from"]["dynamics"]["dir"] == str(shipped)
    assert prov["parts"]["dynamics"]["steps"] == 80
    assert prov["parts"]["dynamics"]["init_from"]["steps"] == 100
