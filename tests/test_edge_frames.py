"""The edge-frame dynamics (``dynamics.edge_frames``): exact rotation equivariance, the
same set and stillness rules as the world-frame network, and old weights unchanged."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from factories import tiny_object_set_config

from factory.model.object_set.config import SetDynamicsConfig
from factory.model.object_set.dynamics import SetDynamics
from factory.model.object_set.frames import in_frame, invariants, turn

CENTRE = torch.tensor([256.0, 256.0])  # the board's centre: its walls are symmetric about it


def _config(**changes: object) -> SetDynamicsConfig:
    base = tiny_object_set_config().dynamics
    return dataclasses.replace(base, edge_frames=True, message_steps=2, **changes)


def _dynamics(seed: int, **changes: object) -> SetDynamics:
    """Tiny edge-frame dynamics whose zero-initialised output layer is made random (every
    active disc's gate open), its agent a PD-like map that treats every direction alike
    (as the fitted one does)."""
    torch.manual_seed(seed)
    dyn = SetDynamics(_config(**changes))
    assert dyn.frames is not None
    with torch.no_grad():
        for p in dyn.frames.out[-1].parameters():
            torch.nn.init.normal_(p, std=0.5)
        dyn.frames.out[-1].bias[-1] += 20.0
        eye = torch.eye(2)
        dyn.agent.linear.weight.copy_(torch.cat([0.3 * eye, 0.2 * eye, 0.4 * eye], 1))
        dyn.agent.linear.bias.zero_()
    return dyn.eval()


def _scene(b: int, n: int, seed: int, spread: float = 22.0) -> tuple[torch.Tensor, ...]:
    """prev, cur (b, 2 + 2 n), prev_action, action (b, 2): a jittered grid of touching
    discs about the centre, an agent pushing into it, a third of the discs moving."""
    g = torch.Generator().manual_seed(seed)
    side = math.ceil(math.sqrt(n))
    grid = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="xy"), -1)
    pts = grid.reshape(-1, 2)[:n].float() * spread
    discs = pts - pts.mean(0) + CENTRE + torch.rand(b, n, 2, generator=g)
    agent = discs[:, 0] + torch.tensor([-30.0, 5.0])
    cur = torch.cat([agent, discs.flatten(1)], 1)
    moving = torch.rand(b, n, generator=g) < 0.3
    prev = cur - torch.cat([torch.full((b, 2), 8.0), (torch.randn(b, n, 2, generator=g)
                            * 2 * moving[..., None]).flatten(1)], 1)  # fmt: skip
    a = agent + torch.randn(b, 2, generator=g) * 10 + torch.tensor([12.0, 0.0])
    return prev, cur, agent + torch.tensor([6.0, 0.0]), a


def _rotate(x: torch.Tensor, angle: float) -> torch.Tensor:
    """Points (..., 2 k) turned by ``angle`` about the board's centre."""
    c, s = math.cos(angle), math.sin(angle)
    rot = torch.tensor([[c, -s], [s, c]])
    pts = x.unflatten(-1, (-1, 2)) - CENTRE
    return (pts @ rot.T + CENTRE).flatten(-2)


@pytest.mark.parametrize(("angle", "spread"), [(math.pi / 2, 150.0), (0.7, 22.0)])
def test_turning_the_scene_turns_every_step(angle: float, spread: float) -> None:
    """A quarter turn about the centre maps the walls onto themselves, so the whole step
    turns with the scene, walls included (discs spread to reach them); any other angle
    does away from the walls."""
    dyn = _dynamics(0)
    prev, cur, pa, a = _scene(3, 16, seed=1, spread=spread)
    discs = cur[:, 2:].unflatten(1, (-1, 2))
    lo, hi = dyn.cfg.walls
    near_wall = torch.cat([discs - lo, hi - discs]).min() < dyn.cfg.wall_range
    assert near_wall == (spread > 100)  # the quarter turn is tested with the walls in play
    with torch.no_grad():
        nxt, logit, act = dyn(prev, cur, pa, a)
        r_nxt, r_logit, r_act = dyn(*(_rotate(t, angle) for t in (prev, cur, pa, a)))
    assert act.sum() > 4 and (nxt[:, 2:] - cur[:, 2:]).abs().max() > 0.1
    assert torch.equal(r_act, act)
    torch.testing.assert_close(r_logit, logit, atol=1e-4, rtol=0)
    torch.testing.assert_close(r_nxt, _rotate(nxt, angle), atol=2e-3, rtol=0)


def test_the_world_frame_network_does_not_turn_with_the_scene() -> None:
    """The control: the same check fails for the board-axes network (so the test above
    can fail)."""
    torch.manual_seed(0)
    dyn = SetDynamics(dataclasses.replace(_config(), edge_frames=False))
    frames = _dynamics(0)
    dyn.agent.load_state_dict(frames.agent.state_dict())  # the same isotropic agent
    with torch.no_grad():
        for p in dyn.out[-1].parameters():
            torch.nn.init.normal_(p, std=0.5)
        dyn.out[-1].bias[2] += 20.0
    prev, cur, pa, a = _scene(3, 16, seed=1)
    with torch.no_grad():
        nxt = dyn(prev, cur, pa, a)[0]
        r_nxt = dyn(*(_rotate(t, 0.7) for t in (prev, cur, pa, a)))[0]
    assert (nxt[:, 2:] - cur[:, 2:]).abs().max() > 0.1
    assert (r_nxt - _rotate(nxt, 0.7)).abs().max() > 0.05


def test_frame_helpers_round_trip_and_keep_lengths() -> None:
    g = torch.Generator().manual_seed(2)
    u = torch.nn.functional.normalize(torch.randn(5, 2, generator=g), dim=-1)
    v = torch.randn(5, 3, 2, generator=g)
    comp = in_frame(v, u)  # (5, 6): along, then across
    back = comp[:, :3, None] * u[:, None] + comp[:, 3:, None] * turn(u)[:, None]
    torch.testing.assert_close(back, v)
    gram = invariants(v)
    assert gram.shape == (5, 6)
    torch.testing.assert_close(gram[:, 0], (v[:, 0] ** 2).sum(-1))


def test_edge_frames_keep_the_set_and_stillness_rules() -> None:
    """Permuting the discs permutes the step, and discs the agent cannot reach keep their
    positions bit for bit."""
    dyn = _dynamics(3)
    prev, cur, pa, a = _scene(2, 12, seed=4)
    far = torch.cat([torch.zeros(2 + 12), torch.full((12,), 150.0)])
    cur = cur + far
    prev = torch.cat([prev[:, :14], cur[:, 14:]], 1)  # six discs far away, at rest
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(5))

    def permute(s: torch.Tensor) -> torch.Tensor:
        return torch.cat([s[:, :2], s[:, 2:].unflatten(1, (-1, 2))[:, perm].flatten(1)], 1)

    with torch.no_grad():
        nxt, _, act = dyn(prev, cur, pa, a)
        p_nxt = dyn(permute(prev), permute(cur), pa, a)[0]
    torch.testing.assert_close(p_nxt, permute(nxt), atol=1e-4, rtol=0)
    still = ~act
    assert still.any()
    kept = nxt[:, 2:].unflatten(1, (-1, 2))[still]
    assert torch.equal(kept, cur[:, 2:].unflatten(1, (-1, 2))[still])


def test_the_networks_are_separate_and_vectors_are_checked() -> None:
    """An edge-frame model holds only the frame network (a world-frame model's weights
    never load into it, nor its into one), and needs the velocity and wall channels."""
    frames = SetDynamics(_config())
    world = SetDynamics(dataclasses.replace(_config(), edge_frames=False))
    assert all(k.startswith(("agent.", "frames.")) for k in frames.state_dict())
    assert not any(k.startswith("frames.") for k in world.state_dict())
    with pytest.raises(RuntimeError):
        frames.load_state_dict(world.state_dict())
    with pytest.raises(ValueError, match=r"dynamics\.vectors"):
        _config(vectors=1)
