"""The lean optimiser steps compute exactly what torch's own steps compute."""

from __future__ import annotations

import pytest
import torch

from rlrun.algorithms import optim


def _train(optimizer_for, steps: int = 25) -> list[torch.Tensor]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    optimizer = optimizer_for(list(net.parameters()))
    data = torch.randn(steps, 32, 4)
    for batch in data:
        for group in optimizer.param_groups:
            group["lr"] *= 0.97  # a schedule, as optimise() sets it
        optimizer.zero_grad()
        net(batch).pow(2).mean().backward()
        optimizer.step()
    return [*net.parameters(), *(t for s in optimizer.state.values() for t in s.values())]


@pytest.mark.parametrize(
    ("lean", "reference"),
    [
        (lambda p: optim.Adam(p, lr=1e-2, eps=1e-5), lambda p: torch.optim.Adam(p, lr=1e-2, eps=1e-5, fused=True)),
        (
            lambda p: optim.RMSprop(p, lr=1e-2, eps=1e-5),
            lambda p: torch.optim.RMSprop(p, lr=1e-2, eps=1e-5, foreach=True),
        ),
    ],
    ids=["adam", "rmsprop"],
)
def test_lean_step_is_bitwise_torchs_step(lean, reference) -> None:
    ours, theirs = _train(lean), _train(reference)
    assert len(ours) == len(theirs)
    for mine, torchs in zip(ours, theirs, strict=True):
        assert torch.equal(mine, torchs)


def test_lean_optimizer_state_round_trips_through_torchs_format() -> None:
    net = torch.nn.Linear(3, 2)
    optimizer = optim.Adam(list(net.parameters()), lr=1e-3, eps=1e-8)
    net(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    plain = torch.optim.Adam(list(net.parameters()), lr=1e-3)
    plain.load_state_dict(optimizer.state_dict())
    assert plain.state_dict()["state"][0]["step"] == 1


def test_subnormals_flush_to_zero_only_inside() -> None:
    supported = torch.set_flush_denormal(True)
    torch.set_flush_denormal(False)
    subnormal = torch.tensor([1e-40])
    with optim.flushing_subnormals(torch.device("cpu")):
        inside = subnormal * 1.0
    outside = subnormal * 1.0
    assert outside.item() != 0.0  # the thread's IEEE arithmetic is back
    assert (inside.item() == 0.0) == supported


@pytest.mark.parametrize("make", [optim.Adam, optim.RMSprop])
def test_a_step_moves_the_parameters_version_counters(make) -> None:
    """Whatever keeps something made of a parameter (acting's transposed weights) learns from its
    version counter that a step changed it; torch's fused Adam kernel alone does not move it."""
    params = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(2))]
    for p in params:
        p.grad = torch.randn_like(p)
    before = [p._version for p in params]
    make(params, lr=0.1, eps=1e-5).step()
    assert all(p._version > v for p, v in zip(params, before, strict=True))
