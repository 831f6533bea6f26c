"""What every algorithm shares: the agent interface and a few small building blocks.

The interface follows Stable-Baselines3's split between collecting and training, without its
class hierarchy: the session loop calls `act`, steps the env, hands the transition to `observe`,
and calls `update`, which optimises when the algorithm has gathered enough. `state_dict` must hold
everything needed to continue bit for bit (weights, optimiser, partial rollouts, random generators)
as tensors and plain Python values, so a snapshot loads with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np
import torch
from torch import nn

from rlrun.clock import Clock
from rlrun.spec import NetworkSpec


@dataclass(frozen=True)
class Step:
    """One vector-env step: arrays with a leading `num_envs` axis.

    `next_obs` is the true next observation: for an env whose episode just ended it is the final
    observation, not the first of the next episode.
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: np.ndarray


class Agent(Protocol):
    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> np.ndarray:
        """Actions for a batch of observations. Training sampling uses the agent's own generator;
        evaluation passes `deterministic=True` or a generator of its own, so it never consumes
        training randomness."""
        ...

    def observe(self, step: Step) -> None: ...

    def update(self, clock: Clock) -> dict[str, float]:
        """Optimise if it is time to; advance `clock.opt_step`; return the losses (empty if idle)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}


def mlp(inputs: int, outputs: int, network: NetworkSpec, *, output_gain: float = 1.0) -> nn.Sequential:
    """A multi-layer perceptron with orthogonal initialisation (the PPO-paper default)."""
    layers: list[nn.Module] = []
    width = inputs
    for hidden in network.hidden:
        layers += [_orthogonal(nn.Linear(width, hidden), gain=float(np.sqrt(2))), ACTIVATIONS[network.activation]()]
        width = hidden
    layers.append(_orthogonal(nn.Linear(width, outputs), gain=output_gain))
    return MLP(*layers)


class MLP(nn.Sequential):
    """An `nn.Sequential` of linear layers and one activation whose forward pass, for tanh and
    ReLU, is a single autograd node with its backward written out (`_MLPFunction`).

    At these sizes a network's arithmetic is cheap next to torch's per-operation cost: one node in
    place of a dozen, tanh by NumPy (several times faster than torch's on CPU) and no gradient for
    an input that needs none cut a training step by a tenth. Same parameters and state_dict as the
    plain `nn.Sequential`; other activations take its path."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activation = type(self[1]) if len(self) > 1 else nn.ReLU
        if activation not in _MLPFunction.ACTIVATIONS:
            return super().forward(x)
        params = [p for layer in list(self)[::2] for p in (layer.weight, layer.bias)]
        return _MLPFunction.apply(x, activation is nn.Tanh, *params)


class _MLPFunction(torch.autograd.Function):
    """y = Linear_n(act(... act(Linear_1(x)))) and its gradients, by the textbook backward pass."""

    ACTIVATIONS = (nn.Tanh, nn.ReLU)

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, tanh: bool, *params: torch.Tensor) -> torch.Tensor:
        layer_inputs = []
        h = x
        for i in range(0, len(params), 2):
            layer_inputs.append(h)
            h = torch.addmm(params[i + 1], h, params[i].t())
            if i + 2 < len(params):  # hidden layers: activate in place (h is this call's own)
                out = h.numpy()
                np.tanh(out, out=out) if tanh else np.maximum(out, 0, out=out)
        ctx.tanh = tanh
        ctx.save_for_backward(*layer_inputs, *params)
        return h

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = ctx.saved_tensors
        layers = len(saved) // 3
        layer_inputs, params = saved[:layers], saved[layers:]
        grads: list[torch.Tensor | None] = [None] * (2 * layers)
        grad_x = None
        for layer in range(layers - 1, -1, -1):
            weight, h = params[2 * layer], layer_inputs[layer]
            grads[2 * layer], grads[2 * layer + 1] = grad.t().mm(h), grad.sum(0)
            if layer > 0:  # through the activation whose output h is: tanh' = 1 - h², relu' = [h > 0]
                grad = grad.mm(weight)
                grad = grad * (1 - h * h) if ctx.tanh else grad * (h > 0)
            elif ctx.needs_input_grad[0]:
                grad_x = grad.mm(weight)
        return (grad_x, None, *grads)


class Fast:
    """Evaluates an `mlp` with NumPy on views of its torch parameters, for acting.

    Acting feeds a handful of observations per step, where torch's per-operation dispatch costs
    several times the arithmetic; NumPy does the same forward pass in a fraction of the time. The
    views share memory with the parameters, which optimisers and `load_state_dict` update in
    place, so this always computes with the current weights. Learning stays in torch.
    """

    _ACTIVATIONS: ClassVar[dict[type[nn.Module], Callable[[np.ndarray], np.ndarray]]] = {
        nn.Tanh: np.tanh,
        nn.ReLU: lambda x: np.maximum(x, 0, out=x),
        nn.ELU: lambda x: np.where(x > 0, x, np.expm1(x)),
    }

    def __init__(self, net: nn.Sequential) -> None:
        self.steps: list[tuple[np.ndarray, np.ndarray] | Any] = []
        for module in net:
            if isinstance(module, nn.Linear):
                self.steps.append((module.weight.detach().numpy().T, module.bias.detach().numpy()))
            elif type(module) in self._ACTIVATIONS:
                self.steps.append(self._ACTIVATIONS[type(module)])
            else:
                self.steps = [lambda x, net=net: net(torch.from_numpy(x)).detach().numpy()]  # e.g. GELU
                return

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
        for step in self.steps:
            x = x @ step[0] + step[1] if isinstance(step, tuple) else step(x)
        return x


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def sample_categorical(log_probs: np.ndarray, generator: torch.Generator) -> np.ndarray:
    """One draw per row, by inverting the cumulative distribution at a uniform number from the
    agent's generator (what torch.multinomial does, at a fraction of its cost for small batches)."""
    uniform = torch.rand(len(log_probs), 1, generator=generator, dtype=torch.float64).numpy()
    cumulative = np.exp(log_probs.astype(np.float64)).cumsum(axis=-1)
    return np.minimum((cumulative < uniform * cumulative[:, -1:]).sum(axis=-1), log_probs.shape[-1] - 1)


def _orthogonal(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def obs_size(space: Any) -> int:
    return int(np.prod(space.shape))
