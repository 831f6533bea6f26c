"""The kernel of an on-policy actor-critic (A2C's and PPO's losses, for built-in MLP heads): the
gradient of the loss, derived by hand.

At classic-control sizes autograd's bookkeeping (recording some forty nodes on the forward pass,
then walking them one by one) took longer than all the arithmetic of an A2C update. As DQN's and
SAC's kernels do (`mlp.HandMLP`), `ActorCriticKernel` runs the actor and the critic itself, and the
backward pass from the gradients of the log-probabilities, entropies and values the loss reads
(`GRADIENTS`: each loss's own) to the parameters: each operation's gradient as
autograd's formula for it computes it, with the same kernels in the same layouts, and where a
tensor gets gradients from several places they are summed in the order autograd's engine sums
them (it runs the node created last first). So the gradients are autograd's bit for bit
(tests/unit/test_onpolicy_hand.py holds whole agents to that, tests/test_kernels.py whole
trainings), and a run learns the same bits either way. The losses' own gradients (`GRADIENTS`, by
the loss's `NAME`) are autograd's formulas run backwards from the loss as `ppo.py` and `a2c.py`
write it.

`ActorCriticKernel.fits` is the rule for which models take this path: separate built-in MLP heads
(`HandMLP.fits`) with a categorical policy (Discrete actions) or a Gaussian one (Box). Others (a
shared CNN, the user's networks, other activations, MultiDiscrete and MultiBinary actions) keep
autograd.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from rlrun.algorithms.distributions import Categorical
from rlrun.algorithms.kernels.mlp import HandMLP, Workspace
from rlrun.algorithms.optim import apply_gradients
from rlrun.spec import OptimizerSpec

if TYPE_CHECKING:
    from rlrun.algorithms.a2c import AdvantageLoss
    from rlrun.algorithms.onpolicy import ActorCritic
    from rlrun.algorithms.ppo import ClippedSurrogate


class ActorCriticKernel:
    """`ActorCritic.evaluate` and its backward pass, with no autograd graph, and the step down a
    loss made of what `evaluate` returned (the learner interface of `onpolicy.Autograd`)."""

    @staticmethod
    def fits(model: ActorCritic, loss: str) -> bool:
        return (
            loss in GRADIENTS
            and model.shared is None
            and model.recurrent is None
            and model.sde is None  # gSDE's state-dependent noise: autograd's
            and HandMLP.fits(model.actor)
            and HandMLP.fits(model.critic)
            and (model.continuous or type(model.policy) is Categorical)
        )

    def __init__(self, model: ActorCritic, loss: str) -> None:
        assert self.fits(model, loss)
        self.model = model
        self.actor, self.critic = HandMLP(model.actor), HandMLP(model.critic)
        self.params = list(model.parameters())  # the order the optimiser has them (log_std first)
        # hidden layers: the actor's and the critic's kept for their backward, one scratch for both backwards
        self.kept: tuple[Workspace, Workspace] = ({}, {})
        self.scratch: Workspace = {}
        self._evaluated: tuple[torch.Tensor, torch.Tensor, list[torch.Tensor], list[torch.Tensor]] | None = None
        """What `backward` needs from the last `evaluate`: the actor's output, the actions, each network's layers."""

    @torch.no_grad()
    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor, *, entropy: bool, scaled: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """What `ActorCritic.evaluate` returns, the same bits without gradients; `step` follows
        (never on frames, so never `scaled`)."""
        assert not scaled, "no kernel for convolutions"
        out, actor_saved = self.actor.run(obs, self.kept[0])
        values_out, critic_saved = self.critic.run(obs, self.kept[1])
        log_probs, entropies = self.model.heads(out, actions, entropy=entropy)
        values = values_out.squeeze(-1)
        self._evaluated = (out, actions, actor_saved, critic_saved)
        return log_probs, entropies, values

    def step(
        self,
        loss: ClippedSurrogate | AdvantageLoss,
        optimizer: torch.optim.Optimizer,
        spec: OptimizerSpec,
        frame: int,
        max_frame: int,
    ) -> torch.Tensor:
        """One gradient step down `loss` (made of the last `evaluate`'s outputs): its gradients by
        hand, then the optimiser's step; the gradient norm before clipping, as `optimise` returns it."""
        grads = self.backward(*GRADIENTS[loss.NAME](loss))
        return apply_gradients(optimizer, grads, spec, frame, max_frame)

    @torch.no_grad()
    def backward(
        self, grad_log_probs: torch.Tensor, grad_entropies: torch.Tensor | None, grad_values: torch.Tensor
    ) -> list[torch.Tensor]:
        """Set the model's parameters' `.grad` to the gradient of a loss whose gradients with respect
        to the last `evaluate`'s log-probabilities, entropies (None: the loss does not read them)
        and values are these, and return them in `model.parameters()` order."""
        assert self._evaluated is not None, "backward follows evaluate"
        out, actions, actor_saved, critic_saved = self._evaluated
        self._evaluated = None
        if self.model.policy is None:
            grad_out = self._gaussian_backward(out, actions, grad_log_probs, grad_entropies)
        else:
            grad_out = _categorical_backward(out, actions, grad_log_probs, grad_entropies)
        # autograd walks the critic's nodes (created after the actor's) first; disjoint, so either order
        self.critic.backward_from(critic_saved, grad_values.unsqueeze(-1), workspace=self.scratch)  # squeeze's
        self.actor.backward_from(actor_saved, grad_out, workspace=self.scratch)
        return [p.grad for p in self.params if p.grad is not None]  # all of them, set just above

    def _gaussian_backward(
        self,
        out: torch.Tensor,
        actions: torch.Tensor,
        grad_log_probs: torch.Tensor,
        grad_entropies: torch.Tensor | None,
    ) -> torch.Tensor:
        """The gradient of the mean `out`; the log standard deviation's set on it. The forward
        (`ActorCritic.heads`), for the record:
            z = (actions - out) / log_std.exp()
            log_probs = (-0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI).sum(-1)
            entropies = (0.5 + 0.5 * LOG_2PI + log_std).sum().expand(n)"""
        log_std = self.model.log_std
        std = log_std.exp()  # the three values the forward made, remade by the same kernels
        error = actions - out
        z = error / std
        grad = grad_log_probs.unsqueeze(-1).expand(z.shape)  # the sum's (the constant's passes it on)
        from_sub = (-grad).sum(0)  # `- log_std`: broadcast over the rows, so summed back over them
        grad_z = (grad * -0.5) * (2.0 * z.pow(1.0))  # the product's, then pow's
        grad_error = grad_z / std  # the division's, for its numerator...
        grad_std = (-grad_z * ((error / std) / std)).sum(0)  # ... and its (broadcast) denominator
        from_exp = grad_std * std
        # log_std's three gradients, summed as the engine runs their nodes: the entropy's (made last), the sub's, exp's
        if grad_entropies is None:
            log_std.grad = from_sub + from_exp
        else:
            from_entropy = grad_entropies.sum().expand(log_std.shape)  # expand's, then the sum's (add passes it on)
            log_std.grad = (from_entropy + from_sub) + from_exp
        return -grad_error  # `actions - out`


def entropy_bonus_gradient(one: torch.Tensor, coef: float, n: int) -> torch.Tensor | None:
    """The gradient of a loss's entropy bonus, `- coef * entropies.mean()` over `n` entropies,
    with respect to them, from the loss's own gradient `one` (autograd's formulas: the
    subtraction's, the product's, the mean's); None when `coef` is 0 (the loss leaves them out)."""
    if coef == 0:
        return None
    return ((-one) * coef).expand(n) / n


def _categorical_backward(
    out: torch.Tensor, actions: torch.Tensor, grad_log_probs: torch.Tensor, grad_entropies: torch.Tensor | None
) -> torch.Tensor:
    """The gradient of the logits `out`. The forward (`Categorical.evaluate`), for the record:
    all_log_probs = log_softmax(out)
    log_probs = all_log_probs.gather(-1, actions[..., None]).squeeze(-1)
    entropies = -(all_log_probs.exp() * all_log_probs).sum(-1)"""
    all_log_probs = torch.log_softmax(out, dim=-1)  # remade by the same kernel
    index = actions[..., None].long()
    from_gather = all_log_probs.new_zeros(all_log_probs.shape).scatter_add_(-1, index, grad_log_probs.unsqueeze(-1))
    if grad_entropies is None:
        grad = from_gather
    else:
        probs = all_log_probs.exp()
        grad_product = (-grad_entropies).unsqueeze(-1).expand(all_log_probs.shape)  # neg's, then the sum's
        from_product = grad_product * probs  # the product's, for its second factor...
        from_exp = (grad_product * all_log_probs) * probs  # ... and its first, through exp
        # summed as the engine runs their nodes: the product's (made last), exp's, gather's
        grad = (from_product + from_exp) + from_gather
    return torch._log_softmax_backward_data(grad, all_log_probs, -1, all_log_probs.dtype)


def _ppo_gradients(loss: ClippedSurrogate) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The gradients of PPO's loss (`ppo.clipped_surrogate`) with respect to the log-probabilities,
    entropies and values it was made of: autograd's formulas backwards from the loss (a 1)."""
    one, n = torch.ones_like(loss.policy_loss), len(loss.error)
    grad_min = (-one).expand(n) / n  # neg's, mean's; then minimum's (a tie halves it), the products'
    unclipped, clipped, ratio, clip = loss.unclipped, loss.clipped, loss.ratio, loss.clip
    tie = unclipped == clipped
    grad_unclipped = torch.where(tie, grad_min / 2, grad_min).masked_fill_(unclipped > clipped, 0) * loss.advantages
    grad_clipped = torch.where(tie, grad_min / 2, grad_min).masked_fill_(unclipped < clipped, 0) * loss.advantages
    inside = (ratio >= 1 - clip).logical_and_(ratio <= 1 + clip)  # clamp's: none outside [lo, hi]
    zero = grad_clipped.new_zeros(())
    grad_log_probs = (grad_unclipped + torch.where(inside, grad_clipped, zero)) * ratio  # exp's; sub passes it
    grad_values = -((one * loss.value_coef).expand(n) / n * (2.0 * loss.error.pow(1.0)))  # mul, mean, pow, sub
    if loss.value_clip is not None:  # the sum passes it on to the clamp, the clamp to the subtraction
        assert loss.moved is not None
        kept = (loss.moved >= -loss.value_clip).logical_and_(loss.moved <= loss.value_clip)
        grad_values = torch.where(kept, grad_values, zero)
    grad_entropies = entropy_bonus_gradient(one, loss.entropy_coef, n)  # (a bonus always computes entropies)
    return grad_log_probs, grad_entropies, grad_values


def _a2c_gradients(loss: AdvantageLoss) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The gradients of A2C's loss (`a2c.advantage_loss`), as `_ppo_gradients` for PPO's."""
    one, n = torch.ones_like(loss.policy_loss), len(loss.values)
    grad_log_probs = (-one).expand(n) / n * loss.advantages  # neg's, mean's, the product's
    grad_values = torch.ops.aten.mse_loss_backward.default(one * loss.value_coef, loss.values, loss.returns, 1)
    return grad_log_probs, entropy_bonus_gradient(one, loss.entropy_coef, n), grad_values


GRADIENTS: dict[str, Callable[[Any], tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]]] = {
    "ppo": _ppo_gradients,
    "a2c": _a2c_gradients,
}
"""Each loss this kernel learns down (by its `NAME`), and its gradients with respect to what it reads."""
