"""The kernel of TD3+BC (for built-in MLPs): its target values and its critics' and actor's gradient
steps by hand (`HandMLP`, the twin critics' `HandCritics`), each operation's gradient as autograd's
formula computes it, with the same kernels: autograd's bits (tests/test_kernels.py). The learner
interface of `td3bc.Autograd`; no arithmetic flag changes what it computes."""

from __future__ import annotations

import torch

from rlrun.algorithms.base import mse_loss
from rlrun.algorithms.kernels.critics import HandCritics
from rlrun.algorithms.kernels.mlp import HandMLP, Workspace, made_once, without_grad
from rlrun.algorithms.optim import OptimizerStep
from rlrun.algorithms.sac import Critic
from rlrun.algorithms.td3bc import TanhPolicy


class TD3BCKernel:
    """TD3+BC's steps by hand, without recording and walking a graph of some forty nodes per step.
    Hidden layers go into kept buffers (`mlp.Workspace`): one scratch workspace for the passes
    whose activations are not kept past their own backward, and one each for the actor's and the
    first critic's in the actor's step, whose backward needs both at once."""

    @staticmethod
    def fits(policy: TanhPolicy, critic: Critic) -> bool:
        """Built-in MLPs."""
        return HandMLP.fits(policy.body) and HandCritics.fits(critic)

    def __init__(self, policy: TanhPolicy, policy_target: TanhPolicy, critic: Critic, critic_target: Critic) -> None:
        self.scratch: Workspace = {}
        self.actor, self.actor_target = HandMLP(policy.body), HandMLP(policy_target.body)
        self.twins = HandCritics(critic, critic_target, self.scratch)
        self.kept: tuple[Workspace, Workspace] = ({}, {})  # the actor's and the first critic's, in the actor's step

    @without_grad
    def target_values(self, next_obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """`td3bc.Autograd.target_values`."""
        next_actions = torch.tanh(self.actor_target.run(next_obs, self.scratch)[0]) + noise
        return self.twins.target_min(next_obs, next_actions.clamp(-1.0, 1.0))

    def critic_step(
        self, obs: torch.Tensor, actions: torch.Tensor, target: torch.Tensor, step: OptimizerStep
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`td3bc.Autograd.critic_step`: the loss mse(q1) + mse(q2), a plain sum (each error's
        gradient from 1)."""
        q1, q2, loss, grads = self.twins.gradients(obs, actions, target, 1.0)
        step.apply(grads)
        return q1, q2, loss

    def actor_step(
        self, obs: torch.Tensor, actions: torch.Tensor, alpha: float, step: OptimizerStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`td3bc.Autograd.actor_step`."""
        loss, bc_loss, grads = self.actor_gradients(obs, actions, alpha)
        step.apply(grads)
        return loss, bc_loss

    @without_grad
    def actor_gradients(
        self, obs: torch.Tensor, actions: torch.Tensor, alpha: float
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The actor's loss, its behaviour-cloning term, and its gradients (set on the actor's
        parameters). The critic's weights get none: the gradient flows through Q1 to the actions."""
        out, saved = self.actor.run(obs, self.kept[0])
        pi = torch.tanh(out)
        q1 = self.twins.critics[0]
        q_out, q_saved = q1.run(torch.cat([obs, pi], dim=-1), self.kept[1])
        q = q_out.squeeze(-1)
        lmbda = alpha / q.abs().mean()
        bc_loss = mse_loss(pi, actions)
        weighted = -lmbda
        loss = weighted * q.mean() + bc_loss
        # backwards: the sum hands 1 to each term; the product hands the mean −λ (1 · −λ), the
        # mean −λ / rows to each row (MeanBackward0: the expanded gradient over numel)
        rows = obs.shape[0]
        grad_q = (weighted.expand(rows) / rows).unsqueeze(-1)
        columns = slice(obs.shape[-1], None)  # the cat's backward: the inputs' gradient for the actions
        grad_pi = q1.backward_from(
            q_saved, grad_q, params=False, inputs=True, workspace=self.scratch, input_columns=columns
        )
        assert grad_pi is not None
        one: torch.Tensor = made_once(("one", pi.dtype, pi.device), lambda: pi.new_ones(()))
        grad_pi = grad_pi + torch.ops.aten.mse_loss_backward.default(one, pi, actions, 1)  # pi's two uses, summed
        grad_out = torch.ops.aten.tanh_backward.default(grad_pi, pi)
        self.actor.backward_from(saved, grad_out, workspace=self.scratch)
        return loss, bc_loss, self.actor.gradients()
