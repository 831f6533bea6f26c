"""Optimisers and the gradient step every algorithm takes.

`Adam` and `RMSprop` are torch's own classes (same state layout, `state_dict` and param groups)
with a leaner `step`. At these network sizes torch's step spends longer deciding what to do
(grouping tensors by device and dtype, graph-capture checks, grad-mode switches, profiler
records) than the arithmetic takes: the lean steps call the same kernels directly, so the update
is bit for bit the one torch computes, in a fraction of the time (tests/test_optim.py holds them
to that).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rlrun.spec import OptimizerSpec


class _Undecorated(torch.optim.Optimizer):
    """torch.optim wraps `add_param_group`, `state_dict`, `load_state_dict` and `zero_grad` so that
    torch.compile leaves them alone; the wrapper imports torch._dynamo (and sympy) the first time
    one runs: over a second of every command's start-up (1.2 s on the 2-core CI machine). rlrun's
    own optimisers call the functions under the wrappers (`__wrapped__`) directly, which is what the
    wrappers do when nothing is being compiled; torch's classes, and every other optimiser in the
    process, keep their wrappers as they are."""

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _UNWRAPPED["add_param_group"](self, param_group)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = _UNWRAPPED["state_dict"](self)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _UNWRAPPED["load_state_dict"](self, state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _UNWRAPPED["zero_grad"](self, set_to_none)


_UNWRAPPED: dict[str, Any] = {
    name: getattr(getattr(torch.optim.Optimizer, name), "__wrapped__", getattr(torch.optim.Optimizer, name))
    for name in ("add_param_group", "state_dict", "load_state_dict", "zero_grad")
}
"""torch.optim.Optimizer's methods as written, under their torch.compile wrappers."""


class Adam(_Undecorated, torch.optim.Adam):
    """torch's fused Adam, stepped by one call of its kernel."""

    def __init__(self, params: list[nn.Parameter], *, lr: float, eps: float) -> None:
        super().__init__(params, lr=lr, eps=eps, fused=True)

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]  # no closures here
        for group in self.param_groups:
            params, grads, states = _stepping(self, group, "exp_avg", "exp_avg_sq", step_on_device=True)
            if not params:
                continue
            steps = [state["step"] for state in states]
            torch._foreach_add_(steps, _one(params[0].device), alpha=1.0)
            beta1, beta2 = group["betas"]
            torch._fused_adam_(
                params,
                grads,
                [state["exp_avg"] for state in states],
                [state["exp_avg_sq"] for state in states],
                [],
                steps,
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                weight_decay=group["weight_decay"],
                eps=group["eps"],
                amsgrad=False,
                maximize=False,
            )
            # the fused kernel writes the parameters without moving their version counters (foreach
            # kernels move them): what keeps something made of a parameter (`TransposedWeights`)
            # reads them to know it changed
            torch.autograd.graph.increment_version(params)


class RMSprop(_Undecorated, torch.optim.RMSprop):
    """torch's multi-tensor RMSprop (no momentum, not centred), as its foreach path computes it."""

    def __init__(self, params: list[nn.Parameter], *, lr: float, eps: float) -> None:
        super().__init__(params, lr=lr, eps=eps, foreach=True)

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]  # no closures here
        for group in self.param_groups:
            params, grads, states = _stepping(self, group, "square_avg")
            square_avgs = [state["square_avg"] for state in states]
            torch._foreach_add_([state["step"] for state in states], _one(_CPU), alpha=1.0)
            torch._foreach_mul_(square_avgs, group["alpha"])
            torch._foreach_addcmul_(square_avgs, grads, grads, value=1 - group["alpha"])
            average = torch._foreach_sqrt(square_avgs)
            torch._foreach_add_(average, group["eps"])
            torch._foreach_addcdiv_(params, grads, average, value=-group["lr"])


_CPU = torch.device("cpu")
_ONES: dict[torch.device, torch.Tensor] = {}


def _one(device: torch.device) -> torch.Tensor:
    """1 as a tensor on `device`, for adding to step counts there: a Python 1 would be wrapped in a
    new tensor at every step, and foreach arithmetic takes a tensor only from its lists' device."""
    if device not in _ONES:
        _ONES[device] = torch.ones((), device=device)
    return _ONES[device]


def _stepping(
    optimizer: torch.optim.Optimizer, group: dict[str, Any], *buffers: str, step_on_device: bool = False
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    """The group's parameters that have a gradient, those gradients, and the parameters' states.
    A state is created on its parameter's first step as torch creates it: a float32 step count
    (on the CPU, or beside the parameter for a fused kernel, which reads it there) and zeroed
    `buffers` shaped like the parameter."""
    params = [p for p in group["params"] if p.grad is not None]
    grads = [g for p in params if (g := p.grad) is not None]
    states = [optimizer.state[p] for p in params]
    for param, state in zip(params, states, strict=True):
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=param.device if step_on_device else None)
            for name in buffers:
                state[name] = torch.zeros_like(param, memory_format=torch.preserve_format)
    return params, grads, states


# torch wraps every optimiser class's `step` in a profiler record and step-hook dispatch the first
# time one is built, unless the function says it is already wrapped; nothing here uses step hooks.
Adam.step.hooked = RMSprop.step.hooked = True  # type: ignore[attr-defined]


def make_optimizer(spec: OptimizerSpec, params: list[nn.Parameter], max_frame: int) -> torch.optim.Optimizer:
    lr = spec.lr.value(0, max_frame)
    if spec.name == "adam":
        return Adam(params, lr=lr, eps=spec.eps)
    if spec.name == "rmsprop":
        return RMSprop(params, lr=lr, eps=spec.eps)
    return SGD(params, lr=lr)


class SGD(_Undecorated, torch.optim.SGD):
    """torch's SGD, its step its own (which imports torch._dynamo when first taken)."""


def optimise(
    optimizer: torch.optim.Optimizer, loss: torch.Tensor, spec: OptimizerSpec, frame: int, max_frame: int
) -> torch.Tensor:
    """One gradient step at the scheduled learning rate, the gradient norm clipped if the spec says.
    Returns the gradient's global norm before clipping (a diagnostic; a tensor, so reading it
    costs nothing until someone does)."""
    return apply_gradients(optimizer, _backward(optimizer, loss), spec, frame, max_frame)


def optimise_unmeasured(
    optimizer: torch.optim.Optimizer, loss: torch.Tensor, spec: OptimizerSpec, frame: int, max_frame: int
) -> None:
    """`optimise` for a caller that does not read the gradient norm: the same step, without the
    norm's reductions (over a dozen small operations) when the spec does not clip."""
    apply_gradients(optimizer, _backward(optimizer, loss), spec, frame, max_frame, measured=False)


def _backward(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> list[torch.Tensor]:
    """The loss's gradients, computed afresh into the optimiser's parameters."""
    for group in optimizer.param_groups:
        for p in group["params"]:  # what zero_grad(set_to_none=True) does, without its profiler record
            p.grad = None
    loss.backward()
    return [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]


def apply_gradients(
    optimizer: torch.optim.Optimizer,
    grads: list[torch.Tensor],
    spec: OptimizerSpec,
    frame: int,
    max_frame: int,
    *,
    measured: bool = True,
) -> torch.Tensor:
    """`optimise` once the parameters hold their gradients (`grads`, by autograd or by hand): the
    scheduled learning rate, the norm clipped if the spec says, one optimiser step. Returns the
    norm before clipping (when not `measured` and not clipping, it is not computed: an empty tensor)."""
    lr = spec.lr.value(frame, max_frame)
    for group in optimizer.param_groups:
        group["lr"] = lr
    norm = gradient_norm(grads) if measured or spec.grad_clip is not None else torch.empty(0)
    if spec.grad_clip is not None:
        clip_gradients(grads, norm, spec.grad_clip)
    optimizer.step()
    return norm


@dataclass(frozen=True)
class OptimizerStep:
    """One optimiser's step at a frame of the run: the optimiser, its spec (the learning rate's
    schedule, the clipping) and where the schedule stands. A caller makes one per step and hands it
    to a learner's step method, which ends by taking it: down a loss autograd differentiates
    (`down`), or with gradients a kernel computed by hand (`apply`), so the two learners of an
    algorithm step alike. Neither measures the gradient norm (their callers read none)."""

    optimizer: torch.optim.Optimizer
    spec: OptimizerSpec
    frame: int
    max_frame: int

    def down(self, loss: torch.Tensor) -> None:
        """One step down `loss`, its gradients computed by autograd (`optimise_unmeasured`)."""
        optimise_unmeasured(self.optimizer, loss, self.spec, self.frame, self.max_frame)

    def apply(self, grads: list[torch.Tensor]) -> None:
        """One step with `grads`, computed by hand into the optimiser's parameters
        (`apply_gradients`, unmeasured)."""
        apply_gradients(self.optimizer, grads, self.spec, self.frame, self.max_frame, measured=False)


def gradient_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The global 2-norm of `grads` (what `torch.nn.utils.clip_grad_norm_` computes, without its
    per-call bookkeeping, which costs more than the arithmetic for small networks)."""
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


def clip_gradients(grads: list[torch.Tensor], norm: torch.Tensor, max_norm: float) -> None:
    """Scale the gradients so their global norm (`norm`) is at most `max_norm`, in place."""
    torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + 1e-6), max=1.0))


@contextmanager
def flushing_subnormals(device: torch.device, flush: bool = True) -> Iterator[None]:
    """Subnormal floats (below ~1.2e-38) read and written as zeros by this thread's CPU arithmetic
    while inside, for learning on the CPU. Adam's moments of a weight that stops getting gradient
    (a dead ReLU unit's) decay through the subnormal range over thousands of steps, and x86 cores
    take a slow path for each such number: a third of a DQN CartPole run's CPU time. The only
    values it changes are those subnormal ones (an optimizer moment of 1e-40 becomes 0), which
    move a weight by far less than its rounding; deterministic, so resumes stay exact. The
    thread's previous setting (torch's default, off) is restored on the way out. `flush=False`:
    nothing changes (an arithmetic revision that keeps them, `MetaSpec.arithmetic`)."""
    if not flush or device.type != "cpu" or not torch.set_flush_denormal(True):
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
