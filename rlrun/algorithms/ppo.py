"""PPO (Schulman et al., 2017): several epochs of minibatch updates per rollout, each kept close to
the policy that collected the data by clipping the probability ratio.

Clipped surrogate objective, GAE advantages, optional clipping of the value update, an entropy
bonus on a schedule, and gradient-norm clipping. The rollout collection lives in `onpolicy`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch

from rlrun.algorithms.base import KeptFrames, step_means, take_rows
from rlrun.algorithms.onpolicy import OnPolicyAgent
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


@dataclass(slots=True)  # not frozen: a frozen one's fields cost microseconds a step to set
class ClippedSurrogate:
    """PPO's loss on a minibatch (`clipped_surrogate`) and the terms it is made of."""

    NAME: ClassVar[str] = "ppo"
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropies: torch.Tensor | None
    advantages: torch.Tensor
    ratio: torch.Tensor
    unclipped: torch.Tensor
    clipped: torch.Tensor
    error: torch.Tensor
    """The returns less the (clipped) values."""
    moved: torch.Tensor | None
    """The values less the collected ones, when the value update is clipped."""
    clip: float
    value_clip: float | None
    value_coef: float
    entropy_coef: float

    def total(self) -> torch.Tensor:
        loss = self.policy_loss + self.value_coef * self.value_loss
        if self.entropy_coef != 0 and self.entropies is not None:
            loss = loss - self.entropy_coef * self.entropies.mean()
        return loss


def clipped_surrogate(
    log_probs: torch.Tensor,
    entropies: torch.Tensor | None,
    values: torch.Tensor,
    part: dict[str, torch.Tensor],
    clip: float,
    entropy_coef: float,
    config: Config,
) -> ClippedSurrogate:
    """The clipped surrogate objective, the (optionally clipped) value regression and the entropy
    bonus, for the minibatch `part` (advantages normalised) evaluated under the current policy."""
    advantages = part["advantages"]
    ratio = torch.exp(log_probs - part["log_probs"])
    unclipped, clipped = advantages * ratio, advantages * torch.clamp(ratio, 1 - clip, 1 + clip)
    policy_loss = -torch.min(unclipped, clipped).mean()
    value_clip, moved = config.clip_range_vf, None
    if value_clip is not None:
        moved = values - part["values"]
        values = part["values"] + torch.clamp(moved, -value_clip, value_clip)
    error = part["returns"] - values
    return ClippedSurrogate(
        policy_loss,
        error.pow(2).mean(),
        entropies,
        advantages,
        ratio,
        unclipped,
        clipped,
        error,
        moved,
        clip,
        value_clip,
        config.value_coef,
        entropy_coef,
    )


class Agent(OnPolicyAgent):
    config: Config
    LOSS = ClippedSurrogate.NAME
    METRICS = (
        "policy_loss",
        "value_loss",
        "grad_norm",
        "entropy",
        "approx_kl",
        "clip_fraction",
        "explained_variance",
        "lr",
        "clip_range",
    )
    HEADLINE = "approx_kl"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.frames = None if self.model.shared is None else KeptFrames(self.model.shared)
        """The minibatches' frames, scaled into buffers kept from one to the next (scratch, not state)."""

    def learn(self, batch: dict[str, torch.Tensor], clock: Clock) -> dict[str, float]:
        clip = self.config.clip_range.value(clock.frame, self.max_frame)
        entropy_coef = self.entropy_term(clock)
        steps = [
            self._minibatch(part, clip, entropy_coef, clock, entropy=i == 0 or entropy_coef != 0, scaled=scaled)
            for i, (part, scaled) in enumerate(self._minibatches(batch))
        ]
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
        return {
            **losses,
            "entropy": float(entropy.mean()) if entropy is not None else math.nan,
            "approx_kl": float((ratio - 1 - log_ratio).mean()),
            "clip_fraction": float(((ratio - 1).abs() > clip).float().mean()),
        }

    def _minibatches(self, batch: dict[str, torch.Tensor]) -> Iterator[tuple[dict[str, torch.Tensor], bool]]:
        """Every epoch's minibatches: the rollout reshuffled and split, advantages normalised
        within each minibatch; and whether their frames are already scaled floats (split ones,
        gathered into `KeptFrames`; each is overwritten by the next, after its gradient step)."""
        config, size = self.config, len(batch["obs"])
        if "memory" in batch:
            yield from self._sequences(batch)
            return
        if size <= config.batch_size:  # one minibatch holds the rollout: the same one every epoch
            whole = {**batch, "advantages": self.normalized(batch["advantages"])}
            yield from [(whole, False)] * config.n_epochs
            return
        for _ in range(config.n_epochs):
            order = torch.randperm(size, generator=self.generator).to(batch["obs"].device)  # drawn on the host
            for start in range(0, size, config.batch_size):
                index = order[start : start + config.batch_size]
                part = {name: take_rows(value, index) for name, value in batch.items() if name != "obs"}
                frames = self.frames
                part["obs"] = take_rows(batch["obs"], index) if frames is None else frames.take(batch["obs"], index)
                yield {**part, "advantages": self.normalized(part["advantages"])}, frames is not None

    def chunk_length(self) -> int | None:
        return self.config.sequence_length

    def _sequences(self, batch: dict[str, torch.Tensor]) -> Iterator[tuple[dict[str, torch.Tensor], bool]]:
        """`_minibatches` with a memory: each minibatch is whole env copies' sequences (n_steps
        each, `batch_size // n_steps` of them), read from their memory at the rollout's start;
        with `sequence_length`, chunks (`_chunks`)."""
        config = self.config
        if config.sequence_length is not None:
            yield from self._chunks(batch, config.sequence_length)
            return
        steps, envs = batch["starts"].shape
        per = config.batch_size // steps  # the config holds batch_size to a multiple of n_steps
        if per >= envs:  # one minibatch holds the rollout: the same one every epoch
            whole = {**batch, "advantages": self.normalized(batch["advantages"])}
            yield from [(whole, False)] * config.n_epochs
            return
        device = batch["obs"].device
        at = torch.arange(steps, device=device)[:, None] * envs
        for _ in range(config.n_epochs):
            order = torch.randperm(envs, generator=self.generator).to(device)  # drawn on the host
            for start in range(0, envs, per):
                chosen = order[start : start + per]
                index = (at + chosen[None]).flatten()  # step-major, as the cells read them
                part = {
                    name: take_rows(value, index)
                    for name, value in batch.items()
                    if name not in ("obs", "memory", "starts")
                }
                frames = self.frames
                part["obs"] = take_rows(batch["obs"], index) if frames is None else frames.take(batch["obs"], index)
                part["memory"], part["starts"] = batch["memory"][:, chosen], batch["starts"][:, chosen]
                yield {**part, "advantages": self.normalized(part["advantages"])}, frames is not None

    def _chunks(self, batch: dict[str, torch.Tensor], length: int) -> Iterator[tuple[dict[str, torch.Tensor], bool]]:
        """Minibatches of `batch_size // length` chunks drawn from every env copy's rollout, each
        chunk `length` steps read from `memory[chunk]` (chunks, parts, envs, size), as
        sb3-contrib's RecurrentPPO reads its sequences. The last chunk of a rollout `length` does
        not divide is padded (its padded steps repeat the rollout's first row, unrolled after its
        real ones so they change nothing); `valid` then keeps the real steps for the loss."""
        config = self.config
        steps, envs = batch["starts"].shape
        chunks = len(batch["memory"])
        device = batch["obs"].device
        at = torch.arange(chunks * length, device=device).reshape(chunks, length)  # chunk's steps
        real = at < steps
        per, total = config.batch_size // length, chunks * envs
        for _ in range(config.n_epochs):
            order = torch.randperm(total, generator=self.generator).to(device)  # drawn on the host
            for start in range(0, total, per):
                chosen = order[start : start + per]
                chunk, env = chosen // envs, chosen % envs
                step = at[chunk].t()  # (length, chosen), step-major as the cells read them
                mask = real[chunk].t()
                index = torch.where(mask, step * envs + env[None], 0).flatten()
                valid = None if bool(mask.all()) else mask.flatten()
                rows = index if valid is None else index[valid]
                part = {
                    name: take_rows(value, rows)
                    for name, value in batch.items()
                    if name not in ("obs", "actions", "memory", "starts")
                }
                frames = self.frames
                part["obs"] = take_rows(batch["obs"], index) if frames is None else frames.take(batch["obs"], index)
                part["actions"] = take_rows(batch["actions"], index)
                part["memory"] = batch["memory"][chunk, :, env].transpose(0, 1)
                part["starts"] = torch.where(mask, batch["starts"][step.clamp(max=steps - 1), env[None]], 0.0)
                if valid is not None:
                    part["valid"] = valid
                yield {**part, "advantages": self.normalized(part["advantages"])}, frames is not None

    def _minibatch(
        self,
        part: dict[str, torch.Tensor],
        clip: float,
        entropy_coef: float,
        clock: Clock,
        *,
        entropy: bool,
        scaled: bool,
    ) -> Stepped:
        """One gradient step (computing the policy's entropy only if the loss or the diagnostics
        need it; `scaled`: the frames are floats `KeptFrames` made)."""
        config = self.config
        log_probs, entropies, values = self.evaluate(part, entropy=entropy, scaled=scaled)
        loss = clipped_surrogate(log_probs, entropies, values, part, clip, entropy_coef, config)
        grad_norm = self.learner.step(loss, self.optimizer, config.optimizer, clock.frame, self.max_frame)
        clock.opt_step += 1
        return Stepped(
            (loss.policy_loss.detach(), loss.value_loss.detach(), grad_norm),
            log_probs.detach(),
            part["log_probs"],
            None if entropies is None else entropies.detach(),
        )
