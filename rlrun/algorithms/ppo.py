"""PPO (Schulman et al., 2017): several epochs of minibatch updates per rollout, each kept close to
the policy that collected the data by clipping the probability ratio.

Clipped surrogate objective, GAE advantages, optional clipping of the value update, an entropy
bonus on a schedule, and gradient-norm clipping. The rollout collection lives in `onpolicy`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch

from rlrun.algorithms.base import KeptFrames, step_means, take_rows
from rlrun.algorithms.hand_actor_critic import entropy_bonus_gradient
from rlrun.algorithms.onpolicy import OnPolicyAgent
from rlrun.algorithms.optim import apply_gradients, optimise
from rlrun.clock import Clock
from rlrun.spec.agents.ppo import Config


class Stepped(NamedTuple):
    """What one minibatch step leaves for the diagnostics (detached: no graph kept alive)."""

    losses: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    """Policy loss, value loss, gradient norm before clipping."""
    log_probs: torch.Tensor
    """The actions' log-probabilities under the policy just before the step."""
    collected: torch.Tensor
    """... and under the policy that collected them."""
    entropy: torch.Tensor | None


class Agent(OnPolicyAgent):
    config: Config
    METRICS = ("policy_loss", "value_loss", "grad_norm", "entropy", "approx_kl", "clip_fraction",
               "explained_variance", "lr", "clip_range")
    HEADLINE = "approx_kl"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.frames = None if self.model.shared is None else KeptFrames(self.model.shared)
        """The minibatches' frames, scaled into buffers kept from one to the next (scratch, not state)."""

    def learn(self, batch: dict[str, torch.Tensor], clock: Clock) -> dict[str, float]:
        clip = self.config.clip_range.value(clock.frame, self.max_frame)
        entropy_coef = self.entropy_term(clock)
        steps = [self._minibatch(part, clip, entropy_coef, clock, entropy=i == 0 or entropy_coef != 0, scaled=scaled)
                 for i, (part, scaled) in enumerate(self._minibatches(batch))]
        return {**self._diagnostics(steps, clip), "clip_range": clip}

    @staticmethod
    @torch.no_grad()
    def _diagnostics(steps: list[Stepped], clip: float) -> dict[str, float]:
        """CleanRL's PPO diagnostics, computed once per update over every minibatch of every epoch
        (a few tensor operations, not a few per minibatch): the mean losses and gradient norm,
        how far each step's policy had moved from the collecting one (approximate KL) and how
        often the ratio was clipped; the entropy of the collecting policy on the first minibatch."""
        losses = step_means(("policy_loss", "value_loss", "grad_norm"), [torch.stack(step.losses) for step in steps])
        log_ratio = torch.cat([step.log_probs for step in steps]) - torch.cat([step.collected for step in steps])
        ratio = log_ratio.exp()
        entropy = steps[0].entropy
        return {**losses,
                "entropy": float(entropy.mean()) if entropy is not None else math.nan,
                "approx_kl": float((ratio - 1 - log_ratio).mean()),
                "clip_fraction": float(((ratio - 1).abs() > clip).float().mean())}

    def _minibatches(self, batch: dict[str, torch.Tensor]) -> Iterator[tuple[dict[str, torch.Tensor], bool]]:
        """Every epoch's minibatches: the rollout reshuffled and split, advantages normalised
        within each minibatch; and whether their frames are already scaled floats (split ones,
        gathered into `KeptFrames`; each is overwritten by the next, after its gradient step)."""
        config, size = self.config, len(batch["obs"])
        if size <= config.batch_size:  # one minibatch holds the rollout: the same one every epoch
            whole = {**batch, "advantages": self.normalized(batch["advantages"])}
            yield from [(whole, False)] * config.n_epochs
            return
        for _ in range(config.n_epochs):
            order = torch.randperm(size, generator=self.generator).to(batch["obs"].device)  # drawn on the host
            for start in range(0, size, config.batch_size):
                index = order[start:start + config.batch_size]
                part = {name: take_rows(value, index) for name, value in batch.items() if name != "obs"}
                frames = self.frames
                part["obs"] = take_rows(batch["obs"], index) if frames is None else frames.take(batch["obs"], index)
                yield {**part, "advantages": self.normalized(part["advantages"])}, frames is not None

    def _minibatch(self, part: dict[str, torch.Tensor], clip: float, entropy_coef: float, clock: Clock, *,
                   entropy: bool, scaled: bool) -> Stepped:
        """One gradient step (computing the policy's entropy only if the loss or the diagnostics
        need it; `scaled`: the frames are floats `KeptFrames` made)."""
        config = self.config
        log_probs, entropies, values = self.evaluate(part["obs"], part["actions"], entropy=entropy, scaled=scaled)
        advantages = part["advantages"]
        ratio = torch.exp(log_probs - part["log_probs"])
        unclipped, clipped = advantages * ratio, advantages * torch.clamp(ratio, 1 - clip, 1 + clip)
        policy_loss = -torch.min(unclipped, clipped).mean()
        value_clip = config.clip_range_vf
        if value_clip is not None:
            moved = values - part["values"]
            values = part["values"] + torch.clamp(moved, -value_clip, value_clip)
        error = part["returns"] - values
        value_loss = error.pow(2).mean()
        if self.hand is None:
            loss = policy_loss + config.value_coef * value_loss
            if entropy_coef != 0 and entropies is not None:
                loss = loss - entropy_coef * entropies.mean()
            grad_norm = optimise(self.optimizer, loss, config.optimizer, clock.frame, self.max_frame)
        else:  # that loss's gradients, by hand: autograd's formulas backwards from the loss (a 1)
            one, n = torch.ones_like(policy_loss), len(values)
            grad_min = (-one).expand(n) / n  # neg's, mean's; then minimum's (a tie halves it), the products'
            tie = unclipped == clipped
            grad_unclipped = torch.where(tie, grad_min / 2, grad_min).masked_fill_(unclipped > clipped, 0) * advantages
            grad_clipped = torch.where(tie, grad_min / 2, grad_min).masked_fill_(unclipped < clipped, 0) * advantages
            inside = (ratio >= 1 - clip).logical_and_(ratio <= 1 + clip)  # clamp's: none outside [lo, hi]
            zero = grad_clipped.new_zeros(())
            grad_log_probs = (grad_unclipped + torch.where(inside, grad_clipped, zero)) * ratio  # exp's; sub passes it
            grad_values = -((one * config.value_coef).expand(n) / n * (2.0 * error.pow(1.0)))  # mul, mean, pow, sub
            if value_clip is not None:  # the sum passes it on to the clamp, the clamp to the subtraction
                grad_values = torch.where((moved >= -value_clip).logical_and_(moved <= value_clip), grad_values, zero)
            grad_entropies = entropy_bonus_gradient(one, entropy_coef, n)  # (a bonus always computes entropies)
            grads = self.hand.backward(grad_log_probs, grad_entropies, grad_values)
            grad_norm = apply_gradients(self.optimizer, grads, config.optimizer, clock.frame, self.max_frame)
        clock.opt_step += 1
        return Stepped((policy_loss.detach(), value_loss.detach(), grad_norm), log_probs.detach(), part["log_probs"],
                       None if entropies is None else entropies.detach())
