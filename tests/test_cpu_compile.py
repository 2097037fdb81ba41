"""Compiling on the CPU: which stages compile (by budget or flag), which parts (those that
declare ``cpu_compile``), the split edge MLP's equality with the plain one, and (slow)
that a compiled edge-frame network gives the eager one's outputs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from factories import tiny_object_set_config
from torch import nn

from factory.model.object_set.dynamics import SetDynamics
from factory.model.object_set.frames import FrameNet
from factory.model.object_set.graph import gathered_mlp, mlp
from factory.train.accel import CPU_COMPILE_MIN_MINUTES, compile_cpu_parts, cpu_compile_wanted
from factory.train.loop import Budget, StageRun, TrainConfig, train_part


def test_the_budget_decides_unless_a_flag_does() -> None:
    assert not cpu_compile_wanted(None, None)  # steps alone: no idea how long
    assert not cpu_compile_wanted(None, CPU_COMPILE_MIN_MINUTES - 1)
    assert cpu_compile_wanted(None, CPU_COMPILE_MIN_MINUTES)
    assert cpu_compile_wanted(True, None) and not cpu_compile_wanted(False, 600.0)


def test_wall_minutes_spread_cpu_minutes_over_the_threads() -> None:
    assert Budget(steps=10).wall_minutes(2) is None
    assert Budget(cpu_minutes=90).wall_minutes(2) == 45
    assert Budget(minutes=30, cpu_minutes=90).wall_minutes(2) == 30
    assert Budget(minutes=60, cpu_minutes=90, steps=5).wall_minutes(1) == 60


def test_gathered_mlp_is_the_mlp_of_the_gathered_inputs() -> None:
    torch.manual_seed(0)
    net = mlp(4 + 3 + 3 + 2, 8, 5, 2)
    e, nodes, extra = torch.randn(7, 4), torch.randn(5, 3), torch.randn(7, 2)
    recv, send = torch.randint(0, 5, (7,)), torch.randint(0, 5, (7,))
    plain = net(torch.cat([e, nodes[recv], nodes[send], extra], -1))
    split = gathered_mlp(net, [(e, None), (nodes, recv), (nodes, send), (extra, None)])
    torch.testing.assert_close(split, plain)
    with pytest.raises(ValueError, match="one row per output row"):
        gathered_mlp(mlp(3, 8, 5, 1), [(nodes, recv)])


def _edge_dynamics() -> SetDynamics:
    cfg = tiny_object_set_config().dynamics
    return SetDynamics(dataclasses.replace(cfg, edge_frames=True))


def test_only_parts_that_declare_it_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, dict[str, object]]] = []

    def fake_compile(self: nn.Module, *args: object, **kwargs: object) -> None:
        calls.append((type(self).__name__, kwargs))

    monkeypatch.setattr(nn.Module, "compile", fake_compile)
    assert compile_cpu_parts(_edge_dynamics()) == ["frames"]
    assert calls == [("FrameNet", {"dynamic": True})]
    board_axes = SetDynamics(tiny_object_set_config().dynamics)  # no part declares it
    assert compile_cpu_parts(board_axes) == [] and len(calls) == 1


@pytest.mark.parametrize(
    ("flag", "minutes", "compiled"),
    [(None, None, False), (None, 30.0, True), (True, None, True), (False, 30.0, False)],
)
def test_train_part_compiles_by_flag_or_budget(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    flag: bool | None,
    minutes: float | None,
    compiled: bool,
) -> None:
    seen: list[str] = []
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: seen.append(type(self).__name__))
    dyn = _edge_dynamics()
    param = next(dyn.frames.parameters()) if dyn.frames is not None else None
    assert param is not None

    def step_fn(_state: object) -> dict[str, torch.Tensor]:
        return {"loss": (param**2).sum()}

    budget = Budget(minutes=minutes, steps=1)  # one step, whichever ends first
    run = StageRun(tmp_path / "m", TrainConfig(compile=flag), budget)
    cfg = tiny_object_set_config()
    train_part(run, part="dynamics", module=dyn, config=cfg, step_fn=step_fn)
    assert seen == (["FrameNet"] if compiled else [])


@pytest.mark.slow
def test_a_compiled_frame_net_gives_the_eager_outputs() -> None:
    """The real compile (a C++ compiler, about a minute on two cores)."""
    torch.manual_seed(0)
    cfg = dataclasses.replace(tiny_object_set_config().dynamics, edge_frames=True)
    net = FrameNet(cfg)
    for p in net.out[-1].parameters():
        nn.init.normal_(p, std=0.5)
    m, e, a = 9, 20, 4
    g = torch.Generator().manual_seed(1)
    args = (torch.randn(m, 2, generator=g), torch.rand(m, 4, generator=g),
            torch.randn(e, 2, generator=g) * 20, torch.randn(e, 2, generator=g),
            tuple(torch.randn(a, 2, generator=g) * 20 for _ in range(4)),
            (torch.randint(0, m, (e,), generator=g), torch.randint(0, m, (e,), generator=g),
             torch.randint(0, m, (a,), generator=g)))  # fmt: skip
    eager = net(*args)
    assert compile_cpu_parts(net) == ["FrameNet"]
    torch.testing.assert_close(net(*args), eager, rtol=1e-4, atol=1e-5)
