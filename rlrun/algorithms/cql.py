"""Conservative Q-learning (Kumar et al., 2020): learning values from a dataset, the actions it did
not take pushed down, so the policy does not chase the over-estimates of actions nobody tried.

The TD loss of the agent it builds on, plus `conservative_weight` α times the penalty
logsumexp_a Q(s, a) − Q(s, a_data):
- discrete actions: DQN (`rlrun.algorithms.dqn`: its Q-network, target, optimiser, memory and
  TD target), the logsumexp exact over the actions (d3rlpy's `DiscreteCQL`);
- continuous actions: SAC (`rlrun.algorithms.sac`: its actor, twin critics, targets, temperature,
  optimisers and memory), CQL(H) as CORL's `cql.py` and d3rlpy's `CQL` estimate it, from
  `n_action_samples` uniformly random actions and as many the policy samples at s and at s′, each
  weighed by its density; the actor and the temperature learn as SAC's.

Offline (`meta.offline_updates`) each frame of the clock is one gradient step on `batch_size`
dataset rows drawn with the agent's generator; then it acts and learns online as DQN or SAC do,
the penalty kept, on batches mixing dataset rows and its replay memory's by `data.mixing`.
Everything it holds is its base agent's (weights, optimisers, generator, memory), in every
snapshot; the phase is the clock's."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional

from rlrun.algorithms import dqn, mixing, sac
from rlrun.algorithms.base import Metrics, Step, flat_float, network_input, step_means
from rlrun.algorithms.optim import OptimizerStep, flushing_subnormals, make_optimizer, optimise
from rlrun.algorithms.q_learning import QActor, td_loss
from rlrun.algorithms.replay import Transitions
from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock, crossed
from rlrun.data import Transitions as DatasetRows
from rlrun.errors import BadInput
from rlrun.spec.agents.cql import Config

DISCRETE_STATS = ("td_loss", "conservative_loss", "q_mean", "grad_norm")
CONTINUOUS_STATS = ("td_loss", "conservative_loss", "q_mean", "actor_loss", "alpha", "entropy", "cql_multiplier")


class Agent:
    METRICS = (
        "td_loss", "conservative_loss", "q_mean", "grad_norm", "epsilon", "actor_loss", "alpha", "entropy",
        "cql_multiplier", "lr",
    )  # fmt: skip
    """`td_loss`: the TD loss (continuous: both critics'); `conservative_loss`: the penalty before
    its weight (continuous: both critics'); `q_mean`: the (smaller critic's) value of the batch's
    actions; discrete: `grad_norm`, `epsilon`; continuous: SAC's `actor_loss`, `alpha`, `entropy`,
    and `cql_multiplier`, CQL-Lagrange's α' (1 without `lagrange_threshold`)."""
    HEADLINE = "conservative_loss"

    def __init__(
        self,
        config: Config,
        obs_space: spaces.Space,
        action_space: spaces.Space,
        *,
        seed: int,
        num_envs: int,
        max_frame: int,
        device: torch.device,
        frame_stack: int = 1,
        arithmetic: Arithmetic = NEWEST,
        kernels: str = "auto",
        mixing: float = 0.5,
    ) -> None:
        self.config, self.num_envs, self.max_frame, self.device = config, num_envs, max_frame, device
        self.mixing = mixing
        """The share of an online batch drawn from the dataset (`data.mixing`, `rlrun.algorithms.mixing`)."""
        self.continuous = isinstance(action_space, spaces.Box)
        # The base agent's own gradient steps are never taken: its kernels (fused TD steps) would
        # serve a loss without the penalty, so it learns through autograd alone.
        self.base: dqn.Agent | sac.Agent
        if self.continuous:
            self.base = sac.Agent(
                config.as_sac(), obs_space, action_space, seed=seed, num_envs=num_envs, max_frame=max_frame,
                device=device, frame_stack=frame_stack, arithmetic=arithmetic, kernels="autograd",
            )  # fmt: skip
        else:
            self.base = dqn.Agent(
                config.as_dqn(), obs_space, action_space, seed=seed, num_envs=num_envs, max_frame=max_frame,
                device=device, frame_stack=frame_stack, arithmetic=arithmetic, kernels="autograd",
            )  # fmt: skip
        self.flush = not self.continuous or arithmetic.sac_flushes_subnormals
        """Subnormal floats flushed while learning, as the base agent does (DQN always; SAC by the
        run's arithmetic)."""
        self.memory = self.base.memory
        """The online replay memory (the base agent's); the dataset is never copied into it."""
        self.generator = self.base.generator
        self.rows: DatasetRows | None = None
        """The dataset, its actions as the memory holds them (given by the session, never in a
        snapshot: the spec names and pins it)."""
        self.lagrange: tuple[nn.Parameter, torch.optim.Optimizer] | None = None
        """CQL-Lagrange's log α' and its optimiser (`lagrange_threshold`), in every snapshot."""
        if config.lagrange_threshold is not None:
            if not self.continuous:
                raise BadInput(
                    "agent.lagrange_threshold: CQL-Lagrange learns its multiplier on SAC, for continuous actions;"
                    " remove it for a discrete action space"
                )
            log_multiplier = nn.Parameter(torch.zeros(1, device=device))
            self.lagrange = (log_multiplier, make_optimizer(config.optimizer, [log_multiplier], max_frame))

    def learn_from(self, rows: DatasetRows) -> None:
        if isinstance(self.base, sac.Agent):  # the critics take actions in [-1, 1], as its memory holds them
            scaled = self.base.actor.from_env(rows.action.astype(np.float32).reshape(len(rows), -1))
            rows = dataclasses.replace(rows, action=scaled)
        self.rows = rows

    # -- acting (the base agent's) ----------------------------------------------------------------

    @property
    def actor(self) -> QActor | sac.SquashedActor:
        actor = self.base.actor
        assert isinstance(actor, QActor | sac.SquashedActor)  # no memory (`network.recurrent`), no gSDE
        return actor

    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> np.ndarray:
        return self.base.act(obs, deterministic=deterministic, generator=generator)

    def observe(self, step: Step) -> None:
        self.base.observe(step)

    def restart_episodes(self) -> None:
        if isinstance(self.base, dqn.Agent):
            self.base.restart_episodes()

    # -- learning -------------------------------------------------------------------------------

    def update_offline(self, clock: Clock) -> Mapping[str, float]:
        """One gradient step on dataset rows (the session then counts it as a frame)."""
        self.base.frame = clock.frame
        self._copy_target(clock.frame, clock.frame + 1)
        with self._learning_arithmetic():
            steps = [self._gradient_step(self._batch(offline=True), clock)]
        return self._metrics(steps)

    def update(self, clock: Clock) -> Mapping[str, float]:
        """Online: every `train_frequency` frames, `gradient_steps` steps on the online memory's rows."""
        config, self.base.frame = self.config, clock.frame  # the base's exploration reads its frame
        previous = clock.frame - self.num_envs
        self._copy_target(previous, clock.frame)
        count = (clock.frame // config.train_frequency - previous // config.train_frequency) * config.gradient_steps
        if count == 0 or self.memory.size < max(config.batch_size, config.learning_starts):
            return {}
        with self._learning_arithmetic():
            steps = [self._gradient_step(self._batch(offline=False), clock) for _ in range(count)]
        return self._metrics(steps)

    def _batch(self, *, offline: bool) -> Transitions:
        """A gradient step's `batch_size` rows, drawn with the agent's generator by
        `rlrun.algorithms.mixing`'s rule: all the dataset's offline; online, the dataset's share by
        `data.mixing`, then the online memory's. The one place a batch is drawn."""
        assert self.rows is not None, "the session gives the dataset before the first update"
        fraction = 1.0 if offline else self.mixing
        batch = mixing.mixed_batch(self.rows, self.memory, self.config.batch_size, fraction, self.generator)
        return batch.to(self.device)

    def _copy_target(self, before: int, after: int) -> None:
        """Discrete, hard target updates: the copy every `target_update_frequency` frames, before
        the frame's gradient steps (as DQN's)."""
        config, base = self.config, self.base
        hard = isinstance(base, dqn.Agent) and config.target_update == "hard"
        if hard and crossed(before, after, config.target_update_frequency):
            base.target_update.copy()

    def _gradient_step(self, batch: Transitions, clock: Clock) -> torch.Tensor:
        if isinstance(self.base, dqn.Agent):
            return self._discrete_step(self.base, batch, clock)
        return self._continuous_step(self.base, batch, clock)

    def _discrete_step(self, base: dqn.Agent, batch: Transitions, clock: Clock) -> torch.Tensor:
        """DQN's TD loss plus α · (logsumexp_a Q(s, a) − Q(s, a_data)), one step down it."""
        config = self.config
        with torch.no_grad():
            target = base.td_targets(batch)
        obs = network_input(batch.obs, config.network)
        q = base.q(obs)
        taken = q.gather(1, batch.actions.unsqueeze(-1)).squeeze(1)
        td = td_loss(taken, target, config.loss)
        conservative = (torch.logsumexp(q, dim=1) - taken).mean()
        loss = td + config.conservative_weight * conservative
        grad_norm = optimise(base.optimizer, loss, config.optimizer, clock.frame, self.max_frame)
        clock.opt_step += 1
        with torch.no_grad():
            if config.target_update == "polyak":
                base.target_update.polyak(config.tau)
            return torch.stack([td, conservative, taken.mean(), grad_norm]).detach()

    def _continuous_step(self, base: sac.Agent, batch: Transitions, clock: Clock) -> torch.Tensor:
        """The critics' TD loss plus α times CQL(H)'s penalty for each, a step down it; then SAC's
        actor and temperature steps."""
        config, learner, generator = self.config, base.learner, self.generator
        step = partial(OptimizerStep, spec=config.optimizer, frame=clock.frame, max_frame=self.max_frame)
        obs, next_obs, alpha = flat_float(batch.obs), flat_float(batch.next_obs), base.alpha()
        with torch.no_grad():
            next_q = learner.target_values(next_obs, generator, alpha)
            target = batch.rewards + config.gamma * (1 - batch.terminated) * next_q
        q1, q2 = base.critic(obs, batch.actions)
        td = functional.mse_loss(q1, target) + functional.mse_loss(q2, target)
        ood1, ood2 = self._logsumexp_q(base, obs, next_obs)
        penalties = (ood1 - q1).mean(), (ood2 - q2).mean()
        conservative = penalties[0] + penalties[1]
        if self.lagrange is None:
            multiplier = td.new_ones(())
            penalty = config.conservative_weight * conservative
        else:  # CORL's cql_lagrange: each critic's α'·α·(penalty − τ), α' as it stood before its own step
            log_multiplier, multiplier_optimizer = self.lagrange
            multiplier = log_multiplier.exp().clamp(0.0, 1e6)[0]
            gaps = [p - config.lagrange_threshold for p in penalties]
            penalty = multiplier.detach() * config.conservative_weight * (gaps[0] + gaps[1])
            ascent = -multiplier * config.conservative_weight * (gaps[0].detach() + gaps[1].detach()) * 0.5
            step(multiplier_optimizer).down(ascent)
        step(base.critic_optimizer).down(td + penalty)
        actor_loss, log_prob = learner.actor_step(obs, generator, alpha, step(base.actor_optimizer))
        if config.alpha == "auto":
            learner.temperature_step(base.log_alpha, log_prob, base.target_entropy, step(base.alpha_optimizer))
        with torch.no_grad():
            base.target_update.polyak(config.tau)
            clock.opt_step += 1
            stats = [
                td, conservative, torch.min(q1, q2).mean(), actor_loss, td.new_tensor(alpha), -log_prob.mean(),
                multiplier.detach(),
            ]  # fmt: skip
            return torch.stack(stats).detach()

    def _logsumexp_q(
        self, base: sac.Agent, obs: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each critic's log ∫ exp Q(s, a) da, estimated by importance sampling from
        `n_action_samples` uniformly random actions (density 2^−dims), as many the policy samples
        at s and as many at s′ (their log-probabilities, without gradient): logsumexp over all of
        them of Q(s, a) − log density(a)."""
        n, batch, dims = self.config.n_action_samples, len(obs), int(np.prod(base.low.shape))
        uniform = torch.rand((batch * n, dims), generator=self.generator).to(obs.device) * 2 - 1
        repeated, next_repeated = obs.repeat_interleave(n, dim=0), next_obs.repeat_interleave(n, dim=0)
        with torch.no_grad():
            here, here_log_prob = base.policy(repeated, self.generator)
            there, there_log_prob = base.policy(next_repeated, self.generator)
        actions = torch.cat([uniform, here, there])
        log_density = torch.cat([uniform.new_full((batch * n,), -dims * math.log(2)), here_log_prob, there_log_prob])
        q1, q2 = base.critic(repeated.repeat(3, 1), actions)
        # (3, batch, n) → (batch, 3n): each observation's samples of every kind
        by_observation = [(q - log_density).view(3, batch, n).transpose(0, 1).reshape(batch, 3 * n) for q in (q1, q2)]
        return torch.logsumexp(by_observation[0], dim=1), torch.logsumexp(by_observation[1], dim=1)

    def _learning_arithmetic(self) -> AbstractContextManager[None]:
        return flushing_subnormals(self.device, flush=self.flush)

    def _metrics(self, steps: list[torch.Tensor]) -> Metrics:
        """The steps' diagnostics, each the mean over them, read only when the session reports."""
        if isinstance(self.base, dqn.Agent):
            epsilon = self.config.epsilon.value(self.base.frame, self.max_frame)
            lr = self.base.optimizer.param_groups[0]["lr"]
            return Metrics(lambda: {**step_means(DISCRETE_STATS, steps), "epsilon": epsilon, "lr": lr})
        lr = self.base.critic_optimizer.param_groups[0]["lr"]
        return Metrics(lambda: {**step_means(CONTINUOUS_STATS, steps), "lr": lr})

    # -- state (the base agent's: weights, optimisers, generator, memory) ---------------------------

    def state_dict(self) -> dict[str, Any]:
        state = self.base.state_dict()
        if self.lagrange is not None:
            log_multiplier, optimizer = self.lagrange
            state |= {
                "cql_log_multiplier": log_multiplier.detach().clone(),
                "cql_multiplier_optimizer": optimizer.state_dict(),
            }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base.load_state_dict(state)
        if self.lagrange is not None:
            log_multiplier, optimizer = self.lagrange
            with torch.no_grad():
                log_multiplier.copy_(state["cql_log_multiplier"])
            optimizer.load_state_dict(state["cql_multiplier_optimizer"])
