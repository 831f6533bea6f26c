"""The gradient of a built-in multi-layer perceptron, derived by hand.

For a network of a few small layers (DQN's Q-network on classic control), autograd's bookkeeping
(recording a graph on the forward pass, then walking it node by node) costs as much as the
arithmetic. `HandMLP` runs the forward pass and its backward pass itself, with the kernels
autograd calls for them, in the same layouts: `addmm` forward; for each layer's backward one
`mm` for the weights' gradient, one for the input's and a `sum` for the bias's; ReLU's and tanh's
own backward kernels. The gradients are autograd's bit for bit (tests/unit/test_hand_mlp.py holds
them to that), written into gradient buffers the parameters keep between steps.

`HandMLP.fits` is the rule for which networks take this path: what `base.mlp` builds with a ReLU or
tanh activation. Others (the user's, a CNN, other activations) keep autograd.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

_BACKWARD: dict[type[nn.Module], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    # each activation's gradient from its output, as autograd's ReluBackward0 and TanhBackward0 compute it
    # (`.default`: the overload itself; the packet `torch.ops.aten.x` looks it up on every call)
    nn.ReLU: lambda grad, out: torch.ops.aten.threshold_backward.default(grad, out, 0),
    nn.Tanh: torch.ops.aten.tanh_backward.default,
}


class HandMLP:
    """Forward and backward passes of `net` (which `fits`), with no autograd graph."""

    @staticmethod
    def fits(net: nn.Module) -> bool:
        """Linear layers with a ReLU or tanh between each two (and none after the last)."""
        if not isinstance(net, nn.Sequential) or len(net) % 2 == 0:
            return False
        return all(isinstance(module, nn.Linear) if i % 2 == 0 else type(module) in _BACKWARD
                   for i, module in enumerate(net))

    def __init__(self, net: nn.Module) -> None:
        assert self.fits(net)
        modules = list(net.children())
        self.linears = [module for module in modules[0::2] if isinstance(module, nn.Linear)]
        self.activations = modules[1::2]
        self.params = [p for linear in self.linears for p in (linear.weight, linear.bias)]
        self._saved: list[torch.Tensor] = []

    @torch.no_grad()
    def forward(self, x: torch.Tensor, *, keep: bool = False) -> torch.Tensor:
        """The network's output for a batch of rows, computed as `net(x)` computes it but with no
        graph; with `keep`, each layer's input is kept for `backward`."""
        saved = [x]
        for i, linear in enumerate(self.linears):
            x = torch.addmm(linear.bias, x, linear.weight.t())  # what nn.Linear does with a batch
            if i < len(self.activations):
                # in place: the product is this layer's alone (the same kernel, one allocation fewer)
                x = x.relu_() if isinstance(self.activations[i], nn.ReLU) else x.tanh_()
                saved.append(x)
        self._saved = saved if keep else []
        return x

    @torch.no_grad()
    def backward(self, grad: torch.Tensor) -> list[torch.Tensor]:
        """Set every parameter's `.grad` to the gradient of the last kept `forward`'s output (as a
        sum weighted by `grad`, its shape) and return those gradients, in `net.parameters()` order."""
        assert self._saved, "backward needs a forward(..., keep=True) first"
        for i in reversed(range(len(self.linears))):
            linear, inputs = self.linears[i], self._saved[i]
            # AddmmBackward0 for `addmm(bias, inputs, weight.t())`: weight.t() is column-major, so its
            # gradient is formed as grad.t() @ inputs, directly in the weight's layout
            linear.weight.grad = grad.t().mm(inputs)
            linear.bias.grad = grad.sum(0)
            if i > 0:
                grad = _BACKWARD[type(self.activations[i - 1])](grad.mm(linear.weight), inputs)
        self._saved = []
        return [p.grad for p in self.params if p.grad is not None]  # all of them, set just above
