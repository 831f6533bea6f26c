"""A2C (Mnih et al., 2016, synchronous): one gradient step per short rollout from parallel envs.

The policy gradient uses advantages from n-step returns or GAE; the critic regresses the returns;
an entropy bonus keeps the policy exploring. The rollout collection lives in `onpolicy`.
"""

from __future__ import annotations

import torch
from torch.nn import functional

from rlrun.algorithms.hand_actor_critic import entropy_bonus_gradient
from rlrun.algorithms.onpolicy import OnPolicyAgent
from rlrun.algorithms.optim import apply_gradients, optimise
from rlrun.clock import Clock
from rlrun.spec.agents.a2c import Config


class Agent(OnPolicyAgent):
    config: Config
    METRICS = ("policy_loss", "value_loss", "entropy", "explained_variance", "grad_norm", "lr")
    """No approximate KL: measuring the one step's move needs a second forward pass, which costs
    a tenth of A2C's small update."""
    HEADLINE = "entropy"

    def advantage_lambda(self) -> float:
        return 1.0 if self.config.returns == "nstep" else self.config.gae_lambda  # n-step returns: GAE, lambda 1

    def learn(self, batch: dict[str, torch.Tensor], clock: Clock) -> dict[str, float]:
        config, entropy_coef = self.config, self.entropy_term(clock)
        log_probs, entropy, values = self.evaluate(batch["obs"], batch["actions"], entropy=True)
        assert entropy is not None
        advantages = self.normalized(batch["advantages"])
        policy_loss = -(advantages * log_probs).mean()
        value_loss = functional.mse_loss(values, batch["returns"])
        if self.hand is None:
            loss = policy_loss + config.value_coef * value_loss
            if entropy_coef != 0:
                loss = loss - entropy_coef * entropy.mean()
            grad_norm = optimise(self.optimizer, loss, config.optimizer, clock.frame, self.max_frame)
        else:  # that loss's gradients, by hand: autograd's formulas backwards from the loss (a 1)
            one, n = torch.ones_like(policy_loss), len(values)
            grad_log_probs = (-one).expand(n) / n * advantages  # neg's, mean's, the product's
            grad_values = torch.ops.aten.mse_loss_backward.default(one * config.value_coef, values, batch["returns"], 1)
            grads = self.hand.backward(grad_log_probs, entropy_bonus_gradient(one, entropy_coef, n), grad_values)
            grad_norm = apply_gradients(self.optimizer, grads, config.optimizer, clock.frame, self.max_frame)
        clock.opt_step += 1
        stats = torch.stack([policy_loss.detach(), value_loss.detach(), entropy.detach().mean(), grad_norm]).tolist()
        return dict(zip(("policy_loss", "value_loss", "entropy", "grad_norm"), stats, strict=True))
