"""The forward and backward passes of a built-in multi-layer perceptron, by hand (what the other
kernels are built from).

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

import contextlib
import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

import torch
from torch import nn

_P = ParamSpec("_P")
_R = TypeVar("_R")


def without_grad(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """`torch.no_grad()` as a decorator, for a function called many times a step and mostly from
    code that has already turned gradients off: entering torch's context costs microseconds (a
    few Python objects and calls), checking whether it is needed does not."""

    @functools.wraps(function)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not torch.is_grad_enabled():
            return function(*args, **kwargs)
        with torch.no_grad():
            return function(*args, **kwargs)

    return wrapper


_CONSTANTS: dict[tuple[Any, ...], Any] = {}


def made_once(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """The constant `make` makes, made the first time `key` is asked for (tensors a step reads and
    never writes, the same for every step of a dtype, device and batch size)."""
    if key not in _CONSTANTS:
        _CONSTANTS[key] = make()
    return _CONSTANTS[key]


def zero(like: torch.Tensor) -> torch.Tensor:
    """A zero-dimensional 0 of `like`'s dtype and device (what a gradient that does not flow is
    filled with)."""
    made: torch.Tensor = made_once(
        ("zero", like.dtype, like.device), lambda: torch.zeros((), dtype=like.dtype, device=like.device)
    )
    return made


def mean_gradient(like: torch.Tensor, rows: int) -> torch.Tensor:
    """A mean's backward from a loss of 1 (what `backward()` starts from): 1 / `rows` in each of
    `rows` rows, as autograd's MeanBackward0 forms it (`grad.expand(sizes) / numel`)."""

    def make() -> torch.Tensor:
        return torch.ones((), dtype=like.dtype, device=like.device).expand(rows) / rows

    grad: torch.Tensor = made_once(("mean", rows, like.dtype, like.device), make)
    return grad


_BACKWARD: dict[type[nn.Module], Callable[..., torch.Tensor]] = {
    # each activation's gradient from its output, as autograd's ReluBackward0 and TanhBackward0
    # compute it (given `grad_input`, written there: it may be `grad` itself, elementwise); the
    # overloads themselves, as the packet `torch.ops.aten.x` would look them up on every call
    nn.ReLU: lambda grad, out, **into: (
        torch.ops.aten.threshold_backward.grad_input(grad, out, 0, **into)
        if into
        else torch.ops.aten.threshold_backward.default(grad, out, 0)
    ),
    nn.Tanh: lambda grad, out, **into: (
        torch.ops.aten.tanh_backward.grad_input(grad, out, **into)
        if into
        else torch.ops.aten.tanh_backward.default(grad, out)
    ),
}


FLOAT32_PRODUCTS: Any = cast(Any, torch.backends.mkldnn).matmul
"""oneDNN's setting for float32 matrix products on the CPU (its `fp32_precision`: "bf16" lets it
round their operands to bfloat16); set by torch at import, so untyped."""


class Bf16Products:
    """While inside, float32 matrix products on the CPU take their operands rounded to bfloat16
    and sum in float32: oneDNN's "bf16" precision for float32 products, on a CPU with AVX-512 (fast
    with AMX or AVX-512 BF16; torch keeps float32 on a CPU without AVX-512, and the setting is not
    CUDA's). A 256-wide product then takes about 0.4x the time with AMX (90 µs against 225); a
    narrow one (a side of a few columns) is slower, so `HandMLP(bf16=True)` enters this around its
    wide products only. The setting is the process's, so the one before is put back on the way
    out. Deterministic: the same operands give the same bits, run to run and process to process."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = FLOAT32_PRODUCTS.fp32_precision
        FLOAT32_PRODUCTS.fp32_precision = "bf16"

    def __exit__(self, *exc: object) -> None:
        FLOAT32_PRODUCTS.fp32_precision = self._before


Workspace = dict[int, torch.Tensor]
"""Buffers that `HandMLP` passes write their hidden layers into, by layer, kept from one call to the
next. A buffer written over and over stays in the processor's cache, where a fresh tensor of a few
hundred kilobytes is new memory each time: for SAC's 256-wide layers the elementwise passes (a
bias broadcast, a ReLU and its backward) took several times longer on fresh tensors, and every
pass that does not need its own buffers sharing one workspace keeps the whole step's memory within
the cache. The kernels are the same either way, and so are the bits."""


def buffer(
    workspace: Workspace | None, key: int, shape: tuple[int, ...] | torch.Size, like: torch.Tensor
) -> torch.Tensor | None:
    """The `workspace`'s buffer `key` (None without a workspace), made afresh when its shape, dtype
    or device is not `like`'s."""
    if workspace is None:
        return None
    kept = workspace.get(key)
    if kept is None or kept.shape != shape or kept.dtype != like.dtype or kept.device != like.device:
        kept = workspace[key] = torch.empty(shape, dtype=like.dtype, device=like.device)
    return kept


class HandMLP:
    """Forward and backward passes of `net` (which `fits`), with no autograd graph."""

    @staticmethod
    def fits(net: nn.Module) -> bool:
        """Linear layers with a ReLU or tanh between each two (and none after the last)."""
        if not isinstance(net, nn.Sequential) or len(net) % 2 == 0:
            return False
        return all(
            isinstance(module, nn.Linear) if i % 2 == 0 else type(module) in _BACKWARD for i, module in enumerate(net)
        )

    NARROW = 8
    """A layer with at most this many inputs or outputs is narrow (`narrow`)."""

    def __init__(self, net: nn.Module, *, narrow: bool = False, bf16: bool = False) -> None:
        """With `narrow`, the products with a narrow side (a first layer's few inputs, a last
        layer's few outputs) are formed the other way round, wide side first, where the math library
        is several times faster (a 256-row batch through a 256-to-2 layer: 7 µs against 20), and its
        sums may round differently from autograd's (for an arithmetic revision that allows it).
        With `bf16`, the products of layers wide on both sides (more than `NARROW` inputs and
        outputs: the 256-to-256 layers, and a first layer of many inputs) take bfloat16 operands
        (`Bf16Products`): the forward product and the backward ones, but for the first layer's
        input gradient (a few columns of it, in SAC's actor step); another precision, for an
        arithmetic revision that allows it."""
        assert self.fits(net)
        modules = list(net.children())
        self.linears = [module for module in modules[0::2] if isinstance(module, nn.Linear)]
        self.activations = modules[1::2]
        self.params = [p for linear in self.linears for p in (linear.weight, linear.bias)]
        # Plain tensors over the parameters' memory (optimisers and load_state_dict write the
        # parameters in place, so these always hold the current weights): a kernel given a
        # Parameter first checks it for a __torch_function__ override, and `weight.t()` is another
        # call, which together cost more than a small layer's arithmetic
        self.weights = [linear.weight.detach() for linear in self.linears]
        self.weights_t = [weight.t() for weight in self.weights]
        self.biases = [linear.bias.detach() for linear in self.linears]
        self.relu = [isinstance(activation, nn.ReLU) for activation in self.activations]
        self._backwards = [_BACKWARD[type(activation)] for activation in self.activations]
        self._saved: list[torch.Tensor] = []
        self.narrow_in = narrow and self.linears[0].in_features <= self.NARROW
        self.narrow_out = narrow and self.linears[-1].out_features <= self.NARROW
        self._bias_columns = [bias.unsqueeze(1) for bias in self.biases]
        # each layer's products (forward, and both of its backward) run inside its context
        wide = Bf16Products() if bf16 else contextlib.nullcontext()
        self._products: list[Any] = [
            wide if min(linear.in_features, linear.out_features) > self.NARROW else contextlib.nullcontext()
            for linear in self.linears
        ]

    @without_grad
    def forward(self, x: torch.Tensor, *, keep: bool = False) -> torch.Tensor:
        """The network's output for a batch of rows, computed as `net(x)` computes it but with no
        graph; with `keep`, each layer's input is kept for `backward`."""
        out, saved = self.run(x)
        self._saved = saved if keep else []
        return out

    @without_grad
    def backward(self, grad: torch.Tensor) -> list[torch.Tensor]:
        """Set every parameter's `.grad` to the gradient of the last kept `forward`'s output (as a
        sum weighted by `grad`, its shape) and return those gradients, in `net.parameters()` order."""
        assert self._saved, "backward needs a forward(..., keep=True) first"
        self.backward_from(self._saved, grad)
        self._saved = []
        return self.gradients()

    def gradients(self) -> list[torch.Tensor]:
        """Every parameter's `.grad`, in `net.parameters()` order, as the last `backward_from` with
        `params` set them."""
        return [p.grad for p in self.params if p.grad is not None]  # all of them, once a backward ran

    def run(self, x: torch.Tensor, workspace: Workspace | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The network's output for a batch of rows, as `net(x)` computes it but with no graph
        (it computes with plain views of the weights, and `x` needs no gradient: no torch.no_grad
        needed, whose decorator costs as much as a layer), and each layer's input (what
        `backward_from` needs). With a `workspace`, the hidden layers are written into its buffers:
        valid until the next `run` into the same workspace."""
        assert not x.requires_grad
        saved = [x]
        hidden_layers, rows = len(self.activations), x.shape[0]  # a tensor's len() is a Python method
        for i, (bias, weight_t) in enumerate(zip(self.biases, self.weights_t, strict=True)):
            if i < hidden_layers:
                out = buffer(workspace, i, (rows, bias.shape[0]), x)
                with self._products[i]:
                    if self.relu[i]:
                        # addmm (what nn.Linear does with a batch), then relu_ on its result, by one
                        # call into ATen, whose CPU kernel calls those two itself: the same kernels,
                        # one Python binding less per layer
                        x = torch._addmm_activation(bias, x, weight_t, out=out)
                    else:  # in place: the same values as torch.tanh, on a tensor nothing else holds
                        x = torch.addmm(bias, x, weight_t, out=out).tanh_()
                saved.append(x)
            elif self.narrow_out:  # (weight @ x.t()).t(), the bias a column: outputs by rows, a transposed view
                x = torch.addmm(self._bias_columns[i], self.weights[i], x.t()).t()
            else:
                with self._products[i]:
                    x = torch.addmm(bias, x, weight_t)
        return x, saved

    def backward_from(
        self,
        saved: list[torch.Tensor],
        grad: torch.Tensor,
        *,
        params: bool = True,
        inputs: bool = False,
        workspace: Workspace | None = None,
        input_columns: slice | None = None,
    ) -> torch.Tensor | None:
        """The backward pass of the `run` that kept `saved`, for the output's gradient `grad`: with
        `params`, each parameter's `.grad` set to its gradient; with `inputs`, the gradient of the
        input returned (else None). Autograd's kernels, in its layouts, so its bits. With a
        `workspace`, the hidden layers' gradients are formed in its buffers (its keys below zero:
        the same workspace may hold this pass's `run`), and the weights' in their previous `.grad`
        tensors (which the caller must no longer need). No graph, as for `run`. The input's gradient
        is that of its `input_columns` (all when None)."""
        for i in reversed(range(len(self.linears))):
            layer_input = saved[i]
            if params:
                # AddmmBackward0 for `addmm(bias, inputs, weight.t())`: weight.t() is column-major, so
                # its gradient is formed as grad.t() @ inputs, directly in the weight's layout
                weight_param = self.params[2 * i]
                old = weight_param.grad if workspace is not None else None
                reuse = old is not None and old.shape == weight_param.shape
                if i == 0 and self.narrow_in:  # formed transposed (few rows), then laid out as the weight
                    into = old if old is not None and reuse else torch.empty_like(weight_param)
                    weight_param.grad = into.copy_(torch.mm(layer_input.t(), grad).t())
                else:
                    with self._products[i]:
                        weight_param.grad = torch.mm(grad.t(), layer_input, out=old if reuse else None)
                self.params[2 * i + 1].grad = grad.sum(0)
            if i > 0:
                out = buffer(workspace, -i, layer_input.shape, layer_input)
                with self._products[i]:
                    grad = torch.mm(grad, self.weights[i], out=out)
                backward = self._backwards[i - 1]
                grad = backward(grad, layer_input) if out is None else backward(grad, layer_input, grad_input=out)
            elif inputs:
                if input_columns is None:
                    return grad.mm(self.weights[i])
                if self.narrow_in:  # only the columns asked for: a product a few columns wide
                    return grad.mm(self.weights[i][:, input_columns])
                return grad.mm(self.weights[i])[:, input_columns]
        return None
