"""What DQN's family shares, on transitions (`dqn`) and on sequences (`r2d2`): dueling heads,
exploration over Q-values, and the TD target and loss, each written once, in autograd's form (a
kernel that computes the same step by hand lives in `rlrun.algorithms.kernels.q_network`); and
the memoryless agent's learner (`Autograd`) and actor (`QActor`, `QGraph`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from rlrun.algorithms.base import ActingGraph, Fast, log_softmax, mse_loss, sample_categorical, step_means
from rlrun.algorithms.optim import flushing_subnormals, optimise
from rlrun.spec import OptimizerSpec
from rlrun.spec.agents.dqn import Config

STEP_STATS = ("loss", "q_mean", "td_error", "grad_norm")
"""A gradient step's diagnostics (`step_stats`)."""
StepTensors = tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]
"""A gradient step's loss (None: not formed), Q-values of the actions taken, targets, gradient norm."""

LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    # each loss, functional's kernel mean-reduced (1; `.default`: the overload itself, which the
    # packet `torch.ops.aten.x` would look up on every call); taken and target have the same
    # shape, so functional's broadcasting checks have nothing to do
    "huber": lambda taken, target: torch.ops.aten.smooth_l1_loss.default(taken, target, 1, 1.0),
    "mse": mse_loss,
}
SAMPLE_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    # each loss per sample (reduction 0: none), for weighted and masked means
    "huber": lambda taken, target: torch.ops.aten.smooth_l1_loss.default(taken, target, 0, 1.0),
    "mse": lambda taken, target: torch.ops.aten.mse_loss.default(taken, target, 0),
}


def td_target(
    rewards: torch.Tensor,
    discounts: torch.Tensor | float,
    terminated: torch.Tensor,
    next_q: torch.Tensor,
    online_next_q: torch.Tensor | None = None,
    rescaled: bool = False,
) -> torch.Tensor:
    """r + γ·(1 − terminated)·Q_target(s', a'), a' the target network's best action, or the online
    network's (`online_next_q`: double DQN); no bootstrap past a terminal state. With n-step
    returns r is a window's discounted rewards, s' its last next observation and γ its discount
    (gamma^n, or less where the window was cut); at n_step 1, gamma itself (a number).
    `rescaled` (R2D2's value rescaling): the Q-values are h's, so the target is
    h(r + γ·(1 − terminated)·h⁻¹(Q_target(s', a')))."""
    if online_next_q is None:
        next_value = next_q.max(dim=-1).values
    else:
        next_value = next_q.gather(-1, online_next_q.argmax(dim=-1, keepdim=True)).squeeze(-1)
    if rescaled:
        return rescale(rewards + discounts * (1.0 - terminated) * unrescale(next_value))
    return rewards + discounts * (1.0 - terminated) * next_value


RESCALING_EPSILON = 1e-3
"""R2D2's ε in h: the small linear term that keeps h⁻¹ Lipschitz (Pohlen et al., 2018)."""


def rescale(x: torch.Tensor) -> torch.Tensor:
    """h(x) = sign(x)(√(|x| + 1) − 1) + εx: returns squashed towards a square root's scale."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + RESCALING_EPSILON * x


def unrescale(x: torch.Tensor) -> torch.Tensor:
    """h⁻¹(x) = sign(x)(((√(1 + 4ε(|x| + 1 + ε)) − 1) / 2ε)² − 1), h's exact inverse."""
    eps = RESCALING_EPSILON
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root * root - 1.0)


def td_loss(
    taken: torch.Tensor,
    target: torch.Tensor,
    kind: str,
    weights: torch.Tensor | None = None,
    learnt: torch.Tensor | None = None,
) -> torch.Tensor:
    """The TD loss (`kind`: huber or mse) of the Q-values of the actions taken against their
    targets: the mean, each sample weighed by `weights` (prioritised replay's importance) if given;
    over sequences, the mean over the steps `learnt` from."""
    if learnt is not None:
        losses = SAMPLE_LOSSES[kind](taken, target) * learnt
        if weights is not None:
            losses = losses * weights
        return losses.sum() / learnt.sum().clamp(min=1)
    if weights is None:
        return LOSSES[kind](taken, target)
    return (weights * SAMPLE_LOSSES[kind](taken, target)).mean()


def step_stats(steps: list[StepTensors], kind: str, device: torch.device) -> dict[str, float]:
    """The `STEP_STATS`, each the mean over an update's gradient steps (`steps`: each one's loss,
    None where the step did not need it, replayed Q-values, TD targets and gradient norm)."""
    with flushing_subnormals(device):  # where the steps formed them, before the stats were deferred
        rows = [
            torch.stack(
                [
                    td_loss(taken, target, kind) if loss is None else loss,
                    taken.mean(),
                    (taken - target).abs().mean(),
                    grad_norm,
                ]
            )
            for loss, taken, target, grad_norm in steps
        ]
    return step_means(STEP_STATS, rows)


class Dueling(nn.Module):
    """Dueling heads (Wang et al., 2016, eq. 9) over a network with one output more than there are
    actions: the first is the state's value V, the others the advantages A, and
    Q = V + (A − mean(A)). The torso and both heads are the network's own (for the built-ins, one
    linear layer whose first row is V's head)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.aggregate(self.net(obs))

    @staticmethod
    def aggregate(out: torch.Tensor) -> torch.Tensor:
        """V + (A − mean(A)) from heads `out` (V, then A, along the last axis)."""
        value, advantage = out[..., :1], out[..., 1:]
        return value + (advantage - advantage.mean(dim=-1, keepdim=True))


def aggregate(out: np.ndarray) -> np.ndarray:
    """`Dueling.aggregate` in NumPy, for acting."""
    value, advantage = out[:, :1], out[:, 1:]
    return value + (advantage - advantage.mean(axis=-1, keepdims=True))


class Exploration:
    """Epsilon-greedy or Boltzmann over Q-values, at the schedules' values for `frame()` (the
    agent's last update's)."""

    def __init__(self, config: Config, actions: int, max_frame: int, frame: Callable[[], int]) -> None:
        self.config, self.actions, self.max_frame, self.frame = config, actions, max_frame, frame

    def choose(self, count: int, values: Callable[[], np.ndarray], g: torch.Generator) -> np.ndarray:
        """Exploring actions for `count` observations whose Q-values `values` gives, drawn from `g`."""
        config, frame = self.config, self.frame()
        if config.exploration == "boltzmann":
            temperature = config.temperature.value(frame, self.max_frame)
            return sample_categorical(log_softmax(values() / temperature), g)
        epsilon = config.epsilon.value(frame, self.max_frame)
        explore = torch.rand(count, generator=g).numpy() < epsilon
        random_actions = torch.randint(self.actions, (count,), generator=g).numpy()
        if explore.all():  # no copy reads its Q-values: skip the forward pass (the draws are the same)
            return random_actions
        return np.where(explore, random_actions, values().argmax(axis=-1))


class Autograd:
    """Autograd's learner, for every network: the Q-networks' forward passes, and one gradient
    step down the TD loss (a kernel, `kernels.q_network.QKernel`, computes the same by hand)."""

    def __init__(self, q: nn.Module, target: nn.Module) -> None:
        self.q, self.target = q, target

    def values(self, obs: torch.Tensor, *, target: bool) -> torch.Tensor:
        """The target network's Q-values of `obs` (`target`), or the online network's."""
        out: torch.Tensor = (self.target if target else self.q)(obs)
        return out

    def step(
        self,
        obs: torch.Tensor,
        chosen: torch.Tensor,
        target: torch.Tensor,
        loss: str,
        optimizer: torch.optim.Optimizer,
        spec: OptimizerSpec,
        frame: int,
        max_frame: int,
        weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """One gradient step on a batch (observations, the actions taken as a column, their TD
        targets, prioritised replay's importance weights); the loss, the Q-values of the actions
        taken and the gradient norm."""
        with torch.enable_grad():
            taken = self.q(obs).gather(1, chosen).squeeze(1)
            value = td_loss(taken, target, loss, weights)
            grad_norm = optimise(optimizer, value, spec, frame, max_frame)
        return value.detach(), taken.detach(), grad_norm


class QActor:
    """How a memoryless DQN plays (`base.Actor`): its Q-values by NumPy where `Fast` can (a few
    observations a step), explored (`Exploration`) with the caller's generator, or greedy."""

    state_shape: tuple[int, ...] | None = None

    def __init__(self, q: nn.Module, exploration: Exploration, *, cnn: bool) -> None:
        self.q, self.exploration, self.cnn = q, exploration, cnn
        heads = Fast(q.net if isinstance(q, Dueling) else q)
        self.values = (lambda obs: aggregate(heads(obs))) if isinstance(q, Dueling) else heads

    def initial_state(self, batch: int) -> None:
        return None

    def step(
        self, obs: np.ndarray, state: None, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> tuple[np.ndarray, None]:
        if deterministic:
            return self.values(obs).argmax(axis=-1), None
        if generator is None:
            raise ValueError("an actor draws its exploring actions from the caller's generator: pass one")
        return self.exploration.choose(len(obs), lambda: self.values(obs), generator), None

    def graph(self) -> ActingGraph:
        return QGraph(self.q, cnn=self.cnn).eval()


class QGraph(ActingGraph):
    """A memoryless Q-network's greedy path: the greedy action (int64) and the Q-values. The CNN
    takes the frames as they are (it scales them itself), the others float32 rows (as `Fast`)."""

    outputs = ("action", "q_values")

    def __init__(self, q: nn.Module, *, cnn: bool) -> None:
        super().__init__()
        self.q, self.cnn = q, cnn

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = observation if self.cnn else observation.to(torch.float32).reshape(observation.shape[0], -1)
        q: torch.Tensor = self.q(rows)
        return q.argmax(dim=-1), q
