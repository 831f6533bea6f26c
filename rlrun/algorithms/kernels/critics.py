"""Twin critics by hand (`HandMLP`): the two Q-networks over an observation and an action, and
their targets, that SAC, TD3+BC and IQL learn alike (`sac.Critic`). Their targets' smaller value,
and one gradient step's worth of both critics' squared TD errors, each computed as autograd
computes it, with its kernels, so its bits (tests/test_kernels.py over whole trainings). What each
algorithm asks of its critics beyond that (an actor's gradient through them) is its kernel's."""

from __future__ import annotations

from typing import Any

import torch

from rlrun.algorithms.base import mse_loss
from rlrun.algorithms.kernels.mlp import HandMLP, Workspace, made_once, without_grad
from rlrun.algorithms.sac import Critic


class HandCritics:
    """A `sac.Critic` and its target by hand. Every pass writes its hidden layers into `scratch`
    (the kernel's workspace for passes whose activations are not kept past their own backward)."""

    @staticmethod
    def fits(critic: Critic) -> bool:
        """Built-in MLPs (`HandMLP.fits`)."""
        return HandMLP.fits(critic.q1) and HandMLP.fits(critic.q2)

    def __init__(self, critic: Critic, critic_target: Critic, scratch: Workspace, **kinds: Any) -> None:
        """`kinds`: `HandMLP`'s `narrow` and `bf16`, as the run's arithmetic sets them."""
        self.critics = (HandMLP(critic.q1, **kinds), HandMLP(critic.q2, **kinds))
        self.targets = (HandMLP(critic_target.q1, **kinds), HandMLP(critic_target.q2, **kinds))
        self.scratch = scratch

    @without_grad
    def target_min(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """`torch.min(*critic_target(obs, action))`: the smaller target value of each row."""
        inputs = torch.cat([obs, action], dim=-1)
        q1 = self.targets[0].run(inputs, self.scratch)[0].squeeze(-1)
        q2 = self.targets[1].run(inputs, self.scratch)[0].squeeze(-1)
        return torch.min(q1, q2)

    @without_grad
    def gradients(
        self, obs: torch.Tensor, action: torch.Tensor, target: torch.Tensor, scale: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Both critics' values of `action`, the loss `scale` (mse(q1, target) + mse(q2, target)),
        and its gradients, set on the critics' parameters (in `Critic.parameters()` order). `scale`
        is what autograd's chain hands each mean squared error: 1 for a plain sum, 0.5 for half of
        it (whether written 0.5 · sum or sum / 2: the same number)."""
        inputs = torch.cat([obs, action], dim=-1)
        weight: torch.Tensor = made_once(
            ("scale", scale, target.dtype, target.device), lambda: target.new_ones(()) * scale
        )
        values = []
        for hand in self.critics:  # each one's backward needs only its own value: one after the other
            out, saved = hand.run(inputs, self.scratch)
            q = out.squeeze(-1)
            grad = torch.ops.aten.mse_loss_backward.default(weight, q, target, 1).unsqueeze(-1)
            hand.backward_from(saved, grad, workspace=self.scratch)
            values.append(q)
        q1, q2 = values
        loss = mse_loss(q1, target) + mse_loss(q2, target)
        loss = loss if scale == 1 else scale * loss
        return q1, q2, loss, [*self.critics[0].gradients(), *self.critics[1].gradients()]
