"""IQL, implicit Q-learning (Kostrikov, Nair & Levine, 2022): offline RL that never asks the critics
about actions outside the dataset (CORL's `iql.py`), then online.

Three networks learn at each gradient step, in CORL's order:
- the value network V(s) fits an expectile of the target critics' min Q_target(s, a) on the data's
  actions (the asymmetric squared loss |expectile − 1(u < 0)| u², u = Q_target − V);
- the twin critics fit r + γ(1 − terminated) V(s'), V taken before its step; their targets move a
  Polyak step after;
- the actor imitates the data's actions weighted by exp(beta · (Q_target − V)), clipped to
  `exp_adv_max`: the Gaussian's negative log-likelihood of each action (its mean the tanh of the
  network's output, its log std one learned number per action dimension), or the deterministic
  actor's squared error.
Actions are learned scaled to [-1, 1]. Offline (`meta.offline_updates`) each batch is the dataset's;
online the agent acts with its Gaussian's samples (the deterministic actor with its action), keeps
its steps in a replay memory, and each batch mixes dataset and memory rows by `data.mixing`
(`rlrun.algorithms.mixing`). The memory and the generator are in every snapshot.
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional

from rlrun.algorithms import kernels as kernel_for
from rlrun.algorithms.base import TargetUpdate, mlp
from rlrun.algorithms.optim import OptimizerStep, make_optimizer
from rlrun.algorithms.sac import LOG_STD_MAX, LOG_STD_MIN, Critic
from rlrun.algorithms.td3bc import TanhActor, TanhAgent, TanhPolicy
from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock
from rlrun.spec.agents.iql import Config


class Autograd:
    """Autograd's learner, for every network: IQL's value network's, critics' and actor's gradient
    steps, each loss written as autograd differentiates it (`kernels.implicit_q` computes the same
    for built-in MLPs). `log_std`: the Gaussian actor's (None for the deterministic one)."""

    def __init__(
        self, policy: TanhPolicy, log_std: nn.Parameter | None, value: nn.Module, critic: Critic, critic_target: Critic
    ) -> None:
        self.policy, self.log_std = policy, log_std
        self.value, self.critic, self.critic_target = value, critic, critic_target

    def target_values(
        self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The smaller target critic's value of the data's actions, and V of the next
        observations (no gradient)."""
        with torch.no_grad():
            return torch.min(*self.critic_target(obs, actions)), self.value(next_obs).squeeze(-1)

    def value_step(
        self, obs: torch.Tensor, target_q: torch.Tensor, expectile: float, step: OptimizerStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The advantages Q_target − V(s) and the expectile loss |expectile − 1(u < 0)| u² (its
        mean), after a step of V down it."""
        advantage = target_q - self.value(obs).squeeze(-1)
        loss = (torch.abs(expectile - (advantage < 0).float()) * advantage.pow(2)).mean()
        step.down(loss)
        return advantage.detach(), loss

    def critic_step(
        self, obs: torch.Tensor, actions: torch.Tensor, target: torch.Tensor, step: OptimizerStep
    ) -> torch.Tensor:
        """The critics' loss (the mean of their squared TD errors' means), after a step down it."""
        q1, q2 = self.critic(obs, actions)
        loss = (functional.mse_loss(q1, target) + functional.mse_loss(q2, target)) / 2
        step.down(loss)
        return loss

    def actor_step(
        self, obs: torch.Tensor, actions: torch.Tensor, weights: torch.Tensor, step: OptimizerStep
    ) -> torch.Tensor:
        """The advantage-weighted imitation loss: the mean of `weights` times each action's negative
        log-likelihood under the Gaussian (its mean the policy's action, its log std `log_std`), or
        its squared error from the deterministic actor's action; after a step down it."""
        mean = self.policy(obs)
        if self.log_std is not None:
            std = self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp()
            imitation = -torch.distributions.Normal(mean, std).log_prob(actions).sum(-1)
        else:
            imitation = (mean - actions).pow(2).sum(-1)
        loss = (weights * imitation).mean()
        step.down(loss)
        return loss


class Agent(TanhAgent):
    METRICS = ("value_loss", "q_loss", "actor_loss", "advantage", "lr")
    """`value_loss`: the expectile loss of V; `q_loss`: the critics' squared TD errors (their
    mean); `actor_loss`: the advantage-weighted imitation loss; `advantage`: the batch's mean
    Q_target − V."""
    HEADLINE = "q_loss"

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
        mixing: float = 0.5,
        arithmetic: Arithmetic = NEWEST,
        kernels: str = "auto",
    ) -> None:
        super().__init__(
            config.network,
            config.memory,
            obs_space,
            action_space,
            seed=seed,
            num_envs=num_envs,
            max_frame=max_frame,
            device=device,
            frame_stack=frame_stack,
            mixing=mixing,
        )
        self.config, obs_dim, action_dim = config, self.obs_dim, self.action_dim
        self.log_std = nn.Parameter(torch.zeros(action_dim, device=device))
        """The Gaussian actor's log standard deviation (CORL's `GaussianPolicy`); unused by the deterministic."""
        gaussian = config.actor == "gaussian"
        self.actor = TanhActor(self.policy, self.low, self.high, self._spread if gaussian else lambda: 0.0)
        self.value = mlp(obs_dim, 1, config.network).to(device)
        self.critic = Critic(obs_dim, action_dim, config.network).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_update = TargetUpdate(self.critic_target, self.critic)
        actor_parameters = [*self.policy.parameters(), *([self.log_std] if gaussian else [])]
        self.actor_optimizer = make_optimizer(config.optimizer, actor_parameters, max_frame)
        self.value_optimizer = make_optimizer(config.optimizer, list(self.value.parameters()), max_frame)
        self.critic_optimizer = make_optimizer(config.optimizer, list(self.critic.parameters()), max_frame)
        networks = (self.policy, self.log_std if gaussian else None, self.value, self.critic, self.critic_target)
        self.learner: Autograd | kernel_for.IQLKernel = kernel_for.find_implicit_q(*networks, kernels) or Autograd(
            *networks
        )
        """Takes the gradient steps: autograd, or a kernel that computes the same (built-in MLPs:
        `rlrun.algorithms.kernels`; `kernels`: the spec's `meta.kernels`)."""

    def _spread(self) -> np.ndarray:
        return self.log_std.detach().clamp(LOG_STD_MIN, LOG_STD_MAX).exp().cpu().numpy()

    # -- learning -------------------------------------------------------------------------------

    def update_offline(self, clock: Clock) -> dict[str, float]:
        config = self.config
        batch, obs, next_obs, actions = self.batch(config.batch_size)
        step = partial(OptimizerStep, spec=config.optimizer, frame=clock.frame, max_frame=self.max_frame)
        target_q, next_v = self.learner.target_values(obs, actions, next_obs)

        # the value network: an expectile of the target critics' values
        advantage, value_loss = self.learner.value_step(obs, target_q, config.expectile, step(self.value_optimizer))

        # the critics: one-step TD targets bootstrapped from V
        target = batch.rewards + config.gamma * (1 - batch.terminated) * next_v
        q_loss = self.learner.critic_step(obs, actions, target, step(self.critic_optimizer))
        with torch.no_grad():
            self.target_update.polyak(config.tau)

        # the actor: advantage-weighted imitation of the data's actions
        weights = torch.exp(config.beta * advantage).clamp(max=config.exp_adv_max)
        actor_loss = self.learner.actor_step(obs, actions, weights, step(self.actor_optimizer))

        clock.opt_step += 1
        values = torch.stack([value_loss.detach(), q_loss.detach(), actor_loss.detach(), advantage.mean()]).tolist()
        names = ("value_loss", "q_loss", "actor_loss", "advantage")
        return {**dict(zip(names, values, strict=True)), "lr": self.actor_optimizer.param_groups[0]["lr"]}

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.policy.state_dict(),
            "log_std": self.log_std.detach().clone(),
            "value": self.value.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "value_optimizer": self.value_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            **self.memory.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["actor"])
        with torch.no_grad():
            self.log_std.copy_(state["log_std"])
        self.value.load_state_dict(state["value"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.value_optimizer.load_state_dict(state["value_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.generator.set_state(state["generator"])
        self.memory.load_state_dict(state)
