"""The networks' hand-written backward pass against torch's autograd through the same layers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from rlrun.algorithms.base import MLP, mlp
from rlrun.spec import NetworkSpec


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu"])
@pytest.mark.parametrize("input_grad", [False, True])
def test_mlp_forward_and_gradients_match_autograd(activation: str, input_grad: bool) -> None:
    torch.manual_seed(0)
    net = mlp(5, 3, NetworkSpec(hidden=[16, 8], activation=activation))
    assert isinstance(net, MLP)
    x = torch.randn(32, 5, requires_grad=input_grad)
    weights = torch.randn(32, 3)

    (net(x) * weights).sum().backward()
    ours = [p.grad.clone() for p in net.parameters()] + ([x.grad.clone()] if input_grad else [])
    net.zero_grad()
    x.grad = None
    (nn.Sequential.forward(net, x) * weights).sum().backward()
    reference = [p.grad.clone() for p in net.parameters()] + ([x.grad.clone()] if input_grad else [])

    assert torch.allclose(net(x), nn.Sequential.forward(net, x), atol=1e-6)
    for mine, theirs in zip(ours, reference, strict=True):
        assert torch.allclose(mine, theirs, atol=1e-5, rtol=1e-4)


def test_mlp_gradcheck_in_double_precision() -> None:
    torch.manual_seed(0)
    net = mlp(3, 2, NetworkSpec(hidden=[4], activation="tanh")).double()
    x = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(net, (x,))


def test_mlp_state_dict_keys_are_the_plain_sequentials() -> None:
    spec = NetworkSpec(hidden=[4, 4], activation="relu")
    plain = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    assert list(mlp(2, 1, spec).state_dict()) == list(plain.state_dict())
