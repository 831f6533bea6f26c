"""The kernel of SAC (for built-in MLPs): the critics' and the actor's gradient steps by hand
(`HandMLP`), and the temperature's, each operation's gradient as autograd's formula computes it,
with the same kernels: autograd's bits at arithmetic revision 1 (tests/unit/test_sac_hand.py,
tests/test_kernels.py). From revision 2 its products with a narrow side are formed the other way
round (`narrow_products_wide_first`), from 3 its wide ones in bfloat16 (`bf16_wide_products`): the
same update, rounded differently. The learner interface of `sac.Autograd`."""

from __future__ import annotations

import numpy as np
import torch

from rlrun.algorithms.kernels.critics import HandCritics
from rlrun.algorithms.kernels.mlp import HandMLP, Workspace, made_once, mean_gradient, without_grad, zero
from rlrun.algorithms.optim import OptimizerStep
from rlrun.algorithms.sac import LOG_STD_MAX, LOG_STD_MIN, Actor, Critic, SdeActor, Squashed, sample_squashed, squash
from rlrun.arithmetic import Arithmetic


@without_grad
def squashed_backward(sample: Squashed, grad_log_prob: torch.Tensor, grad_action: torch.Tensor) -> torch.Tensor:
    """The gradient of the actor's output `out` given those of `sample`'s `log_prob` and of its
    `action` from elsewhere (the critics): each of autograd's backward formulas for the operations of
    `sample_squashed`, with its kernels, in its order, so its bits (tests/unit/test_sac_hand.py).
    A value used twice gets its two gradients summed, which is exact in either order."""
    # the negated gradient of log_prob, per action dimension: the Sub's and the Sum's backward,
    # formed once for its two uses (a negation is exact, wherever it is taken)
    negated = (-grad_log_prob).unsqueeze(-1).expand(sample.action.shape)
    # log_prob = gaussian - log(squeeze).sum(-1), squeeze = 1 - action.pow(2) + 1e-6
    grad_squeeze = negated.div(sample.squeeze)  # Sub, Sum, Log
    grad_action = grad_action + (-grad_squeeze) * (2.0 * sample.action.pow(1.0))  # Rsub, Pow
    grad_raw = torch.ops.aten.tanh_backward.default(grad_action, sample.action)  # action = tanh(raw)
    # raw = mean + std * noise, std = log_std.exp(); gaussian = (... - log_std - ...).sum(-1)
    grad_log_std = grad_raw * sample.noise * sample.std + negated
    inside = (sample.unclamped >= LOG_STD_MIN).logical_and_(sample.unclamped <= LOG_STD_MAX)
    grad_log_std = torch.where(inside, grad_log_std, zero(grad_raw))
    return torch.cat([grad_raw, grad_log_std], dim=-1)  # chunk's backward


def temperature_gradient(log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """The gradient of the temperature's loss `-(log_alpha * (log_prob + target_entropy)).mean()`
    with respect to `log_alpha` (a number), as autograd computes it: the mean's backward gives
    each row -1/n (a float32 quotient), the product's multiplies it by its factor, and the
    broadcast's backward sums the rows (`sum_to`: a sum over the first dimension). The same
    kernels, so the same bits (tests/unit/test_sac_hand.py), without a graph for one number."""
    rows = (log_prob + target_entropy).mul_(float(np.float32(-1.0) / np.float32(log_prob.shape[0])))
    return rows.sum([0], keepdim=True).squeeze(0)


class SoftActorCriticKernel:
    """The critics' and the actor's gradient steps by hand, for built-in MLPs (`HandMLP`): each
    operation's gradient as autograd's formula for it computes it, with the same kernels, so the
    same bits (tests/unit/test_sac_hand.py), without recording and walking a graph of some eighty
    nodes per step.

    Their hidden layers go into kept buffers (`mlp.Workspace`): one scratch workspace for
    every pass whose activations are not kept past its own backward (the targets', each critic's
    in its step, taken one after the other, and every backward), and one each for the three whose
    activations the actor's backward needs at once."""

    @staticmethod
    def fits(actor: Actor, critic: Critic) -> bool:
        """Built-in MLPs, and an actor whose network outputs its Gaussian's mean and log std (not
        gSDE's, whose noise is state-dependent: autograd's)."""
        return not isinstance(actor, SdeActor) and HandMLP.fits(critic.q1) and HandMLP.fits(critic.q2)

    def __init__(self, actor: Actor, critic: Critic, critic_target: Critic, *, arithmetic: Arithmetic) -> None:
        """`arithmetic`'s `narrow_products_wide_first`: products with a narrow side are formed the
        faster way round (`HandMLP`'s `narrow`), the same update rounded differently; its
        `bf16_wide_products`: the wide products take bfloat16 operands (`HandMLP`'s `bf16`)."""
        kinds = {"narrow": arithmetic.narrow_products_wide_first, "bf16": arithmetic.bf16_wide_products}
        self.actor = HandMLP(actor.body, **kinds)
        self.scratch: Workspace = {}
        self.twins = HandCritics(critic, critic_target, self.scratch, **kinds)
        self.critics = self.twins.critics
        self.kept: tuple[Workspace, Workspace, Workspace] = ({}, {}, {})  # the actor's, each critic's

    @staticmethod
    def _mean_gradients(loss: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The mean's backward (1 / rows, each row), its negation (the minimum's gradient) and half
        that (a tie's share), as the actor's backward computes them."""

        def make() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            grad = mean_gradient(loss, rows)
            grad_min = -grad
            return grad, grad_min, grad_min / 2

        key = ("mean, its minimum's", rows, loss.dtype, loss.device)
        made: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = made_once(key, make)
        return made

    def target_values(self, next_obs: torch.Tensor, generator: torch.Generator, alpha: float) -> torch.Tensor:
        """The soft value of the next observations: the smaller target critic's value of an action
        the actor samples there, less alpha times its log-probability (no gradient)."""
        next_action, next_log_prob = squash(self.actor.run(next_obs, self.scratch)[0], generator)
        return self.twins.target_min(next_obs, next_action) - alpha * next_log_prob

    def critic_step(
        self, obs: torch.Tensor, action: torch.Tensor, target: torch.Tensor, step: OptimizerStep
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`sac.Autograd.critic_step`: both critics' values of the replayed actions and their loss,
        after a step down it."""
        q1, q2, loss, grads = self.critic_gradients(obs, action, target)
        step.apply(grads)
        return q1, q2, loss

    def actor_step(
        self, obs: torch.Tensor, generator: torch.Generator, alpha: float, step: OptimizerStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`sac.Autograd.actor_step`: the actor's loss and its sampled actions' log-probabilities,
        after a step down it."""
        loss, log_prob, grads = self.actor_loss(obs, generator, alpha)
        step.apply(grads)
        return loss, log_prob

    @staticmethod
    def temperature_step(
        log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float, step: OptimizerStep
    ) -> None:
        """`sac.Autograd.temperature_step`: a step of the temperature down its loss."""
        log_alpha.grad = temperature_gradient(log_prob, target_entropy)
        step.apply([log_alpha.grad])

    @without_grad
    def critic_gradients(
        self, obs: torch.Tensor, action: torch.Tensor, target: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Both critics' values of the replayed actions, the critics' loss, and its gradients (set
        on the critics' parameters, in `Critic.parameters()` order)."""
        return self.twins.gradients(obs, action, target, 0.5)  # the loss 0.5 (mse(q1) + mse(q2))

    @without_grad
    def actor_loss(
        self, obs: torch.Tensor, generator: torch.Generator, alpha: float
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The actor's loss, its sampled actions' log-probabilities, and its gradients (set on the
        actor's parameters). The critics' weights get none (they would be computed, then thrown
        away, by the next critic step): the gradient flows through them to the actions only. Each
        gradient is autograd's formula for the operation, with its kernels: its bits."""
        out, saved = self.actor.run(obs, self.kept[0])
        sample = sample_squashed(out, generator)
        inputs = torch.cat([obs, sample.action], dim=-1)
        out1, saved1 = self.critics[0].run(inputs, self.kept[1])
        out2, saved2 = self.critics[1].run(inputs, self.kept[2])
        q1, q2 = out1.squeeze(-1), out2.squeeze(-1)
        loss = (alpha * sample.log_prob - torch.min(q1, q2)).mean()
        # loss = (alpha * log_prob - minimum(q1, q2)).mean(), backwards
        grad, grad_min, grad_tied = self._mean_gradients(loss, obs.shape[0])
        grad_log_prob = grad * alpha
        tie = q1 == q2
        grad_q1 = torch.where(tie, grad_tied, grad_min).masked_fill_(q1 > q2, 0)
        grad_q2 = torch.where(tie, grad_tied, grad_min).masked_fill_(q1 < q2, 0)
        actions = slice(obs.shape[-1], None)  # the cat's backward: the inputs' gradient for the actions
        grad_in1 = self.critics[0].backward_from(
            saved1, grad_q1.unsqueeze(-1), params=False, inputs=True, workspace=self.scratch, input_columns=actions
        )
        grad_in2 = self.critics[1].backward_from(
            saved2, grad_q2.unsqueeze(-1), params=False, inputs=True, workspace=self.scratch, input_columns=actions
        )
        assert grad_in1 is not None and grad_in2 is not None
        grad_action = grad_in1 + grad_in2
        self.actor.backward_from(saved, squashed_backward(sample, grad_log_prob, grad_action), workspace=self.scratch)
        return loss, sample.log_prob, self.actor.gradients()
