"""SAC (Haarnoja et al., 2018): off-policy actor-critic for continuous actions with an entropy
bonus whose weight (the temperature alpha) tunes itself towards a target entropy.

A tanh-squashed Gaussian actor; two critics and their Polyak-averaged targets (the smaller of the
two values is used, against over-estimation); uniform random actions until `learning_starts`.
The temperature and its optimiser are part of the agent's state, so they resume exactly.

With gSDE (`agent.sde`, `SdeActor`) the actor's noise is state-dependent, as Stable-Baselines3's SAC
with `use_sde`: acting holds a matrix per env copy (drawn at each training round's first step and
every `sample_freq` steps), each gradient step draws one for its batch.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional

from rlrun.algorithms import kernels as kernel_for
from rlrun.algorithms.base import (
    ActingGraph,
    Fast,
    Metrics,
    Step,
    TargetUpdate,
    flat_float,
    mlp,
    obs_size,
    step_means,
)
from rlrun.algorithms.distributions import StateDependentNoise
from rlrun.algorithms.optim import OptimizerStep, flushing_subnormals, make_optimizer
from rlrun.algorithms.replay import ReplayMemory
from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock
from rlrun.spec import NetworkSpec
from rlrun.spec.agents.onpolicy import SdeSpec
from rlrun.spec.agents.sac import Config

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
_LOG_2PI = math.log(2 * math.pi)


class Actor(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, network: NetworkSpec) -> None:
        super().__init__()
        self.body = mlp(obs_dim, 2 * action_dim, network)

    def forward(self, obs: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Squashed actions in [-1, 1] and their log-probabilities; the mean's squash when
        `generator` is None."""
        return squash(self.body(obs), generator)


class SdeActor(nn.Module):
    """SAC's actor with gSDE (SB3's `Actor` with `use_sde`): the network's last hidden features
    (the latent) give the mean, clipped to ±`CLIP_MEAN` (SB3's hard tanh), and the noise's spread
    through `StateDependentNoise`; the action is the tanh of their sum."""

    CLIP_MEAN = 2.0

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        network: NetworkSpec,
        spec: SdeSpec,
        log_std_init: float,
        learn_features: bool,
    ) -> None:
        super().__init__()
        self.body = mlp(obs_dim, action_dim, network)
        last = self.body[-1]
        assert isinstance(last, nn.Linear)
        # SB3's `learn_features` (`Arithmetic.sac_sde_learns_features`): the noise trains the latent.
        self.noise = StateDependentNoise(
            last.in_features, action_dim, spec, log_std_init, learn_features=learn_features
        )

    def latent_and_mean(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        latent = self.body[:-1](obs)
        return latent, self.body[-1](latent).clamp(-self.CLIP_MEAN, self.CLIP_MEAN)

    def forward(self, obs: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Squashed actions and their log-probabilities, the batch's noise one matrix drawn from
        `generator` (SB3's `reset_noise()` before each gradient step: the std's gradient flows
        through it); the mean's squash when `generator` is None."""
        latent, mean = self.latent_and_mean(obs)
        if generator is None:
            return torch.tanh(mean), torch.zeros(len(mean), device=mean.device)
        shape = (self.noise.latent, self.noise.outputs)
        matrix = self.noise.std() * torch.randn(shape, generator=generator).to(mean.device)  # drawn on the host
        gaussian = mean + self.noise.trained(latent) @ matrix
        action = torch.tanh(gaussian)
        log_prob, _ = self.noise.evaluate(latent, mean, gaussian, entropy=False)
        return action, log_prob - torch.log(1 - action.pow(2) + 1e-6).sum(-1)  # the change of variables


def squash(out: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """`Actor.forward` from its network's output `out` (means, then log standard deviations)."""
    if generator is None:
        return torch.tanh(out.chunk(2, dim=-1)[0]), torch.zeros(len(out), device=out.device)
    sample = sample_squashed(out, generator)
    return sample.action, sample.log_prob


class Squashed(NamedTuple):
    """A squashed Gaussian sample and what its gradient needs (a kernel's backward reads them)."""

    action: torch.Tensor
    log_prob: torch.Tensor
    unclamped: torch.Tensor
    """The network's log standard deviations, before the clamp."""
    std: torch.Tensor
    noise: torch.Tensor
    squeeze: torch.Tensor
    """1 - action^2 + 1e-6, the change of variables' factor, per action dimension."""


def sample_squashed(out: torch.Tensor, generator: torch.Generator) -> Squashed:
    """Squashed actions sampled from the Gaussians of the network's output `out` (means, then log
    standard deviations), their log-probabilities, and the terms they are made of."""
    mean, unclamped = out.chunk(2, dim=-1)
    log_std = unclamped.clamp(LOG_STD_MIN, LOG_STD_MAX)
    noise = torch.randn(mean.shape, generator=generator).to(mean.device)  # drawn on the host
    std = log_std.exp()
    action = torch.tanh(mean + std * noise)
    gaussian = (-0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)
    squeeze = 1 - action.pow(2) + 1e-6  # the change of variables
    return Squashed(action, gaussian - torch.log(squeeze).sum(-1), unclamped, std, noise, squeeze)


class Autograd:
    """Autograd's learner, for every network: SAC's three gradient steps, each loss written as
    autograd differentiates it."""

    def __init__(self, actor: Actor | SdeActor, critic: Critic, critic_target: Critic) -> None:
        self.actor, self.critic, self.critic_target = actor, critic, critic_target

    def target_values(self, next_obs: torch.Tensor, generator: torch.Generator, alpha: float) -> torch.Tensor:
        """The soft value of the next observations: the smaller target critic's value of an action
        the actor samples there, less alpha times its log-probability."""
        next_action, next_log_prob = self.actor(next_obs, generator)
        return torch.min(*self.critic_target(next_obs, next_action)) - alpha * next_log_prob

    def critic_step(
        self, obs: torch.Tensor, action: torch.Tensor, target: torch.Tensor, step: OptimizerStep
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Both critics' values of the replayed actions and their loss, after a step down it."""
        q1, q2 = self.critic(obs, action)
        loss = 0.5 * (functional.mse_loss(q1, target) + functional.mse_loss(q2, target))
        step.down(loss)
        return q1, q2, loss

    def actor_step(
        self, obs: torch.Tensor, generator: torch.Generator, alpha: float, step: OptimizerStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's loss and its sampled actions' log-probabilities, after a step down it."""
        action, log_prob = self.actor(obs, generator)
        # The actor's gradient flows through the critics to the actions only: the critics' weights
        # need none (they would be computed, then thrown away, by the next critic step).
        self.critic.requires_grad_(False)
        actor_q = torch.min(*self.critic(obs, action))
        self.critic.requires_grad_(True)
        loss = (alpha * log_prob - actor_q).mean()
        step.down(loss)
        return loss, log_prob

    @staticmethod
    def temperature_step(
        log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float, step: OptimizerStep
    ) -> None:
        """A step of the temperature down its loss."""
        loss = -(log_alpha * (log_prob.detach() + target_entropy)).mean()
        step.down(loss)


class Critic(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, network: NetworkSpec) -> None:
        super().__init__()
        self.q1 = mlp(obs_dim + action_dim, 1, network)
        self.q2 = mlp(obs_dim + action_dim, 1, network)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = torch.cat([obs, action], dim=-1)
        return self.q1(inputs).squeeze(-1), self.q2(inputs).squeeze(-1)


_STEP_STATS = ("critic_loss", "actor_loss", "alpha", "q_mean", "entropy")


class StepTensors(NamedTuple):
    """What a gradient step's `_STEP_STATS` are computed from, once read (`base.Metrics`): tensors
    the step made and nothing changes afterwards."""

    critic_loss: torch.Tensor
    actor_loss: torch.Tensor
    alpha: float
    q1: torch.Tensor
    q2: torch.Tensor
    log_prob: torch.Tensor


@torch.no_grad()
def _step_stats(steps: list[StepTensors], flush: Callable[[], AbstractContextManager[None]]) -> dict[str, float]:
    """The `_STEP_STATS`, each the mean over an update's gradient steps; the kernels that computed
    them at each step before they were deferred, on the same values and with subnormals flushed as
    they were then (`flush`), so the same numbers."""
    with flush():
        rows = [
            torch.stack(
                [
                    step.critic_loss,
                    step.actor_loss,
                    step.critic_loss.new_tensor(step.alpha),
                    torch.min(step.q1, step.q2).mean(),
                    -step.log_prob.mean(),
                ]
            )
            for step in steps
        ]
    return step_means(_STEP_STATS, rows)


class SquashedActor:
    """How a SAC agent plays (`base.Actor`): the tanh-squashed Gaussian's mean (greedy) or a draw
    from it, scaled to the env's bounds; no memory."""

    state_shape = None

    def __init__(self, policy: Actor | SdeActor, fast_policy: Fast, low: np.ndarray, high: np.ndarray) -> None:
        self.policy, self.fast_policy, self.low, self.high = policy, fast_policy, low, high

    def initial_state(self, batch: int) -> None:
        return None

    def step(
        self, obs: np.ndarray, state: None, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> tuple[np.ndarray, None]:
        mean, log_std = np.split(self.fast_policy(obs), 2, axis=-1)
        if deterministic:
            return self.to_env(np.tanh(mean)), None
        if generator is None:
            raise ValueError("an actor draws its actions from the caller's generator: pass one")
        noise = torch.randn(mean.shape, generator=generator).numpy()
        return self.to_env(np.tanh(mean + np.exp(np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)) * noise)), None

    def to_env(self, squashed: np.ndarray) -> np.ndarray:
        """Actions in [-1, 1] scaled to the env's bounds."""
        return self.low + (squashed + 1) * 0.5 * (self.high - self.low)

    def from_env(self, action: np.ndarray) -> np.ndarray:
        """The env's actions scaled to [-1, 1] (`to_env`'s inverse), as the critics take them."""
        return 2 * (action - self.low) / (self.high - self.low) - 1

    def graph(self) -> ActingGraph:
        assert isinstance(self.policy, Actor)
        return SquashedGraph(self.policy, self.low, self.high)


class SdeSquashedActor(SquashedActor):
    """`SquashedActor` with gSDE: the clipped mean's squash (greedy), or a draw with matrices of
    its own from the caller's generator, or (training) with the matrices the agent holds."""

    def __init__(self, policy: SdeActor, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__(policy, Fast(policy.body), low, high)
        self.sde_policy = policy
        self.fast_latent, self.fast_mean = Fast(policy.body[:-1]), Fast(policy.body[-1:])

    def step(
        self, obs: np.ndarray, state: None, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> tuple[np.ndarray, None]:
        if deterministic:
            return self.to_env(np.tanh(self.mean(self.fast_latent(obs)))), None
        if generator is None:
            raise ValueError("an actor draws its actions from the caller's generator: pass one")
        return self.explore(obs, self.sde_policy.noise.draw_matrices(len(obs), generator)), None

    def mean(self, latent: np.ndarray) -> np.ndarray:
        clip = SdeActor.CLIP_MEAN
        return np.clip(self.fast_mean(latent), -clip, clip)

    def explore(self, obs: np.ndarray, matrices: np.ndarray) -> np.ndarray:
        """Actions for `obs`, each row's noise its latent features times its matrix."""
        latent = self.fast_latent(obs)
        return self.to_env(np.tanh(self.sde_policy.noise.sample(latent, self.mean(latent), matrices)[0]))

    def graph(self) -> ActingGraph:
        return SdeSquashedGraph(self.sde_policy, self.low, self.high)


class SquashedGraph(ActingGraph):
    """The greedy policy as torch (`SquashedActor.graph`): the squashed mean scaled to the bounds,
    and the Gaussian's `mean` and `log_std` (clamped as sampling clamps it)."""

    outputs = ("action", "mean", "log_std")

    def __init__(self, policy: Actor, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.body = policy.body
        self.low: torch.Tensor
        self.span: torch.Tensor
        self.register_buffer("low", torch.from_numpy(np.asarray(low)))
        self.register_buffer("span", torch.from_numpy(np.asarray(high - low)))

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean, log_std = self.body(flat_float(observation)).chunk(2, dim=-1)
        action = self.low + (torch.tanh(mean) + 1) * 0.5 * self.span
        return action, mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)


class SdeSquashedGraph(ActingGraph):
    """The greedy gSDE policy as torch: the squashed clipped mean scaled to the bounds, and the mean
    (its spread depends on the state through the latent features: not an output)."""

    outputs = ("action", "mean")

    def __init__(self, policy: SdeActor, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.policy = policy
        self.low: torch.Tensor
        self.span: torch.Tensor
        self.register_buffer("low", torch.from_numpy(np.asarray(low)))
        self.register_buffer("span", torch.from_numpy(np.asarray(high - low)))

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, mean = self.policy.latent_and_mean(flat_float(observation))
        return self.low + (torch.tanh(mean) + 1) * 0.5 * self.span, mean


class Agent:
    METRICS = (*_STEP_STATS, "lr")
    """`alpha`: the entropy coefficient; `q_mean`: the smaller critic's mean on replayed actions;
    `entropy`: the policy's, estimated from its sampled actions' log-probabilities."""
    HEADLINE = "alpha"

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
    ) -> None:
        assert isinstance(action_space, spaces.Box)  # rlrun.spec.spaces refuses the others
        self.config, self.num_envs, self.max_frame, self.device = config, num_envs, max_frame, device
        self.arithmetic = arithmetic  # the flags of the run's learning arithmetic (MetaSpec.arithmetic)
        obs_dim, action_dim = obs_size(obs_space), int(np.prod(action_space.shape))
        self.low = action_space.low.astype(np.float32)
        self.high = action_space.high.astype(np.float32)
        self.noise: np.ndarray | None = None
        """With gSDE: each env copy's exploration matrix (envs, latent, actions). State."""
        self.noise_steps = 0
        """With gSDE: steps acted since the training round's start, the matrices' clock. State."""
        self.policy: Actor | SdeActor
        self.actor: SquashedActor
        """How the agent plays outside training (`base.Actor`)."""
        if config.sde is None:
            self.policy = Actor(obs_dim, action_dim, config.network).to(device)
            self.fast_actor = Fast(self.policy.body)
            self.actor = SquashedActor(self.policy, self.fast_actor, self.low, self.high)
        else:
            self.policy = SdeActor(
                obs_dim,
                action_dim,
                config.network,
                config.sde,
                config.log_std_init,
                learn_features=arithmetic.sac_sde_learns_features,
            ).to(device)
            self.actor = SdeSquashedActor(self.policy, self.low, self.high)
            self.noise = np.zeros((num_envs, self.policy.noise.latent, action_dim), dtype=np.float32)
        self.critic = Critic(obs_dim, action_dim, config.network).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_update = TargetUpdate(self.critic_target, self.critic)
        self.learner: Autograd | kernel_for.SoftActorCriticKernel = kernel_for.find_soft_actor_critic(
            self.policy, self.critic, self.critic_target, arithmetic, kernels
        ) or Autograd(self.policy, self.critic, self.critic_target)
        """Takes the gradient steps: autograd, or a kernel that computes the same (built-in MLPs:
        `rlrun.algorithms.kernels`; `kernels`: the spec's `meta.kernels`)."""
        self.actor_optimizer = make_optimizer(config.optimizer, list(self.policy.parameters()), max_frame)
        self.critic_optimizer = make_optimizer(config.optimizer, list(self.critic.parameters()), max_frame)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(config.alpha_init), device=device))
        self.alpha_optimizer = make_optimizer(config.optimizer, [self.log_alpha], max_frame)
        self.target_entropy = -float(action_dim) if config.target_entropy == "auto" else config.target_entropy
        self.memory = ReplayMemory(
            config.memory,
            tuple(obs_space.shape or ()),
            np.dtype(obs_space.dtype),
            (action_dim,),
            np.dtype(np.float32),
            num_envs=num_envs,
            frame_stack=frame_stack,
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.frame = 0
        """The clock's frame at the last update: random actions are taken until learning_starts."""

    def alpha(self) -> float:
        return math.exp(self.log_alpha.item()) if self.config.alpha == "auto" else float(self.config.alpha)

    # -- acting ---------------------------------------------------------------------------------

    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> np.ndarray:
        training = not deterministic and generator is None
        if training and self.frame < self.config.learning_starts:
            squashed = torch.rand((len(obs), len(self.low)), generator=self.generator).numpy() * 2 - 1
            return self.actor.to_env(squashed)
        if training and isinstance(self.actor, SdeSquashedActor):
            return self.actor.explore(obs, self.explored())
        return self.actor.step(obs, None, deterministic=deterministic, generator=generator or self.generator)[0]

    def explored(self) -> np.ndarray:
        """gSDE's matrices for this step: drawn at a training round's first step and every
        `sample_freq` steps (SB3's `reset_noise` in `collect_rollouts`), else held."""
        assert self.noise is not None and self.config.sde is not None and isinstance(self.policy, SdeActor)
        every = self.config.sde.sample_freq
        if self.noise_steps == 0 or (every > 0 and self.noise_steps % every == 0):
            self.noise = self.policy.noise.draw_matrices(self.num_envs, self.generator).astype(np.float32)
        self.noise_steps += 1
        return self.noise

    def observe(self, step: Step) -> None:
        squashed = self.actor.from_env(step.action)
        self.memory.add(
            step.obs, squashed.reshape(len(step.obs), -1), step.reward, step.next_obs, step.terminated, step.truncated
        )

    # -- learning -------------------------------------------------------------------------------

    def update(self, clock: Clock) -> Mapping[str, float]:
        self.frame = clock.frame
        previous = clock.frame - self.num_envs
        config = self.config
        if clock.frame < config.learning_starts or self.memory.size < config.batch_size:
            return {}
        rounds = clock.frame // config.train_frequency - previous // config.train_frequency
        with self._learning_arithmetic():
            steps = [self._gradient_step(clock) for _ in range(rounds * config.gradient_steps)]
        if rounds:  # the next steps collect a new round: gSDE draws its matrices afresh
            self.noise_steps = 0
        if not steps:
            return {}
        # read when the session reports or snapshots (every few thousand frames), not every update
        lr = self.actor_optimizer.param_groups[0]["lr"]
        return Metrics(lambda: {**_step_stats(steps, self._learning_arithmetic), "lr": lr})

    def _learning_arithmetic(self) -> AbstractContextManager[None]:
        """With the run's arithmetic's `sac_flushes_subnormals`, SAC learns with subnormal floats
        flushed, as DQN always has: Adam's moments of dead ReLU units decay through them."""
        return flushing_subnormals(self.device, flush=self.arithmetic.sac_flushes_subnormals)

    def _gradient_step(self, clock: Clock) -> StepTensors:
        """One gradient step of the critics, the actor and the temperature; returns the tensors its
        `_STEP_STATS` come from."""
        config = self.config
        batch = self.memory.sample(config.batch_size, self.generator).to(self.device)
        obs, next_obs = flat_float(batch.obs), flat_float(batch.next_obs)
        alpha = self.alpha()
        learner = self.learner
        step = partial(OptimizerStep, spec=config.optimizer, frame=clock.frame, max_frame=self.max_frame)
        with torch.no_grad():
            next_q = learner.target_values(next_obs, self.generator, alpha)
            target = batch.rewards + config.gamma * (1 - batch.terminated) * next_q
        q1, q2, critic_loss = learner.critic_step(obs, batch.actions, target, step(self.critic_optimizer))
        actor_loss, log_prob = learner.actor_step(obs, self.generator, alpha, step(self.actor_optimizer))
        if config.alpha == "auto":
            learner.temperature_step(self.log_alpha, log_prob, self.target_entropy, step(self.alpha_optimizer))
        with torch.no_grad():
            self.target_update.polyak(config.tau)
            clock.opt_step += 1
        return StepTensors(critic_loss, actor_loss, alpha, q1, q2, log_prob)  # read under no_grad

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.policy.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "frame": self.frame,
            **self.memory.state_dict(),
            **(
                {}
                if self.noise is None
                else {"sde_noise": torch.from_numpy(self.noise.copy()), "sde_steps": self.noise_steps}
            ),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.generator.set_state(state["generator"])
        self.frame = state["frame"]
        self.memory.load_state_dict(state)
        if self.noise is not None:
            self.noise, self.noise_steps = state["sde_noise"].numpy().copy(), state["sde_steps"]
