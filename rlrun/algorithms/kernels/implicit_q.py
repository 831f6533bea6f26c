"""The kernel of IQL (for built-in MLPs): its target values and its value network's and critics'
gradient steps by hand (`HandMLP`, the twin critics' `HandCritics`), each operation's gradient as
autograd's formula computes it, with the same kernels: autograd's bits (tests/test_kernels.py).
The actor's step stays autograd's, in the agent (a Gaussian's log-likelihood, one network). The
learner interface of `iql.Autograd`; no arithmetic flag changes what it computes."""

from __future__ import annotations

import torch
from torch import nn

from rlrun.algorithms.kernels.critics import HandCritics
from rlrun.algorithms.kernels.mlp import HandMLP, Workspace, mean_gradient, without_grad
from rlrun.algorithms.optim import apply_gradients
from rlrun.algorithms.sac import Critic
from rlrun.spec import OptimizerSpec


class IQLKernel:
    """IQL's value and critic steps by hand; every pass's hidden layers in one scratch workspace
    (`mlp.Workspace`: no pass's activations are needed past its own backward)."""

    @staticmethod
    def fits(value: nn.Module, critic: Critic) -> bool:
        """Built-in MLPs."""
        return HandMLP.fits(value) and HandCritics.fits(critic)

    def __init__(self, value: nn.Module, critic: Critic, critic_target: Critic) -> None:
        self.scratch: Workspace = {}
        self.value = HandMLP(value)
        self.twins = HandCritics(critic, critic_target, self.scratch)

    @without_grad
    def target_values(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`iql.Autograd.target_values`."""
        return self.twins.target_min(obs, actions), self.value.run(next_obs, self.scratch)[0].squeeze(-1)

    def value_step(
        self,
        obs: torch.Tensor,
        target_q: torch.Tensor,
        expectile: float,
        optimizer: torch.optim.Optimizer,
        spec: OptimizerSpec,
        frame: int,
        max_frame: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`iql.Autograd.value_step`."""
        advantage, loss = self.value_gradients(obs, target_q, expectile)
        apply_gradients(optimizer, self.value.gradients(), spec, frame, max_frame, measured=False)
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
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        target: torch.Tensor,
        optimizer: torch.optim.Optimizer,
        spec: OptimizerSpec,
        frame: int,
        max_frame: int,
    ) -> torch.Tensor:
        """`iql.Autograd.critic_step`: the loss (mse(q1) + mse(q2)) / 2, each error's gradient from 0.5."""
        _, _, loss, grads = self.twins.gradients(obs, actions, target, 0.5)
        apply_gradients(optimizer, grads, spec, frame, max_frame, measured=False)
        return loss
