"""The kernel of IQL (for built-in MLPs): its target values and its value network's, critics' and
actor's gradient steps by hand (`HandMLP`, the twin critics' `HandCritics`), each operation's
gradient as autograd's formula computes it, with the same kernels: autograd's bits
(tests/test_kernels.py, tests/unit/test_offline_hand.py). The learner interface of
`iql.Autograd`; no arithmetic flag changes what it computes."""

from __future__ import annotations

import math

import torch
from torch import nn

from rlrun.algorithms.kernels.critics import HandCritics
from rlrun.algorithms.kernels.mlp import HandMLP, Workspace, mean_gradient, without_grad, zero
from rlrun.algorithms.optim import OptimizerStep
from rlrun.algorithms.sac import LOG_STD_MAX, LOG_STD_MIN, Critic
from rlrun.algorithms.td3bc import TanhPolicy


class IQLKernel:
    """IQL's steps by hand; every pass's hidden layers in one scratch workspace (`mlp.Workspace`:
    no pass's activations are needed past its own backward)."""

    @staticmethod
    def fits(policy: TanhPolicy, value: nn.Module, critic: Critic) -> bool:
        """Built-in MLPs."""
        return HandMLP.fits(policy.body) and HandMLP.fits(value) and HandCritics.fits(critic)

    def __init__(
        self, policy: TanhPolicy, log_std: nn.Parameter | None, value: nn.Module, critic: Critic, critic_target: Critic
    ) -> None:
        """`log_std`: the Gaussian actor's (None for the deterministic one)."""
        self.scratch: Workspace = {}
        self.actor, self.log_std = HandMLP(policy.body), log_std
        self.value = HandMLP(value)
        self.twins = HandCritics(critic, critic_target, self.scratch)

    @without_grad
    def target_values(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`iql.Autograd.target_values`."""
        return self.twins.target_min(obs, actions), self.value.run(next_obs, self.scratch)[0].squeeze(-1)

    def value_step(
        self, obs: torch.Tensor, target_q: torch.Tensor, expectile: float, step: OptimizerStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`iql.Autograd.value_step`."""
        advantage, loss = self.value_gradients(obs, target_q, expectile)
        step.apply(self.value.gradients())
        return advantage, loss

    @without_grad
    def value_gradients(
        self, obs: torch.Tensor, target_q: torch.Tensor, expectile: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The advantages and the expectile loss, its gradients set on the value network's
        parameters."""
        out, saved = self.value.run(obs, self.scratch)
        advantage = target_q - out.squeeze(-1)
        weight = torch.abs(expectile - (advantage < 0).float())
        loss = (weight * advantage.pow(2)).mean()
        # backwards: the mean's 1 / rows; the product's, times its other factor; the square's
        # (PowBackward0: grad · (2 · u¹)); the difference's, negated for V
        grad_square = mean_gradient(loss, obs.shape[0]) * weight
        grad_advantage = grad_square * (2.0 * advantage.pow(1.0))
        self.value.backward_from(saved, (-grad_advantage).unsqueeze(-1), workspace=self.scratch)
        return advantage, loss

    def critic_step(
        self, obs: torch.Tensor, actions: torch.Tensor, target: torch.Tensor, step: OptimizerStep
    ) -> torch.Tensor:
        """`iql.Autograd.critic_step`: the loss (mse(q1) + mse(q2)) / 2, each error's gradient from 0.5."""
        _, _, loss, grads = self.twins.gradients(obs, actions, target, 0.5)
        step.apply(grads)
        return loss

    def actor_step(
        self, obs: torch.Tensor, actions: torch.Tensor, weights: torch.Tensor, step: OptimizerStep
    ) -> torch.Tensor:
        """`iql.Autograd.actor_step`."""
        loss, grads = self.actor_gradients(obs, actions, weights)
        step.apply(grads)
        return loss

    @without_grad
    def actor_gradients(
        self, obs: torch.Tensor, actions: torch.Tensor, weights: torch.Tensor
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The imitation loss and its gradients (set on the actor's parameters, `log_std` last).
        The forward pass is `Normal(mean, std).log_prob(actions)`'s operations, one by one; the
        backward each one's formula, as autograd's engine applies them."""
        out, saved = self.actor.run(obs, self.scratch)
        mean = torch.tanh(out)
        # loss = (weights * imitation).mean(): the mean's 1 / rows, times the weights
        grad_imitation = mean_gradient(mean, obs.shape[0]) * weights
        if self.log_std is None:  # imitation = (mean − a)².sum(-1)
            error = mean - actions
            loss = (weights * error.pow(2).sum(-1)).mean()
            grad_mean = grad_imitation.unsqueeze(-1).expand(error.shape) * (2.0 * error.pow(1.0))
            grads: list[torch.Tensor] = []
        else:
            grad_mean, grad_log_std, loss = self._gaussian(mean, actions, weights, grad_imitation)
            self.log_std.grad, grads = grad_log_std, [grad_log_std]
        self.actor.backward_from(saved, torch.ops.aten.tanh_backward.default(grad_mean, mean), workspace=self.scratch)
        return loss, [*self.actor.gradients(), *grads]

    def _gaussian(
        self, mean: torch.Tensor, actions: torch.Tensor, weights: torch.Tensor, grad_imitation: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The Gaussian's loss and the gradients of its mean and of `log_std`. imitation =
        −log_prob(a).sum(-1), log_prob = −(a − mean)² / (2 var) − log std − log √(2π), the std
        broadcast over the rows (`broadcast_tensors`, whose backward sums the rows)."""
        assert self.log_std is not None
        unclamped = self.log_std.detach()
        std = unclamped.clamp(LOG_STD_MIN, LOG_STD_MAX).exp()
        scale = std.expand(mean.shape)
        error = actions - mean
        squared = -(error**2)
        doubled = 2 * scale**2
        quotient = squared / doubled
        log_prob = quotient - scale.log() - math.log(math.sqrt(2 * math.pi))
        loss = (weights * -log_prob.sum(-1)).mean()
        # backwards: the negated sum's gradient, each column; through the quotient to the error
        # (Div, Neg, Pow, Sub) and to the variance (Div, Mul, Pow), and through the log to the scale
        grad_log_prob = (-grad_imitation).unsqueeze(-1).expand(mean.shape)
        grad_squared = grad_log_prob / doubled
        grad_doubled = -grad_log_prob * ((squared / doubled) / doubled)
        grad_mean = -((-grad_squared) * (2.0 * error.pow(1.0)))
        grad_scale = (grad_doubled * 2) * (2.0 * scale.pow(1.0)) + (-grad_log_prob) / scale
        grad_std = grad_scale.sum([0], keepdim=True).view(std.shape)
        inside = (unclamped >= LOG_STD_MIN).logical_and_(unclamped <= LOG_STD_MAX)
        return grad_mean, torch.where(inside, grad_std * std, zero(std)), loss
