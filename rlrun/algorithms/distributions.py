"""Policies over discrete action spaces: a categorical (Discrete), a product of independent
categoricals (MultiDiscrete: Stable-Baselines3's MultiCategoricalDistribution) and a product of
independent Bernoullis (MultiBinary: its BernoulliDistribution).

The network outputs one logit per choice (the MultiDiscrete's components' side by side); a
joint action's log-probability and entropy are the sums over its components. Acting is NumPy (the
network's output from `Fast`), learning torch. Sampling draws uniform numbers from the agent's
generator, so a policy's draws are a pure function of that generator's state. Probabilities are
computed directly, without `torch.distributions`, which costs more than the network at these sizes.

For continuous actions with gSDE (`agent.sde`), `StateDependentNoise`: Stable-Baselines3's
`StateDependentNoiseDistribution` over the actor's latent features.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional

from rlrun.algorithms.base import log_softmax, sample_categorical
from rlrun.spec.agents.onpolicy import SdeSpec

_LOG_2PI = math.log(2 * math.pi)


class Policy(Protocol):
    outputs: int
    """Network outputs (logits) the policy reads."""
    shape: tuple[int, ...]
    """One action as rollouts and episodes keep it (int64)."""

    def sample(self, out: np.ndarray, generator: torch.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Sampled actions and their log-probabilities."""
        ...

    def greedy(self, out: np.ndarray) -> np.ndarray: ...

    def evaluate(
        self, out: torch.Tensor, actions: torch.Tensor, *, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probabilities of `actions` (with gradients) and, if asked, each row's entropy."""
        ...

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """A batch of actions as the (vector) env takes them."""
        ...

    def from_env(self, actions: np.ndarray) -> np.ndarray:
        """A batch of the env's actions as the policy draws them (`to_env` undone)."""
        ...

    def greedy_graph(self) -> nn.Module:
        """`greedy` then `to_env` as torch, for an actor's `graph`: logits in, the env's actions out."""
        ...


def policy_for(space: spaces.Space[Any]) -> Policy:
    """The policy over `space`'s actions (Discrete, MultiDiscrete or MultiBinary)."""
    if isinstance(space, spaces.Discrete):
        return Categorical(int(space.n))
    if isinstance(space, spaces.MultiDiscrete):
        return MultiCategorical(space)
    if isinstance(space, spaces.MultiBinary):
        return Bernoulli(space)
    raise ValueError(f"no discrete policy over {space}")  # rlrun.spec.spaces refuses it before


class Categorical:
    outputs: int
    shape: tuple[int, ...]

    def __init__(self, n: int) -> None:
        self.outputs, self.shape = n, ()

    def sample(self, out: np.ndarray, generator: torch.Generator) -> tuple[np.ndarray, np.ndarray]:
        log_probs = log_softmax(out)
        actions = sample_categorical(log_probs, generator)
        return actions, log_probs[np.arange(len(actions)), actions]

    def greedy(self, out: np.ndarray) -> np.ndarray:
        return out.argmax(axis=-1)

    def evaluate(
        self, out: torch.Tensor, actions: torch.Tensor, *, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        all_log_probs = torch.log_softmax(out, dim=-1)
        log_probs = all_log_probs.gather(-1, actions[..., None].long()).squeeze(-1)
        return log_probs, -(all_log_probs.exp() * all_log_probs).sum(dim=-1) if entropy else None

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return actions

    def from_env(self, actions: np.ndarray) -> np.ndarray:
        return actions

    def greedy_graph(self) -> nn.Module:
        return GreedyGraph(lambda out: out.argmax(dim=-1), (), np.dtype(np.int64))


class MultiCategorical:
    """One categorical per component of a MultiDiscrete space (of any shape), drawn in order."""

    outputs: int
    shape: tuple[int, ...]

    def __init__(self, space: spaces.MultiDiscrete) -> None:
        self.sizes = [int(n) for n in space.nvec.ravel()]
        self.start = np.asarray(space.start).ravel().astype(np.int64)
        self.env_shape, self.env_dtype = space.shape, space.dtype
        self.outputs, self.shape = sum(self.sizes), (len(self.sizes),)
        self.splits = np.cumsum(self.sizes)[:-1]

    def sample(self, out: np.ndarray, generator: torch.Generator) -> tuple[np.ndarray, np.ndarray]:
        actions, total = [], np.zeros(len(out), dtype=out.dtype)
        for logits in np.split(out, self.splits, axis=-1):
            log_probs = log_softmax(logits)
            chosen = sample_categorical(log_probs, generator)
            actions.append(chosen)
            total += log_probs[np.arange(len(chosen)), chosen]
        return np.stack(actions, axis=-1), total

    def greedy(self, out: np.ndarray) -> np.ndarray:
        return np.stack([logits.argmax(axis=-1) for logits in np.split(out, self.splits, axis=-1)], axis=-1)

    def evaluate(
        self, out: torch.Tensor, actions: torch.Tensor, *, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        all_log_probs = [torch.log_softmax(logits, dim=-1) for logits in out.split(self.sizes, dim=-1)]
        log_probs = torch.stack(
            [lp.gather(-1, actions[..., i, None].long()).squeeze(-1) for i, lp in enumerate(all_log_probs)]
        ).sum(dim=0)
        if not entropy:
            return log_probs, None
        return log_probs, torch.stack([-(lp.exp() * lp).sum(dim=-1) for lp in all_log_probs]).sum(dim=0)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return (actions + self.start).reshape(len(actions), *self.env_shape).astype(self.env_dtype)

    def from_env(self, actions: np.ndarray) -> np.ndarray:
        return actions.reshape(len(actions), -1).astype(np.int64) - self.start

    def greedy_graph(self) -> nn.Module:
        sizes = self.sizes

        def choose(out: torch.Tensor) -> torch.Tensor:
            return torch.stack([part.argmax(dim=-1) for part in out.split(sizes, dim=-1)], dim=-1)

        return GreedyGraph(choose, self.env_shape, self.env_dtype, start=self.start)


class Bernoulli:
    """One independent bit per element of a MultiBinary space (of any shape): 1 with probability
    sigmoid(logit)."""

    outputs: int
    shape: tuple[int, ...]

    def __init__(self, space: spaces.MultiBinary) -> None:
        self.env_shape, self.env_dtype = space.shape, space.dtype
        self.outputs = int(np.prod(space.shape))
        self.shape = (self.outputs,)

    def sample(self, out: np.ndarray, generator: torch.Generator) -> tuple[np.ndarray, np.ndarray]:
        uniform = torch.rand(out.shape, generator=generator, dtype=torch.float64).numpy()
        logits = out.astype(np.float64)
        actions = (uniform < 1.0 / (1.0 + np.exp(-logits))).astype(np.int64)
        log_probs = -np.logaddexp(0.0, np.where(actions == 1, -logits, logits)).sum(axis=-1)
        return actions, log_probs.astype(out.dtype)

    def greedy(self, out: np.ndarray) -> np.ndarray:
        return (out > 0).astype(np.int64)

    def evaluate(
        self, out: torch.Tensor, actions: torch.Tensor, *, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        log_one, log_zero = functional.logsigmoid(out), functional.logsigmoid(-out)
        taken = actions.to(out.dtype)
        log_probs = (taken * log_one + (1 - taken) * log_zero).sum(dim=-1)
        if not entropy:
            return log_probs, None
        return log_probs, -(log_one.exp() * log_one + log_zero.exp() * log_zero).sum(dim=-1)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return actions.reshape(len(actions), *self.env_shape).astype(self.env_dtype)

    def from_env(self, actions: np.ndarray) -> np.ndarray:
        return actions.reshape(len(actions), -1).astype(np.int64)

    def greedy_graph(self) -> nn.Module:
        return GreedyGraph(lambda out: (out > 0).to(torch.int64), self.env_shape, self.env_dtype)


class GreedyGraph(nn.Module):
    """A discrete policy's greedy action as the env takes it, in torch (`Policy.greedy_graph`):
    `choose` from the logits, plus each component's `start` (a MultiDiscrete's), then the env's
    shape and dtype."""

    def __init__(
        self,
        choose: Callable[[torch.Tensor], torch.Tensor],
        env_shape: tuple[int, ...],
        env_dtype: Any,
        start: np.ndarray | None = None,
    ) -> None:
        super().__init__()
        self.choose, self.env_shape = choose, tuple(env_shape)
        self.env_dtype = torch.from_numpy(np.zeros(0, env_dtype)).dtype
        self.start: torch.Tensor | None
        self.register_buffer("start", None if start is None else torch.from_numpy(np.asarray(start, np.int64)))

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        chosen = self.choose(out) if self.start is None else self.choose(out) + self.start
        return chosen.reshape(out.shape[0], *self.env_shape).to(self.env_dtype)


class StateDependentNoise(nn.Module):
    """gSDE (Raffin et al., 2021) as Stable-Baselines3's `StateDependentNoiseDistribution`: an
    action is `mean + latent @ matrix`, `latent` the actor's last hidden features, `matrix` (latent,
    actions) drawn from N(0, std²) per entry and held between draws, one per env copy. Given the
    latent, the action is Gaussian with variance `latent² @ std²` (plus SB3's 1e-6), which gives its
    log-probability and entropy. `log_std` is learnt; the matrices are the agent's state. With
    `learn_features` (SB3's default for SAC, not for PPO) the noise trains the latent features too;
    without, they are detached when learning."""

    EPSILON = 1e-6

    def __init__(
        self, latent: int, outputs: int, spec: SdeSpec, log_std_init: float, *, learn_features: bool = False
    ) -> None:
        super().__init__()
        self.spec, self.latent, self.outputs = spec, latent, outputs
        self.learn_features = learn_features
        self.log_std = nn.Parameter(torch.full((latent, outputs if spec.full_std else 1), log_std_init))

    def trained(self, latent: torch.Tensor) -> torch.Tensor:
        """The latent features as the noise's terms see them: detached unless it learns them."""
        return latent if self.learn_features else latent.detach()

    def std(self) -> torch.Tensor:
        """The matrix's standard deviations (latent, outputs), SB3's `get_std`."""
        log_std = self.log_std
        if self.spec.use_expln:  # exp below 0, log1p above: the std grows slowly past 1
            above = log_std > 0
            std = torch.where(above, torch.log1p(log_std * above + self.EPSILON) + 1.0, torch.exp(log_std))
        else:
            std = torch.exp(log_std)
        return std if self.spec.full_std else std.expand(self.latent, self.outputs)

    def draw_matrices(self, batch: int, generator: torch.Generator) -> np.ndarray:
        """`batch` exploration matrices (batch, latent, outputs) from N(0, std²), SB3's `sample_weights`."""
        std = self.std().detach().cpu().numpy()
        return std * torch.randn((batch, self.latent, self.outputs), generator=generator).numpy()

    def sample(self, latent: np.ndarray, mean: np.ndarray, matrices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Actions (unclipped) for each row's latent features with its own matrix, and their
        log-probabilities (NumPy, for acting)."""
        noise = np.einsum("bi,bio->bo", latent, matrices)
        std = self.std().detach().cpu().numpy()
        scale = np.sqrt((latent**2) @ (std**2) + self.EPSILON)
        log_scale = np.log(scale)
        z = noise / scale
        return mean + noise, (-0.5 * z**2 - log_scale - 0.5 * _LOG_2PI).sum(-1)

    def evaluate(
        self, latent: torch.Tensor, mean: torch.Tensor, actions: torch.Tensor, *, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probabilities of `actions` and (if asked) the entropies, with gradients into `mean`
        and `log_std`, and into the latent features only with `learn_features`."""
        variance = self.trained(latent).pow(2) @ self.std().pow(2)
        log_scale = 0.5 * torch.log(variance + self.EPSILON)
        z = (actions - mean) * torch.exp(-log_scale)
        log_probs = (-0.5 * z.pow(2) - log_scale - 0.5 * _LOG_2PI).sum(dim=-1)
        entropies = (0.5 + 0.5 * _LOG_2PI + log_scale).sum(dim=-1) if entropy else None
        return log_probs, entropies
