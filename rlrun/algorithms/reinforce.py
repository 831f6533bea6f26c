"""REINFORCE (Williams, 1992): Monte-Carlo policy gradient with an optional baseline.

Each vector-env copy collects whole episodes; after `episodes_per_update` of them have finished,
one gradient step raises the log-probability of each action in proportion to its discounted
return-to-go (minus a baseline), plus an entropy bonus.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rlrun.algorithms.base import ActingGraph, Fast, Step, explained_variance, flat_float, mlp_or_user
from rlrun.algorithms.distributions import Policy, policy_for
from rlrun.algorithms.optim import make_optimizer, optimise
from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock
from rlrun.spec.agents.reinforce import Config


class Actor:
    """How a REINFORCE agent plays (`base.Actor`): its policy network's logits, without a memory."""

    state_shape = None

    def __init__(self, policy: nn.Module, fast_policy: Fast, distribution: Policy) -> None:
        self.policy, self.fast_policy, self.distribution = policy, fast_policy, distribution

    def initial_state(self, batch: int) -> None:
        return None

    def step(
        self, obs: np.ndarray, state: None, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> tuple[np.ndarray, None]:
        logits = self.fast_policy(obs)
        if deterministic:
            return self.distribution.to_env(self.distribution.greedy(logits)), None
        if generator is None:
            raise ValueError("an actor draws its actions from the caller's generator: pass one")
        return self.distribution.to_env(self.distribution.sample(logits, generator)[0]), None

    def graph(self) -> ActingGraph:
        return Graph(self.policy, self.distribution)


class Graph(ActingGraph):
    """The greedy policy as torch (`Actor.graph`): the action and the `logits` it is chosen from."""

    outputs = ("action", "logits")

    def __init__(self, policy: nn.Module, distribution: Policy) -> None:
        super().__init__()
        self.policy, self.greedy = policy, distribution.greedy_graph()

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.policy(flat_float(observation))
        return self.greedy(logits), logits


class Agent:
    METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "explained_variance", "grad_norm", "lr")
    """explained_variance only with the learned value baseline."""
    HEADLINE = "entropy"

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
        arithmetic: Arithmetic = NEWEST,
        kernels: str = "auto",
    ) -> None:
        self.config, self.max_frame, self.device = config, max_frame, device
        self.arithmetic = arithmetic  # the flags of the run's learning arithmetic (MetaSpec.arithmetic)
        self.distribution = policy_for(action_space)  # Discrete, MultiDiscrete or MultiBinary: rlrun.spec.spaces
        self.policy = mlp_or_user(obs_space, self.distribution.outputs, config.network, output_gain=0.01).to(device)
        self.fast_policy = Fast(self.policy)
        self.actor = Actor(self.policy, self.fast_policy, self.distribution)
        """How the agent plays outside training (`base.Actor`)."""
        self.value = mlp_or_user(obs_space, 1, config.network).to(device) if config.baseline == "value" else None
        params = list(self.policy.parameters()) + (list(self.value.parameters()) if self.value else [])
        self.optimizer = make_optimizer(config.optimizer, params, max_frame)
        self.generator = torch.Generator().manual_seed(seed)
        self.running: list[list[tuple[np.ndarray, Any, float]]] = [[] for _ in range(num_envs)]
        """The episode each env copy is in the middle of: (obs, action, reward) per step."""
        self.finished: list[list[tuple[np.ndarray, Any, float]]] = []
        """Whole episodes waiting for the next update."""

    # -- acting ---------------------------------------------------------------------------------

    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> np.ndarray:
        logits = self.fast_policy(obs)
        if deterministic:
            return self.distribution.to_env(self.distribution.greedy(logits))
        actions, _ = self.distribution.sample(logits, generator or self.generator)
        return self.distribution.to_env(actions)

    def observe(self, step: Step) -> None:
        drawn = self.distribution.from_env(step.action)
        for i, episode in enumerate(self.running):
            action = drawn[i] if self.distribution.shape else int(drawn[i])
            episode.append((step.obs[i], action, float(step.reward[i])))
            if step.terminated[i] or step.truncated[i]:
                self.finished.append(episode)
                self.running[i] = []

    def restart_episodes(self) -> None:
        """The env restarted every episode (a resume that could not restore it mid-episode)."""
        self.running = [[] for _ in self.running]

    # -- learning -------------------------------------------------------------------------------

    def update(self, clock: Clock) -> dict[str, float]:
        if len(self.finished) < self.config.episodes_per_update:
            return {}
        episodes, self.finished = self.finished, []
        obs = torch.as_tensor(np.stack([o for ep in episodes for o, _, _ in ep]), dtype=torch.float32)
        obs = obs.reshape(len(obs), -1).to(self.device)
        actions = torch.as_tensor(
            np.array([a for ep in episodes for _, a, _ in ep], dtype=np.int64), device=self.device
        )
        host_returns = np.concatenate([self._returns([r for _, _, r in ep]) for ep in episodes])
        returns = torch.as_tensor(host_returns, device=self.device)

        chosen, entropies = self.distribution.evaluate(self.policy(obs), actions, entropy=True)
        assert entropies is not None
        entropy = entropies.mean()
        advantages, value_loss, values = self._advantages(obs, returns)
        policy_loss = -(chosen * advantages).mean()
        entropy_coef = self.config.entropy_coef.value(clock.frame, self.max_frame)
        loss = policy_loss - entropy_coef * entropy + self.config.value_coef * value_loss
        grad_norm = optimise(self.optimizer, loss, self.config.optimizer, clock.frame, self.max_frame)
        clock.opt_step += 1
        return {
            **self._diagnostics(obs, actions, chosen, policy_loss, value_loss, entropy, grad_norm),
            **({} if values is None else {"explained_variance": explained_variance(values, host_returns)}),
            "lr": self.optimizer.param_groups[0]["lr"],
        }

    def _diagnostics(
        self, obs: torch.Tensor, actions: torch.Tensor, chosen: torch.Tensor, *scalars: torch.Tensor
    ) -> dict[str, float]:
        """The losses, entropy and gradient norm, and how far the step moved the policy on these
        episodes (approximate KL, from one small forward pass)."""
        with torch.no_grad():
            after, _ = self.distribution.evaluate(self.policy(obs), actions, entropy=False)
            policy_loss, value_loss, entropy, grad_norm = scalars
            stats = torch.stack([policy_loss, value_loss, entropy, (chosen - after).mean(), grad_norm]).tolist()
        return dict(zip(("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm"), stats, strict=True))

    def _returns(self, rewards: list[float]) -> np.ndarray:
        returns = np.empty(len(rewards), dtype=np.float32)
        running = 0.0
        for t in range(len(rewards) - 1, -1, -1):
            running = rewards[t] + self.config.gamma * running
            returns[t] = running
        return returns

    def _advantages(
        self, obs: torch.Tensor, returns: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, np.ndarray | None]:
        """Advantages, the baseline's loss, and its predictions (None without a learned one)."""
        value_loss = torch.zeros((), device=obs.device)
        predicted = None
        if self.value is not None:
            values = self.value(obs).squeeze(-1)
            value_loss = 0.5 * (values - returns).pow(2).mean()
            advantages = returns - values.detach()
            predicted = values.detach().cpu().numpy()
        elif self.config.baseline == "mean":
            advantages = returns - returns.mean()
        else:
            advantages = returns
        if self.config.normalize_advantages and len(advantages) > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        return advantages, value_loss, predicted

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy.state_dict(),
            "value": self.value.state_dict() if self.value else None,
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "running": [_episode_tensors(ep) for ep in self.running],
            "finished": [_episode_tensors(ep) for ep in self.finished],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        if self.value is not None:
            self.value.load_state_dict(state["value"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.running = [_episode_steps(ep) for ep in state["running"]]
        self.finished = [_episode_steps(ep) for ep in state["finished"]]


def _episode_tensors(episode: list[tuple[np.ndarray, Any, float]]) -> dict[str, torch.Tensor]:
    """An episode as tensors (exact: obs keep their dtype, rewards are float64)."""
    if not episode:
        return {}
    return {
        "obs": torch.from_numpy(np.stack([o for o, _, _ in episode])),
        "actions": torch.from_numpy(np.array([a for _, a, _ in episode], dtype=np.int64)),
        "rewards": torch.tensor([r for _, _, r in episode], dtype=torch.float64),
    }


def _episode_steps(tensors: dict[str, torch.Tensor]) -> list[tuple[np.ndarray, Any, float]]:
    if not tensors:
        return []
    obs, rewards = tensors["obs"].numpy(), tensors["rewards"].tolist()
    actions = tensors["actions"].numpy() if tensors["actions"].dim() > 1 else tensors["actions"].tolist()
    return [(obs[t], actions[t], rewards[t]) for t in range(len(actions))]
