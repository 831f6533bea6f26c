"""The helpers SAC and DQN share around their networks (rlrun.algorithms.base): the target
networks' updates over parameter lists kept from the start, and the mean squared error's kernel
called directly, compute what torch's own calls compute, bit for bit."""

from __future__ import annotations

import copy

import torch
from torch.nn import functional

from rlrun.algorithms.base import TargetUpdate, mlp, mse_loss
from rlrun.spec import NetworkSpec


def _nets() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    source = mlp(4, 2, NetworkSpec(hidden=[16, 8]))
    target = copy.deepcopy(source).requires_grad_(False)
    with torch.no_grad():
        for param in source.parameters():
            param.add_(torch.randn_like(param))
    return source, target


def test_polyak_is_torchs_lerp_and_follows_the_weights_loaded_later() -> None:
    source, target = _nets()
    update = TargetUpdate(target, source)
    expected = [t.detach().clone() for t in target.parameters()]
    torch._foreach_lerp_(expected, [p.detach() for p in source.parameters()], 0.05)
    update.polyak(0.05)
    assert all(torch.equal(t, e) for t, e in zip(target.parameters(), expected, strict=True))
    assert not any(t.requires_grad for t in target.parameters())
    # load_state_dict writes into the parameters the lists hold: the next step uses the loaded weights
    fresh, _ = _nets()
    with torch.no_grad():
        for param in fresh.parameters():
            param.mul_(3)
    source.load_state_dict(fresh.state_dict())
    update.copy()
    assert all(torch.equal(t, f) for t, f in zip(target.parameters(), fresh.parameters(), strict=True))


def test_mse_loss_is_functionals() -> None:
    generator = torch.Generator().manual_seed(0)
    prediction, target = torch.randn(257, generator=generator), torch.randn(257, generator=generator)
    assert torch.equal(mse_loss(prediction, target), functional.mse_loss(prediction, target))
