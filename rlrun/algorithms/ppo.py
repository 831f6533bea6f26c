"""PPO (Schulman et al., 2017): several epochs of minibatch updates per rollout, each kept close to
the policy that collected the data by clipping the probability ratio.

Clipped surrogate objective, GAE advantages, optional clipping of the value update, an entropy
bonus on a schedule, and gradient-norm clipping. The rollout collection lives in `onpolicy`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from rlrun.algorithms.onpolicy import OnPolicyAgent, OnPolicyConfig
from rlrun.algorithms.optim import optimise
from rlrun.clock import Clock
from rlrun.schedules import Constant, Schedule
from rlrun.spec import OptimizerSpec


class Config(OnPolicyConfig):
    algorithm: Literal["ppo"] = "ppo"
    n_steps: int = Field(default=2048, gt=0)
    """Steps collected from each env copy before every update."""
    gae_lambda: float = Field(default=0.95, ge=0, le=1)
    """GAE's lambda."""
    n_epochs: int = Field(default=10, gt=0)
    """Passes over each rollout."""
    batch_size: int = Field(default=64, gt=0)
    """Minibatch size (the rollout is split into rollout / batch_size minibatches per epoch)."""
    clip_range: Schedule = Constant(value=0.2)
    """Ratio clipping of the surrogate objective: a number or a schedule over frames."""
    clip_range_vf: float | None = Field(default=None, gt=0)
    """Clip each value update to this distance from the value at collection (none when null)."""
    normalize_advantages: bool = True
    optimizer: OptimizerSpec = OptimizerSpec(lr=Constant(value=3e-4), grad_clip=0.5)


class Agent(OnPolicyAgent):
    config: Config

    def learn(self, batch: dict[str, torch.Tensor], clock: Clock) -> dict[str, float]:
        clip = self.config.clip_range.value(clock.frame, self.max_frame)
        entropy_coef = self.entropy_term(clock)
        losses = [self._minibatch(part, clip, entropy_coef, clock) for part in self._minibatches(batch)]
        policy, value = np.mean(losses, axis=0)
        return {"policy_loss": float(policy), "value_loss": float(value), "clip": clip}

    def _minibatches(self, batch: dict[str, torch.Tensor]) -> Iterator[dict[str, torch.Tensor]]:
        """Every epoch's minibatches: the rollout reshuffled and split, advantages normalised
        within each minibatch."""
        config, size = self.config, len(batch["obs"])
        if size <= config.batch_size:  # one minibatch holds the rollout: the same one every epoch
            whole = {**batch, "advantages": self.normalized(batch["advantages"])}
            yield from [whole] * config.n_epochs
            return
        for _ in range(config.n_epochs):
            order = torch.randperm(size, generator=self.generator)
            for start in range(0, size, config.batch_size):
                part = {name: value[order[start:start + config.batch_size]] for name, value in batch.items()}
                yield {**part, "advantages": self.normalized(part["advantages"])}

    def _minibatch(self, part: dict[str, torch.Tensor], clip: float, entropy_coef: float,
                   clock: Clock) -> tuple[float, float]:
        config = self.config
        log_probs, entropy = self.model.evaluate(part["obs"], part["actions"], entropy=entropy_coef != 0)
        advantages = part["advantages"]
        ratio = torch.exp(log_probs - part["log_probs"])
        policy_loss = -torch.min(advantages * ratio, advantages * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
        values = self.model.value(part["obs"])
        if config.clip_range_vf is not None:
            values = part["values"] + torch.clamp(values - part["values"], -config.clip_range_vf, config.clip_range_vf)
        value_loss = (part["returns"] - values).pow(2).mean()
        loss = policy_loss + config.value_coef * value_loss
        if entropy is not None:
            loss = loss - entropy_coef * entropy.mean()
        optimise(self.optimizer, loss, config.optimizer, clock.frame, self.max_frame)
        clock.opt_step += 1
        return policy_loss.item(), value_loss.item()
