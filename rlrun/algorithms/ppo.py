"""PPO (Schulman et al., 2017): several epochs of minibatch updates per rollout, each kept close to
the policy that collected the data by clipping the probability ratio.

Clipped surrogate objective, GAE advantages, optional clipping of the value update, an entropy
bonus on a schedule, and gradient-norm clipping. The rollout collection lives in `onpolicy`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from rlrun.algorithms.configs.ppo import Config
from rlrun.algorithms.onpolicy import OnPolicyAgent
from rlrun.algorithms.optim import optimise
from rlrun.clock import Clock

_MINIBATCH_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")


class Agent(OnPolicyAgent):
    config: Config
    METRICS = (*_MINIBATCH_STATS, "explained_variance", "lr", "clip_range")
    HEADLINE = "approx_kl"

    def learn(self, batch: dict[str, torch.Tensor], clock: Clock) -> dict[str, float]:
        """The minibatch steps; their diagnostics averaged over every minibatch of every epoch."""
        clip = self.config.clip_range.value(clock.frame, self.max_frame)
        entropy_coef = self.entropy_term(clock)
        stats = torch.stack([self._minibatch(part, clip, entropy_coef, clock) for part in self._minibatches(batch)])
        return {**dict(zip(_MINIBATCH_STATS, stats.double().mean(dim=0).tolist(), strict=True)), "clip_range": clip}

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
                   clock: Clock) -> torch.Tensor:
        """One gradient step; returns its `_MINIBATCH_STATS`."""
        config = self.config
        log_probs, entropy = self.model.evaluate(part["obs"], part["actions"], entropy=True)
        assert entropy is not None
        advantages = part["advantages"]
        ratio = torch.exp(log_probs - part["log_probs"])
        policy_loss = -torch.min(advantages * ratio, advantages * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
        values = self.model.value(part["obs"])
        if config.clip_range_vf is not None:
            values = part["values"] + torch.clamp(values - part["values"], -config.clip_range_vf, config.clip_range_vf)
        value_loss = (part["returns"] - values).pow(2).mean()
        loss = policy_loss + config.value_coef * value_loss
        if entropy_coef != 0:
            loss = loss - entropy_coef * entropy.mean()
        grad_norm = optimise(self.optimizer, loss, config.optimizer, clock.frame, self.max_frame)
        clock.opt_step += 1
        with torch.no_grad():  # CleanRL's diagnostics: how far the policy moved, how much was clipped
            log_ratio = log_probs - part["log_probs"]
            approx_kl = (log_ratio.exp() - 1 - log_ratio).mean()
            clip_fraction = ((ratio - 1).abs() > clip).float().mean()
            return torch.stack([policy_loss, value_loss, entropy.mean(), approx_kl, clip_fraction, grad_norm])
