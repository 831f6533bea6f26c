"""A2C (Mnih et al., 2016, synchronous): one gradient step per short rollout from parallel envs.

The policy gradient uses advantages from n-step returns or GAE; the critic regresses the returns;
an entropy bonus keeps the policy exploring. The rollout collection lives in `onpolicy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch.nn import functional

from rlrun.algorithms.onpolicy import OnPolicyAgent
from rlrun.clock import Clock
from rlrun.spec.agents.a2c import Config


@dataclass(slots=True)  # not frozen: a frozen one's fields cost microseconds a step to set
class AdvantageLoss:
    """A2C's loss on a rollout (`advantage_loss`) and the terms it is made of."""

    NAME: ClassVar[str] = "a2c"
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropies: torch.Tensor
    advantages: torch.Tensor
    values: torch.Tensor
    returns: torch.Tensor
    value_coef: float
    entropy_coef: float

    def total(self) -> torch.Tensor:
        loss = self.policy_loss + self.value_coef * self.value_loss
        if self.entropy_coef != 0:
            loss = loss - self.entropy_coef * self.entropies.mean()
        return loss


def advantage_loss(
    log_probs: torch.Tensor,
    entropies: torch.Tensor,
    values: torch.Tensor,
    advantages: torch.Tensor,
    returns: torch.Tensor,
    value_coef: float,
    entropy_coef: float,
) -> AdvantageLoss:
    """The policy gradient's surrogate, the critic's regression to the returns, the entropy bonus."""
    policy_loss = -(advantages * log_probs).mean()
    value_loss = functional.mse_loss(values, returns)
    return AdvantageLoss(policy_loss, value_loss, entropies, advantages, values, returns, value_coef, entropy_coef)


class Agent(OnPolicyAgent):
    config: Config
    LOSS = AdvantageLoss.NAME
    METRICS = ("policy_loss", "value_loss", "entropy", "explained_variance", "grad_norm", "lr")
    """No approximate KL: measuring the one step's move needs a second forward pass, which costs
    a tenth of A2C's small update."""
    HEADLINE = "entropy"

    def advantage_lambda(self) -> float:
        return 1.0 if self.config.returns == "nstep" else self.config.gae_lambda  # n-step returns: GAE, lambda 1

    def learn(self, batch: dict[str, torch.Tensor], clock: Clock) -> dict[str, float]:
        config, entropy_coef = self.config, self.entropy_term(clock)
        log_probs, entropy, values = self.evaluate(batch, entropy=True)  # with a memory: the whole sequences
        assert entropy is not None
        loss = advantage_loss(
            log_probs,
            entropy,
            values,
            self.normalized(batch["advantages"]),
            batch["returns"],
            config.value_coef,
            entropy_coef,
        )
        grad_norm = self.learner.step(loss, self.optimizer, config.optimizer, clock.frame, self.max_frame)
        clock.opt_step += 1
        stats = torch.stack(
            [loss.policy_loss.detach(), loss.value_loss.detach(), entropy.detach().mean(), grad_norm]
        ).tolist()
        return dict(zip(("policy_loss", "value_loss", "entropy", "grad_norm"), stats, strict=True))
