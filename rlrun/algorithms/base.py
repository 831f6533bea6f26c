"""What every algorithm shares: the agent interface and a few small building blocks.

The interface follows Stable-Baselines3's split between collecting and training, without its
class hierarchy: the session loop calls `act`, steps the env, hands the transition to `observe`,
and calls `update`, which optimises when the algorithm has gathered enough. `state_dict` must hold
everything needed to continue bit for bit (weights, optimiser, partial rollouts, random generators)
as tensors and plain Python values, so a snapshot loads with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import math
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
    METRICS: ClassVar[tuple[str, ...]]
    """The scalars `update` reports, in the order the metrics log's columns take them."""
    HEADLINE: ClassVar[str]
    """The one the live display shows beside return and frames/s."""

    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> np.ndarray:
        """Actions for a batch of observations. Training sampling uses the agent's own generator;
        evaluation passes `deterministic=True` or a generator of its own, so it never consumes
        training randomness."""
        ...

    def observe(self, step: Step) -> None: ...

    def update(self, clock: Clock) -> dict[str, float]:
        """Optimise if it is time to; advance `clock.opt_step`; return the losses and diagnostics
        named in `METRICS` (empty if idle). Diagnostics come from tensors the update computes
        anyway: they never change what it learns."""
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
    return nn.Sequential(*layers)


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
        device = next(net.parameters()).device
        if device.type != "cpu":  # weights on a GPU: one batched forward there, the obs moved once
            self.steps = [lambda x: _forward(net, torch.from_numpy(x).to(device)).cpu().numpy()]
            return
        for module in net:
            if isinstance(module, nn.Linear):
                self.steps.append((module.weight.detach().numpy().T, module.bias.detach().numpy()))
            elif type(module) in self._ACTIVATIONS:
                self.steps.append(self._ACTIVATIONS[type(module)])
            else:
                self.steps = [lambda x, net=net: _forward(net, torch.from_numpy(x)).numpy()]  # e.g. GELU
                return

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
        for step in self.steps:
            x = x @ step[0] + step[1] if isinstance(step, tuple) else step(x)
        return x


@torch.no_grad()
def _forward(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = net(x)
    return out


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A batch from host memory on the device the networks learn on (on the CPU: the same
    tensors, not copies). Memories, rollouts and generators stay on the host (`rlrun.device`)."""
    return {name: value.to(device) for name, value in batch.items()}


def flat_float(obs: torch.Tensor) -> torch.Tensor:
    """A batch of observations as a multi-layer perceptron takes them: one float32 row each (the
    replay memory keeps the env's shape and dtype)."""
    return obs.reshape(len(obs), -1).float()


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


def explained_variance(predicted: np.ndarray, target: np.ndarray) -> float:
    """1 - Var(target - predicted) / Var(target): 1 for a perfect value function, 0 for one no
    better than a constant, negative for worse (NaN when the targets do not vary)."""
    variance = float(np.var(target))
    return math.nan if variance == 0 else 1.0 - float(np.var(target - predicted)) / variance


def obs_size(space: Any) -> int:
    return int(np.prod(space.shape))
