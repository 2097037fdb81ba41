"""Judges (``factory.gen.judges``): other dynamics that replay a model's successes, and
the seeded one-stage training (``factory train --seed``) that makes them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from test_robustness import TowardGoal, _episode
from torch import Tensor

from factory.errors import FactoryError
from factory.gen.judges import check_judges, load_judges
from factory.gen.robustness import RobustConfig, check_model, member_robustness, robustness
from factory.model import read_config
from factory.model.files import load_model, model_dir_or_default


def test_a_judge_that_disagrees_halves_robustness() -> None:
    """A judge whose block moves half as fast never reaches the goal in the episode's
    length: its column is 0, the model's 1, and the pooled robustness 0.5; a judge like
    the model changes nothing."""
    start, acts = _episode(8.0, 10)
    cfg = RobustConfig(k=4, step_px=0.0)
    by = member_robustness(
        TowardGoal(), "pusht", start[None], [acts], cfg, judges=[TowardGoal(0.5)]
    )
    assert by.tolist() == [[1.0, 0.0]]
    pooled = robustness(TowardGoal(), "pusht", start[None], [acts], cfg, judges=[TowardGoal(0.5)])
    assert pooled.tolist() == [0.5]
    same = member_robustness(TowardGoal(), "pusht", start[None], [acts], cfg, judges=[TowardGoal()])
    assert same.tolist() == [[1.0, 1.0]]


def test_judges_replay_the_same_noise() -> None:
    """Every member draws the episode's one noise stream: a judge equal to the model gives
    the model's own fraction, whatever it is."""
    eps = [_episode(8.0, 8), _episode(5.0, 9)]
    starts = np.stack([e[0] for e in eps])
    acts = [e[1] for e in eps]
    cfg = RobustConfig(k=16, step_px=2.0)
    by = member_robustness(TowardGoal(), "pusht", starts, acts, cfg, [3, 4], [TowardGoal()])
    np.testing.assert_array_equal(by[:, 0], by[:, 1])
    assert 0.0 < by[:, 0].min() < 1.0  # the noise bites, so equality is not trivial


def _judge_dir(tmp_path: Path, name: str, edit: dict | None = None) -> Path:
    """A copy of the shipped model as a judge directory, its config edited by ``edit``."""
    src = model_dir_or_default(None)
    out = tmp_path / name
    shutil.copytree(src, out)
    if edit:
        cfg = json.loads((out / "config.json").read_text())
        for section, fields in edit.items():
            cfg[section] = fields if not isinstance(fields, dict) else {**cfg[section], **fields}
        (out / "config.json").write_text(json.dumps(cfg))
    return out


START = np.array([[150.0, 256.0, 256.0, 256.0, 0.0]])
"""The agent left of the block, which the :data:`PUSH` actions drive through."""
PUSH = np.stack([np.linspace(160, 330, 40), np.full(40, 256.0)], 1)[None].astype(np.float32)


def _pushed(paths: np.ndarray) -> float:
    """How far (px) the block ends from where it started in paths (1, T+1, S)."""
    return float(np.linalg.norm(paths[0, -1, 2:4] - paths[0, 0, 2:4]))


def test_the_shipped_dynamics_judges_itself_equally(tmp_path: Path) -> None:
    """Loaded as a judge, the model's own dynamics moves a pushed block exactly as the
    model does, and scores its replays alike; the model's parts are left as they were."""
    from factory.eval.ensemble import member_paths

    model = check_model(load_model(None)[0], "pusht")
    judge = _judge_dir(tmp_path, "self")
    check_judges(read_config(judge), [judge])
    (member,) = load_judges(model, [judge])
    assert member.dynamics is not model.dynamics
    assert member.renderer is model.renderer
    own = member_paths(model, START, PUSH)
    assert _pushed(own) > 50  # the push moves the block: the comparison is not of rests
    np.testing.assert_allclose(member_paths(member, START, PUSH), own, atol=1e-4)
    cfg = RobustConfig(k=3, step_px=0.3)
    by = member_robustness(model, "pusht", START, [PUSH[0]], cfg, judges=[member])
    assert by[0, 0] == by[0, 1]


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        ({"dynamics": {"hidden": 128}}, "dynamics config differs"),
        ({"parts": ["renderer", "reader"]}, "no dynamics part"),
    ],
)
def test_judges_that_cannot_judge_are_refused(tmp_path: Path, edit: dict, needle: str) -> None:
    model_cfg = read_config(model_dir_or_default(None))
    judge = _judge_dir(tmp_path, "bad", edit)
    with pytest.raises(FactoryError, match=needle):
        check_judges(model_cfg, [judge])
    with pytest.raises(FactoryError, match="does not exist"):
        check_judges(model_cfg, [tmp_path / "none"])
    grid = Path(__file__).resolve().parents[1] / "models" / "pusht_latent_grid"
    with pytest.raises(FactoryError, match="is a latent_grid model"):
        check_judges(model_cfg, [grid])


def test_seeded_training_is_reproducible(tmp_path: Path) -> None:
    """``factory train dynamics --seed`` makes the same weights twice and others from
    another seed: the members of an ensemble differ by their seed alone."""
    from safetensors.numpy import load_file
    from typer.testing import CliRunner

    from pipelines.cli import app
    from pipelines.train import TrainRequest, run_train

    data = tmp_path / "d.zarr"
    args = ["collect", "--out", str(data), "--episodes", "2", "--steps", "40", "--resolution", "32"]
    assert CliRunner().invoke(app, args).exit_code == 0
    weights = []
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        req = TrainRequest(
            stage="dynamics", data=data, out=tmp_path / name, steps=3, device="cpu",
            kind="object_state", seed=seed, threads=1,
        )  # fmt: skip
        run_train(req)
        weights.append(load_file(str(tmp_path / name / "dynamics.safetensors")))
    a, b, c = weights
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert any(not np.array_equal(a[k], c[k]) for k in a)


def test_batch_size_sets_the_stage_batch_and_scales_its_learning_rate() -> None:
    """``factory train --batch-size B``: the stage's batch, its learning rate by
    sqrt(B / B0) capped at 2x (``train all``'s rule), down as well as up."""
    from factory.train.all_stages import stage_train
    from pipelines.train import TrainRequest, _seeded

    base = stage_train("object_set", "dynamics")
    for batch, scale in ((512, 2.0), (1024, 2.0), (32, 0.5), (base.batch_size, 1.0)):
        req = TrainRequest(stage="dynamics", data=Path("d"), out=Path("o"), batch_size=batch)
        tc = _seeded(req, "object_set", None)
        assert tc is not None and tc.batch_size == batch
        assert tc.lr == pytest.approx(base.lr * scale)
    assert _seeded(TrainRequest(stage="dynamics", data=Path("d"), out=Path("o")), "x", None) is None


class Step(torch.nn.Module):
    """A dynamics that adds a fixed step (S,) to the current state, logit ``logit``."""

    def __init__(self, step: list[float], logit: float = 1.0) -> None:
        super().__init__()
        self.step, self.logit = torch.tensor(step), logit

    def forward(
        self, prev: Tensor, cur: Tensor, prev_action: Tensor, action: Tensor, hard_gate: bool = True
    ) -> tuple[Tensor, Tensor]:
        nxt = cur + self.step
        nxt[:, -1] = torch.atan2(torch.sin(nxt[:, -1]), torch.cos(nxt[:, -1]))  # wrapped
        return nxt, torch.full((len(cur),), self.logit)


def test_mean_dynamics_averages_steps_across_the_angle_seam() -> None:
    """Opposite block steps cancel; angle steps are averaged as steps, so a member that
    wraps past pi does not drag the mean half a turn away."""
    from factory.gen.judges import MeanDynamics

    cur = torch.tensor([[100.0, 100.0, 256.0, 256.0, np.pi - 0.05]])
    mean = MeanDynamics([Step([0, 0, 1.0, 0, 0.1], 2.0), Step([0, 0, -1.0, 0, -0.3], 0.0)])
    nxt, logit = mean(cur, cur, cur[:, :2], cur[:, :2])
    assert nxt[0, :4].tolist() == pytest.approx([100.0, 100.0, 256.0, 256.0])
    assert float(nxt[0, 4]) == pytest.approx(np.pi - 0.15, abs=1e-5)
    assert float(logit[0]) == pytest.approx(1.0)


def test_the_mean_of_the_model_and_itself_is_the_model(tmp_path: Path) -> None:
    """``with_mean_dynamics`` of the shipped model and a copy of it pushes the block
    exactly as the model does (and scores so in ``eval ensemble``'s errors)."""
    from factory.eval.ensemble import block_errors, member_paths
    from factory.gen.judges import with_mean_dynamics

    model = check_model(load_model(None)[0], "pusht")
    mean = with_mean_dynamics(model, [_judge_dir(tmp_path, "self")])
    own = member_paths(model, START, PUSH)
    both = member_paths(mean, START, PUSH)
    assert _pushed(own) > 50
    np.testing.assert_allclose(both, own, atol=1e-3)
    assert block_errors(both, own, (10, 40), 2)["h40"] < 1e-2
