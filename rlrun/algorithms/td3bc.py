"""TD3+BC (Fujimoto & Gu, 2021): TD3 with a behaviour-cloning term in the actor's loss, for learning
from a dataset (CORL's `td3_bc.py`), then online.

A deterministic tanh actor and its target; twin critics and their targets. Each gradient step fits
both critics to r + γ(1 − terminated) min Q_target(s', π_target(s') + clipped noise); every
`policy_freq` steps the actor descends −λ Q(s, π(s)) + (π(s) − a)², λ = alpha / mean|Q| (so the
critic's scale does not matter), and the targets move a Polyak step. Actions are learned scaled to
[-1, 1]. Offline (`meta.offline_updates`) each step's batch is the dataset's; online the agent acts
with Gaussian exploration noise, keeps its steps in a replay memory, and each batch mixes dataset
and memory rows by `data.mixing` (`rlrun.algorithms.mixing`). The memory and the generator every
draw comes from are in every snapshot, so a resume before, at or after the switch is exact.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional

from rlrun.algorithms import kernels as kernel_for
from rlrun.algorithms.base import ActingGraph, Fast, Step, TargetUpdate, flat_float, mlp, obs_size
from rlrun.algorithms.mixing import mixed_batch
from rlrun.algorithms.optim import OptimizerStep, make_optimizer
from rlrun.algorithms.replay import ReplayMemory
from rlrun.algorithms.replay import Transitions as Batch
from rlrun.algorithms.sac import Critic
from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock
from rlrun.data import Transitions
from rlrun.spec import MemorySpec, NetworkSpec
from rlrun.spec.agents.td3bc import Config


class TanhPolicy(nn.Module):
    """A deterministic policy: the tanh of an MLP's output, actions in [-1, 1]."""

    def __init__(self, obs_dim: int, action_dim: int, network: NetworkSpec) -> None:
        super().__init__()
        self.body = mlp(obs_dim, action_dim, network)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.body(obs))


class TanhActor:
    """How a tanh policy plays (`base.Actor`): its action (greedy), or that action plus Gaussian
    noise of standard deviation `spread()` drawn from the caller's generator, clipped to [-1, 1];
    scaled to the env's bounds. No memory."""

    state_shape = None

    def __init__(
        self, policy: TanhPolicy, low: np.ndarray, high: np.ndarray, spread: Callable[[], np.ndarray | float]
    ) -> None:
        self.policy, self.fast, self.low, self.high, self.spread = policy, Fast(policy.body), low, high, spread

    def initial_state(self, batch: int) -> None:
        return None

    def step(
        self, obs: np.ndarray, state: None, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> tuple[np.ndarray, None]:
        mean = np.tanh(self.fast(obs))
        if deterministic:
            return self.to_env(mean), None
        if generator is None:
            raise ValueError("an actor draws its actions from the caller's generator: pass one")
        noise = torch.randn(mean.shape, generator=generator).numpy()
        return self.to_env(np.clip(mean + self.spread() * noise, -1.0, 1.0)), None

    def to_env(self, squashed: np.ndarray) -> np.ndarray:
        """Actions in [-1, 1] scaled to the env's bounds."""
        return self.low + (squashed + 1) * 0.5 * (self.high - self.low)

    def from_env(self, actions: torch.Tensor) -> torch.Tensor:
        """Actions as the env takes them (a batch's) scaled to [-1, 1], as the policy gives them."""
        low, high = (torch.from_numpy(bound).to(actions.device) for bound in (self.low, self.high))
        return 2 * (actions - low) / (high - low) - 1

    def graph(self) -> ActingGraph:
        return TanhGraph(self.policy, self.low, self.high)


class TanhGraph(ActingGraph):
    """The tanh policy as torch (`TanhActor.graph`): its action scaled to the bounds."""

    outputs = ("action",)

    def __init__(self, policy: TanhPolicy, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.policy = policy
        self.low: torch.Tensor
        self.span: torch.Tensor
        self.register_buffer("low", torch.from_numpy(np.asarray(low)))
        self.register_buffer("span", torch.from_numpy(np.asarray(high - low)))

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor]:
        """A tuple, as every acting graph gives its `outputs`: the exports and checks take the action first."""
        return (self.low + (self.policy(flat_float(observation)) + 1) * 0.5 * self.span,)


def online_memory(
    spec: MemorySpec, obs_space: spaces.Space, action_dim: int, num_envs: int, frame_stack: int
) -> ReplayMemory:
    """The replay memory of an agent's online steps (actions as the env takes them, float32)."""
    return ReplayMemory(
        spec,
        tuple(obs_space.shape or ()),
        np.dtype(obs_space.dtype),
        (action_dim,),
        np.dtype(np.float32),
        num_envs=num_envs,
        frame_stack=frame_stack,
    )


class TanhAgent:
    """What TD3+BC and IQL share: a tanh actor over the action box, the online replay memory, the
    generator every draw comes from, and the dataset the session gives; acting, observing, and each
    gradient step's batch (`rlrun.algorithms.mixing`: all the dataset's offline, mixed online).
    Online, one gradient step per env step, as offline (`update` is `update_offline`)."""

    actor: TanhActor
    """How the agent plays outside training (`base.Actor`); the subclass makes it."""

    def __init__(
        self,
        network: NetworkSpec,
        memory: MemorySpec,
        obs_space: spaces.Space,
        action_space: spaces.Space,
        *,
        seed: int,
        num_envs: int,
        max_frame: int,
        device: torch.device,
        frame_stack: int,
        mixing: float,
    ) -> None:
        assert isinstance(action_space, spaces.Box)  # rlrun.spec.spaces refuses the others
        self.max_frame, self.device, self.mixing = max_frame, device, mixing
        self.obs_dim, self.action_dim = obs_size(obs_space), int(np.prod(action_space.shape))
        self.low = action_space.low.astype(np.float32)
        self.high = action_space.high.astype(np.float32)
        self.policy = TanhPolicy(self.obs_dim, self.action_dim, network).to(device)  # the first network made
        self.memory = online_memory(memory, obs_space, self.action_dim, num_envs, frame_stack)
        self.generator = torch.Generator().manual_seed(seed)
        self.rows: Transitions | None = None
        """The dataset (given by the session, never in a snapshot: the spec names and pins it)."""

    def learn_from(self, rows: Transitions) -> None:
        self.rows = rows

    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> np.ndarray:
        return self.actor.step(obs, None, deterministic=deterministic, generator=generator or self.generator)[0]

    def observe(self, step: Step) -> None:
        actions = step.action.reshape(len(step.obs), -1)
        self.memory.add(step.obs, actions, step.reward, step.next_obs, step.terminated, step.truncated)

    def update(self, clock: Clock) -> dict[str, float]:
        """Online: one gradient step per env step, on a mixed batch."""
        return self.update_offline(clock)

    def update_offline(self, clock: Clock) -> dict[str, float]:
        raise NotImplementedError

    def batch(self, batch_size: int) -> tuple[Batch, torch.Tensor, torch.Tensor, torch.Tensor]:
        """A gradient step's batch (`mixed_batch`) on the agent's device, and its observations,
        next observations and actions as the networks take them (flat floats; actions in [-1, 1])."""
        assert self.rows is not None, "the session gives the dataset before the first update"
        batch = mixed_batch(self.rows, self.memory, batch_size, self.mixing, self.generator).to(self.device)
        return batch, flat_float(batch.obs), flat_float(batch.next_obs), self.actor.from_env(batch.actions)


class Autograd:
    """Autograd's learner, for every network: TD3+BC's target values and its critics' and actor's
    gradient steps, each loss written as autograd differentiates it (`kernels.td3_bc` computes
    the same for built-in MLPs)."""

    def __init__(self, policy: TanhPolicy, policy_target: TanhPolicy, critic: Critic, critic_target: Critic) -> None:
        self.policy, self.policy_target, self.critic, self.critic_target = policy, policy_target, critic, critic_target

    def target_values(self, next_obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The smaller target critic's value of the target actor's action plus `noise` (clipped
        already), clamped to [-1, 1] (no gradient)."""
        with torch.no_grad():
            next_actions = self.policy_target(next_obs) + noise
            return torch.min(*self.critic_target(next_obs, next_actions.clamp(-1.0, 1.0)))

    def critic_step(
        self, obs: torch.Tensor, actions: torch.Tensor, target: torch.Tensor, step: OptimizerStep
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Both critics' values of the data's actions and their loss, after a step down it."""
        q1, q2 = self.critic(obs, actions)
        loss = functional.mse_loss(q1, target) + functional.mse_loss(q2, target)
        step.down(loss)
        return q1, q2, loss

    def actor_step(
        self, obs: torch.Tensor, actions: torch.Tensor, alpha: float, step: OptimizerStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's loss −λ Q1(s, π(s)) + (π(s) − a)², λ = alpha / mean|Q1|, and its
        behaviour-cloning term, after a step down it."""
        pi = self.policy(obs)
        self.critic.requires_grad_(False)  # the actor's gradient flows through the critic to its actions only
        q = self.critic.q1(torch.cat([obs, pi], dim=-1)).squeeze(-1)  # Q1 alone, as TD3's actor asks
        self.critic.requires_grad_(True)
        lmbda = alpha / q.abs().mean().detach()
        bc_loss = functional.mse_loss(pi, actions)
        loss = -lmbda * q.mean() + bc_loss
        step.down(loss)
        return loss, bc_loss


class Agent(TanhAgent):
    METRICS = ("critic_loss", "actor_loss", "bc_loss", "q_mean", "lr")
    """`critic_loss`: both critics' squared TD errors; `actor_loss`: −λQ + the behaviour-cloning
    error, `bc_loss` that error alone (both at actor steps only, every `policy_freq`); `q_mean`:
    the critics' mean value of the batch's actions."""
    HEADLINE = "critic_loss"

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
        self.policy_target = copy.deepcopy(self.policy).requires_grad_(False)
        self.critic = Critic(obs_dim, action_dim, config.network).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.targets = [TargetUpdate(self.policy_target, self.policy), TargetUpdate(self.critic_target, self.critic)]
        self.actor_optimizer = make_optimizer(config.optimizer, list(self.policy.parameters()), max_frame)
        self.critic_optimizer = make_optimizer(config.optimizer, list(self.critic.parameters()), max_frame)
        self.actor = TanhActor(self.policy, self.low, self.high, lambda: config.exploration_noise)
        self.learner: Autograd | kernel_for.TD3BCKernel = kernel_for.find_td3_bc(
            self.policy, self.policy_target, self.critic, self.critic_target, arithmetic, kernels
        ) or Autograd(self.policy, self.policy_target, self.critic, self.critic_target)
        """Takes the gradient steps: autograd, or a kernel that computes the same (built-in MLPs:
        `rlrun.algorithms.kernels`; `kernels`: the spec's `meta.kernels`)."""

    # -- learning -------------------------------------------------------------------------------

    def update_offline(self, clock: Clock) -> dict[str, float]:
        config = self.config
        batch, obs, next_obs, actions = self.batch(config.batch_size)

        noise = torch.randn(actions.shape, generator=self.generator).to(self.device) * config.policy_noise
        next_q = self.learner.target_values(next_obs, noise.clamp(-config.noise_clip, config.noise_clip))
        target = batch.rewards + config.gamma * (1 - batch.terminated) * next_q
        step = partial(OptimizerStep, spec=config.optimizer, frame=clock.frame, max_frame=self.max_frame)
        q1, q2, critic_loss = self.learner.critic_step(obs, actions, target, step(self.critic_optimizer))
        stats = {"critic_loss": critic_loss.detach(), "q_mean": torch.min(q1, q2).detach().mean()}

        if (clock.opt_step + 1) % config.policy_freq == 0:  # TD3's delayed actor and target updates (CORL's count)
            actor_loss, bc_loss = self.learner.actor_step(obs, actions, config.alpha, step(self.actor_optimizer))
            with torch.no_grad():
                for target_update in self.targets:
                    target_update.polyak(config.tau)
            stats |= {"actor_loss": actor_loss.detach(), "bc_loss": bc_loss.detach()}
        clock.opt_step += 1
        values = dict(zip(stats, torch.stack(list(stats.values())).tolist(), strict=True))
        return {**values, "lr": self.actor_optimizer.param_groups[0]["lr"]}

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.policy.state_dict(),
            "actor_target": self.policy_target.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            **self.memory.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["actor"])
        self.policy_target.load_state_dict(state["actor_target"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.generator.set_state(state["generator"])
        self.memory.load_state_dict(state)
