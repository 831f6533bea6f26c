"""What A2C and PPO share: an actor-critic, a rollout buffer, and generalised advantage estimation.

The actor outputs logits (Discrete, MultiDiscrete and MultiBinary actions: `distributions`) or a
Gaussian mean with a learned, state-independent log standard deviation (continuous actions), or
with gSDE (`agent.sde`) a mean and state-dependent noise (`distributions.StateDependentNoise`); the
critic is a separate network of the same shape, as in Stable-Baselines3's default. Probabilities
are computed directly, without `torch.distributions`, which costs more than the network itself at
these sizes. With a memory (`agent.network.recurrent`, `rlrun.algorithms.recurrent`) each head reads
its own recurrent cell; the agent keeps every env copy's state and learns from whole sequences.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple, Protocol

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rlrun.algorithms import kernels as kernel_for
from rlrun.algorithms.base import (
    ActingGraph,
    Fast,
    NatureCNN,
    Step,
    channels_last_zeros,
    copy_into,
    explained_variance,
    flat_float,
    obs_size,
    orthogonal,
    to_device,
    zero_state,
)
from rlrun.algorithms.base import network as make_network
from rlrun.algorithms.distributions import Policy, StateDependentNoise, policy_for
from rlrun.algorithms.optim import make_optimizer, optimise
from rlrun.algorithms.recurrent import Recurrent
from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock
from rlrun.errors import BadInput
from rlrun.spec import NetworkSpec, OptimizerSpec
from rlrun.spec.agents.onpolicy import OnPolicyConfig, SdeSpec

_LOG_2PI = math.log(2 * math.pi)


class ActorCritic(nn.Module):
    def __init__(
        self,
        obs_space: spaces.Space,
        action_space: spaces.Space,
        network: NetworkSpec,
        log_std_init: float,
        device: torch.device,
        arithmetic: Arithmetic = NEWEST,
        sde: SdeSpec | None = None,
    ) -> None:
        super().__init__()
        self.continuous = isinstance(action_space, spaces.Box)
        self.policy: Policy | None = None if self.continuous else policy_for(action_space)
        """The discrete policy over the actor's logits; None: the Gaussian's mean."""
        outputs = int(np.prod(action_space.shape or ())) if self.policy is None else self.policy.outputs
        self.action_shape = tuple(action_space.shape or ()) if self.policy is None else self.policy.shape
        """One action as the rollout keeps it."""
        self.shared: NatureCNN | None = None
        """Convolutions both heads read (a nature_cnn network), or None: two separate MLPs."""
        self.recurrent: Recurrent | None = None
        """The memory (`agent.network.recurrent`): a torso and a cell before each linear head; None: none."""
        if network.kind == "nature_cnn":
            self.shared = NatureCNN(obs_space, network, arithmetic=arithmetic)
        if network.recurrent is not None:
            self.recurrent = Recurrent(obs_space, network, self.shared)
            self.actor: nn.Module = _linear_head(network.recurrent.size, outputs, gain=0.01)
            self.critic: nn.Module = _linear_head(network.recurrent.size, 1, gain=1.0)
        elif self.shared is not None:
            self.actor = _linear_head(self.shared.width, outputs, gain=0.01)
            self.critic = _linear_head(self.shared.width, 1, gain=1.0)
        else:
            self.actor = make_network(obs_space, outputs, network, output_gain=0.01)
            self.critic = make_network(obs_space, 1, network)
        self.log_std = nn.Parameter(torch.full((outputs,), log_std_init), requires_grad=self.continuous and sde is None)
        """The Gaussian policy's log standard deviation (unused for discrete actions and with gSDE)."""
        self.sde: StateDependentNoise | None = None
        """gSDE's noise over the actor's latent features (`agent.sde`); None: the Gaussian's `log_std`."""
        if sde is not None:
            self.sde = StateDependentNoise(self._latent_width(network, obs_space), outputs, sde, log_std_init)
        self.to(device)  # before the acting copies, which hold the weights where they are
        self.fast_actor, self.fast_critic = Fast(self.actor), Fast(self.critic)
        if self.sde is not None:  # the actor's layers before its output one, and that one
            assert isinstance(self.actor, nn.Sequential)
            self.fast_latent, self.fast_mean = Fast(self.actor[:-1]), Fast(self.actor[-1:])
        if self.recurrent is not None:
            self.recurrent.ready()
        if self.continuous:
            assert isinstance(action_space, spaces.Box)
            self.low, self.high = action_space.low, action_space.high  # the env's bounds: spec, not state

    def _latent_width(self, network: NetworkSpec, obs_space: spaces.Space) -> int:
        """The width of what the actor's output layer reads: gSDE's latent features (BadInput
        where gSDE does not apply)."""
        if not self.continuous:
            raise BadInput("agent.sde: gSDE explores continuous actions, and this env's are discrete; remove agent.sde")
        if network.user or not isinstance(self.actor, nn.Sequential):
            raise BadInput(
                "agent.sde: gSDE reads the actor's last hidden features, which a network of your own does not"
                " expose; remove agent.sde or use a built-in network kind"
            )
        last = self.actor[-1]
        assert isinstance(last, nn.Linear)
        return last.in_features

    # -- acting, in NumPy: the heads read `features(obs)` -------------------------------------

    def features(self, obs: np.ndarray) -> np.ndarray:
        """What the heads read: the observations themselves, or the shared convolutions' output."""
        if self.shared is None:
            return obs
        device = self.log_std.device
        return self.shared.act(torch.from_numpy(np.asarray(obs)).to(device)).cpu().numpy()

    def sample(
        self, features: np.ndarray, generator: torch.Generator, matrices: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sampled actions (unclipped) and their log-probabilities, computed with NumPy. With gSDE,
        with training's exploration `matrices` (one per row), or else matrices drawn for this call."""
        if self.sde is None:
            return self.draw(self.fast_actor(features), generator)
        latent = self.fast_latent(features)
        if matrices is None:
            matrices = self.sde.draw_matrices(len(latent), generator)
        return self.sde.sample(latent, self.fast_mean(latent), matrices)

    def draw(self, out: np.ndarray, generator: torch.Generator) -> tuple[np.ndarray, np.ndarray]:
        """`sample` from the actor's output `out`."""
        if self.policy is not None:
            return self.policy.sample(out, generator)
        log_std = self.log_std.detach().cpu().numpy()
        noise = torch.randn(out.shape, generator=generator).numpy()
        return out + np.exp(log_std) * noise, (-0.5 * noise**2 - log_std - 0.5 * _LOG_2PI).sum(-1)

    def greedy(self, features: np.ndarray) -> np.ndarray:
        return self.pick(self.fast_actor(features))

    def pick(self, out: np.ndarray) -> np.ndarray:
        """The greedy actions for the actor's output `out`."""
        return out if self.policy is None else self.policy.greedy(out)

    def values(self, obs: np.ndarray, memory: np.ndarray | None = None) -> np.ndarray:
        """The critic's values of `obs`; with a memory, read from `memory` (which stays as it is)."""
        if self.recurrent is None:
            return self.fast_critic(self.features(obs))[:, 0]
        assert memory is not None
        return self.fast_critic(self.recurrent.critic_output(self.features(obs), memory))[:, 0]

    def remember(self, obs: np.ndarray, memory: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """With a memory (training's): the actor's output on `obs`, the memory after reading it,
        and the critic's values."""
        assert self.recurrent is not None
        after, critic_out = self.recurrent.step(self.features(obs), memory)
        out = self.fast_actor(after[0])
        return out, after, self.fast_critic(critic_out)[:, 0]

    # -- learning, in torch ---------------------------------------------------------------------

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor, *, entropy: bool, scaled: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Log-probabilities of `actions`, with gradients, the policy's entropy if asked, and the
        values (one pass of shared convolutions for both heads; `scaled`: frames the
        convolutions' `NatureCNN.scaled` already made floats)."""
        features = obs
        if self.shared is not None:
            features = self.shared.of_scaled(obs) if scaled else self.shared(obs)
        values = self.critic(features).squeeze(-1)
        return *self.actor_heads(features, actions, entropy=entropy), values

    def evaluate_sequences(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        memory: torch.Tensor,
        starts: torch.Tensor,
        *,
        entropy: bool,
        scaled: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """`evaluate` with a memory, over whole sequences: `obs` and `actions` are steps × envs rows
        (step-major), read from each env copy's `memory` at the first step (parts, envs, size),
        the state zeroed before each step where `starts` (steps, envs) is 1."""
        assert self.recurrent is not None
        features = obs
        if self.shared is not None:
            features = self.shared.of_scaled(obs) if scaled else self.shared(obs)
        actor, critic = self.recurrent.unroll(features, memory, starts)
        return *self.actor_heads(actor, actions, entropy=entropy), self.critic(critic).squeeze(-1)

    def actor_heads(
        self, features: torch.Tensor, actions: torch.Tensor, *, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`heads` of the actor's output on `features`; with gSDE, of its mean and latent features."""
        if self.sde is None:
            return self.heads(self.actor(features), actions, entropy=entropy)
        assert isinstance(self.actor, nn.Sequential)
        latent = self.actor[:-1](features)
        return self.sde.evaluate(latent, self.actor[-1](latent), actions, entropy=entropy)

    def heads(
        self, out: torch.Tensor, actions: torch.Tensor, *, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The policy's log-probabilities of `actions` and (if asked) its entropies, from the actor's
        output `out` (logits, or the Gaussian's mean)."""
        if self.policy is not None:
            return self.policy.evaluate(out, actions, entropy=entropy)
        z = (actions - out) / self.log_std.exp()
        log_probs = (-0.5 * z.pow(2) - self.log_std - 0.5 * _LOG_2PI).sum(dim=-1)
        entropies = (0.5 + 0.5 * _LOG_2PI + self.log_std).sum().expand(len(out)) if entropy else None
        return log_probs, entropies

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """What the env is given: continuous actions clipped to its bounds, discrete ones in its shape."""
        return np.clip(actions, self.low, self.high) if self.policy is None else self.policy.to_env(actions)


class ActorCriticActor:
    """How an A2C or PPO agent plays (`base.Actor`): its actor head over the observations, or
    over the actor's cell with a memory (the state is that cell's alone: playing needs no value)."""

    def __init__(self, model: ActorCritic) -> None:
        self.model = model
        recurrent = model.recurrent
        self.state_shape = None if recurrent is None else (recurrent.parts, recurrent.size)

    def initial_state(self, batch: int) -> np.ndarray | None:
        return zero_state(self.state_shape, batch)

    def step(
        self,
        obs: np.ndarray,
        state: np.ndarray | None,
        *,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        model = self.model
        features = model.features(obs)
        if model.recurrent is not None:
            assert state is not None
            state = model.recurrent.actor_step(features, state)
            features = state[0]
        if deterministic:
            return model.to_env(model.pick(model.fast_actor(features))), state
        if generator is None:
            raise ValueError("an actor draws its actions from the caller's generator: pass one")
        return model.to_env(model.sample(features, generator)[0]), state

    def graph(self) -> ActingGraph:
        return ActorCriticGraph(self.model) if self.model.recurrent is None else RecurrentActorCriticGraph(self.model)


class ActorCriticGraph(ActingGraph):
    """The greedy actor as torch (`ActorCriticActor.graph`): `logits`, or a Gaussian's `mean`
    (clipped to the env's bounds for the action) and its state-independent `log_std`."""

    def __init__(self, model: ActorCritic) -> None:
        super().__init__()
        self.shared, self.actor = model.shared, model.actor
        self.outputs = ("action", "logits") if model.policy is not None else ("action", "mean", "log_std")
        self.sde = model.sde is not None
        if self.sde:  # gSDE's spread depends on the state through the latent features: the mean alone
            self.outputs = ("action", "mean")
        self.greedy = None if model.policy is None else model.policy.greedy_graph()
        self.fixed_log_std: torch.Tensor  # not `log_std`: an ONNX initializer may not share an output's name
        self.low: torch.Tensor
        self.high: torch.Tensor
        if model.policy is None:
            self.register_buffer("fixed_log_std", model.log_std.detach().clone())
            self.register_buffer("low", torch.from_numpy(np.asarray(model.low)))
            self.register_buffer("high", torch.from_numpy(np.asarray(model.high)))

    def features(self, observation: torch.Tensor) -> torch.Tensor:
        """What the actor's layers read: float rows, or the shared convolutions' (which scale the frames)."""
        return flat_float(observation if self.shared is None else self.shared(observation))

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.heads(self.actor(self.features(observation)))

    def heads(self, out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.greedy is not None:
            return self.greedy(out), out
        action = torch.maximum(torch.minimum(out, self.high), self.low)  # np.clip
        if self.sde:
            return action, out
        return action, out, self.fixed_log_std.expand(out.shape[0], -1)


class RecurrentActorCriticGraph(ActorCriticGraph):
    """`ActorCriticGraph` with a memory: the actor's torso and cell before its head; `next_state` last."""

    def __init__(self, model: ActorCritic) -> None:
        super().__init__(model)
        assert model.recurrent is not None
        self.torso, self.cell = model.recurrent.actor_torso, model.recurrent.actor_cell.graph()
        self.outputs = (*self.outputs, "next_state")

    def forward(self, observation: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        after = self.cell(self.torso(self.features(observation)), state)
        return *self.heads(self.actor(after[0])), after


def _linear_head(inputs: int, outputs: int, gain: float) -> nn.Sequential:
    return nn.Sequential(orthogonal(nn.Linear(inputs, outputs), gain=gain))


class Rollout:
    """`steps` transitions from each of `envs` env copies, in preallocated arrays."""

    FIELDS = ("obs", "actions", "log_probs", "values", "rewards", "done")

    def __init__(
        self, steps: int, envs: int, obs_layout: ObsLayout, action_shape: tuple[int, ...], continuous: bool
    ) -> None:
        self.steps, self.envs = steps, envs
        self.obs = obs_layout.zeros((steps, envs))
        self.actions = np.zeros((steps, envs, *action_shape), dtype=np.float32 if continuous else np.int64)
        self.log_probs = np.zeros((steps, envs), dtype=np.float32)
        self.values = np.zeros((steps, envs), dtype=np.float32)
        self.rewards = np.zeros((steps, envs), dtype=np.float32)
        self.done = np.zeros((steps, envs), dtype=np.float32)
        """1 where the episode ended at this step (terminated or truncated): no bootstrap across it."""
        self.filled = 0

    @property
    def full(self) -> bool:
        return self.filled == self.steps

    def add(self, **fields: np.ndarray) -> None:
        for name, value in fields.items():
            copy_into(getattr(self, name)[self.filled], value)
        self.filled += 1

    def starts(self) -> np.ndarray:
        """1 where a step's observation is an episode's first (the step before ended one); the
        first step's memory was already zeroed where one starts."""
        starts = np.zeros_like(self.done)
        starts[1:] = self.done[:-1]
        return starts

    def advantages(self, last_values: np.ndarray, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
        """Generalised advantage estimation (Schulman et al., 2016); lam = 1 gives n-step returns.
        An episode's end cuts the bootstrap; a truncated one had its value folded into the reward."""
        advantages = np.zeros_like(self.rewards)
        running = np.zeros(self.envs, dtype=np.float32)
        next_values = last_values
        for t in range(self.steps - 1, -1, -1):
            alive = 1.0 - self.done[t]
            delta = self.rewards[t] + gamma * next_values * alive - self.values[t]
            running = delta + gamma * lam * alive * running
            advantages[t] = running
            next_values = self.values[t]
        return advantages, advantages + self.values

    def state_dict(self) -> dict[str, Any]:
        """The part collected so far (a snapshot can fall mid-rollout)."""
        return {
            "filled": self.filled,
            **{name: torch.from_numpy(getattr(self, name)[: self.filled].copy()) for name in self.FIELDS},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.filled = state["filled"]
        for name in self.FIELDS:
            getattr(self, name)[: self.filled] = state[name].numpy()


def bootstrap_truncated(
    rewards: np.ndarray,
    truncated: np.ndarray,
    terminated: np.ndarray,
    next_obs: np.ndarray,
    critic: ActorCritic,
    gamma: float,
    memory: np.ndarray | None = None,
) -> np.ndarray:
    """An episode cut by a time limit did not end: add the discounted value of where it stopped
    (as Stable-Baselines3 does), so the time limit is not learned as a terminal state. With a
    memory, the critic reads the final observation from `memory`, its state after the step's
    observation (sb3-contrib's RecurrentPPO does the same)."""
    cut = truncated & ~terminated
    if not cut.any():
        return rewards
    rewards = rewards.astype(np.float32, copy=True)
    rewards[cut] += gamma * critic.values(next_obs[cut], None if memory is None else memory[:, cut])
    return rewards


class ObsLayout(NamedTuple):
    """How a rollout keeps observations: flat float32 rows for an MLP; for a CNN, frames as the env
    gives them (uint8: a quarter of the memory, scaled inside the network)."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    @classmethod
    def of(cls, obs_space: spaces.Space, network: NetworkSpec) -> ObsLayout:
        if network.kind == "nature_cnn":
            return cls(tuple(obs_space.shape or ()), np.dtype(obs_space.dtype))
        return cls((obs_size(obs_space),), np.dtype(np.float32))

    def zeros(self, leading: tuple[int, ...]) -> np.ndarray:
        """Room for `leading` batches of observations (images laid out as the convolutions read them)."""
        return channels_last_zeros(leading, self.shape, self.dtype)

    def rows(self, obs: np.ndarray) -> np.ndarray:
        """A batch of observations in this layout."""
        return obs.reshape(len(obs), *self.shape).astype(self.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# The collect half of an on-policy agent; A2C and PPO add how they learn from a full rollout.


class Loss(Protocol):
    """An on-policy loss made of what the learner's `evaluate` returned: its `total`, in autograd's
    form, and the terms it is made of (which a kernel's gradient of it reads, by its `NAME`)."""

    NAME: ClassVar[str]

    def total(self) -> torch.Tensor: ...


class Autograd:
    """Autograd's learner, for every model: `ActorCritic.evaluate` with its graph, and one
    gradient step down a loss's `total`."""

    def __init__(self, model: ActorCritic) -> None:
        self.model = model

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor, *, entropy: bool, scaled: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        return self.model.evaluate(obs, actions, entropy=entropy, scaled=scaled)

    @staticmethod
    def step(
        loss: Loss, optimizer: torch.optim.Optimizer, spec: OptimizerSpec, frame: int, max_frame: int
    ) -> torch.Tensor:
        """One gradient step down `loss`; the gradient norm before clipping."""
        return optimise(optimizer, loss.total(), spec, frame, max_frame)


class OnPolicyAgent:
    config: OnPolicyConfig
    LOSS: ClassVar[str]
    """The `NAME` of the algorithm's loss (a kernel learns down the losses it knows)."""

    def __init__(
        self,
        config: OnPolicyConfig,
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
        self.config, self.num_envs, self.max_frame, self.device = config, num_envs, max_frame, device
        self.arithmetic = arithmetic  # the flags of the run's learning arithmetic (MetaSpec.arithmetic)
        self.model = ActorCritic(
            obs_space, action_space, config.network, config.log_std_init, device, arithmetic, config.sde
        )
        self.learner: Autograd | kernel_for.ActorCriticKernel = kernel_for.find_actor_critic(
            self.model, self.LOSS, kernels
        ) or Autograd(self.model)
        """Evaluates the model on a minibatch and steps a loss made of what it returned: autograd,
        or a kernel that computes the same (`rlrun.algorithms.kernels`; `kernels`: `meta.kernels`)."""
        self.optimizer = make_optimizer(config.optimizer, list(self.model.parameters()), max_frame)
        self.generator = torch.Generator().manual_seed(seed)
        self.obs_layout = ObsLayout.of(obs_space, config.network)
        self.rollout = Rollout(
            config.n_steps, num_envs, self.obs_layout, self.model.action_shape, self.model.continuous
        )
        self.next_obs = np.zeros((num_envs, *self.obs_layout.shape), dtype=self.obs_layout.dtype)
        """Where the last collected step led: its value bootstraps the rollout's tail."""
        self._acted: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None = None
        self.hidden: np.ndarray | None = None
        """With a memory: each env copy's (`Recurrent`'s layout), as training's last step left it,
        zeroed where an episode ended. State: in every snapshot."""
        self.rollout_hidden: np.ndarray | None = None
        """... and as it was before the rollout's first step: where learning re-reads the rollout from."""
        self.chunk_hidden: np.ndarray | None = None
        """With sequence chunks (`chunk_length`): the memory before each chunk's first step,
        (chunks, parts, envs, size); where learning re-reads each chunk from. State."""
        if self.model.recurrent is not None:
            self.hidden = self.model.recurrent.initial(num_envs)
            self.rollout_hidden = self.hidden.copy()
            length = self.chunk_length()
            if length is not None:
                chunks = -(-config.n_steps // length)
                self.chunk_hidden = np.zeros((chunks, *self.hidden.shape), dtype=np.float32)
        self.noise: np.ndarray | None = None
        """With gSDE: each env copy's exploration matrix (envs, latent, actions), drawn at each
        rollout's start and every `sde.sample_freq` steps of it (the rollout's `filled` is the
        clock). State: in every snapshot."""
        if self.model.sde is not None:
            self.noise = np.zeros((num_envs, self.model.sde.latent, self.model.sde.outputs), dtype=np.float32)
        self._actor = ActorCriticActor(self.model)

    def chunk_length(self) -> int | None:
        """The steps of each sequence chunk learning reads (an algorithm's `sequence_length`);
        None: whole rollouts of one env copy."""
        return None

    @property
    def actor(self) -> ActorCriticActor:
        """How the agent plays outside training (`base.Actor`)."""
        return self._actor

    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> np.ndarray:
        if self.hidden is not None:
            if deterministic or generator is not None:
                raise RuntimeError(
                    "an agent with a memory plays through its actor: training's memory is for training's steps"
                )
            out, after, values = self.model.remember(obs, self.hidden)
            if self.noise is None:
                actions, log_probs = self.model.draw(out, self.generator)
            else:
                actions, log_probs = self.model.sample(after[0], self.generator, self.explored())
            self._acted = (actions, log_probs, values, after)
            return self.model.to_env(actions)
        features = self.model.features(obs)
        if deterministic:
            return self.model.to_env(self.model.greedy(features))
        if generator is not None:  # playing: its own draws, gSDE's matrices too
            return self.model.to_env(self.model.sample(features, generator)[0])
        noise = None if self.noise is None else self.explored()
        actions, log_probs = self.model.sample(features, self.generator, noise)
        self._acted = (actions, log_probs, self.model.fast_critic(features)[:, 0], None)  # what the rollout needs
        return self.model.to_env(actions)

    def explored(self) -> np.ndarray:
        """gSDE's exploration matrices for this step: drawn anew at the rollout's start and every
        `sample_freq` steps (SB3's `reset_noise` in `collect_rollouts`), else held."""
        assert self.noise is not None and self.model.sde is not None and self.config.sde is not None
        filled, every = self.rollout.filled, self.config.sde.sample_freq
        if filled == 0 or (every > 0 and filled % every == 0):
            self.noise = self.model.sde.draw_matrices(self.num_envs, self.generator).astype(np.float32)
        return self.noise

    def observe(self, step: Step) -> None:
        assert self._acted is not None, "observe() follows a training act()"
        actions, log_probs, values, after = self._acted
        done = step.terminated | step.truncated
        rewards = bootstrap_truncated(
            step.reward, step.truncated, step.terminated, step.next_obs, self.model, self.config.gamma, after
        )
        if self.hidden is not None and self.rollout.filled == 0:  # the memory this rollout starts from
            self.rollout_hidden = self.hidden.copy()
        length = self.chunk_length()
        if self.chunk_hidden is not None and length is not None and self.rollout.filled % length == 0:
            assert self.hidden is not None
            self.chunk_hidden[self.rollout.filled // length] = self.hidden  # a chunk starts here
        self.rollout.add(
            obs=self.obs_layout.rows(step.obs),
            actions=actions,
            log_probs=log_probs,
            values=values,
            rewards=rewards,
            done=done,
        )
        self.next_obs = self.obs_layout.rows(step.next_obs).copy()
        if after is not None:
            after[:, done] = 0.0  # an episode that ended: the next one starts from zeros
            self.hidden = after

    def update(self, clock: Clock) -> dict[str, float]:
        if not self.rollout.full:
            return {}
        last_values = self.model.values(self.next_obs, self.hidden)
        advantages, returns = self.rollout.advantages(last_values, self.config.gamma, self.advantage_lambda())
        batch = {
            name: torch.from_numpy(getattr(self.rollout, name)).flatten(0, 1)
            for name in ("obs", "actions", "log_probs", "values")
        }
        batch["advantages"] = torch.from_numpy(advantages).flatten()
        batch["returns"] = torch.from_numpy(returns).flatten()
        if self.rollout_hidden is not None:  # whole sequences: where each starts, where episodes start
            chunks = self.chunk_hidden
            batch["memory"] = torch.from_numpy(self.rollout_hidden if chunks is None else chunks)
            batch["starts"] = torch.from_numpy(self.rollout.starts())
        metrics = self.learn(to_device(batch, self.device), clock)
        self.rollout.filled = 0
        return {
            **metrics,
            "explained_variance": explained_variance(self.rollout.values, returns),
            "lr": self.optimizer.param_groups[0]["lr"],
        }

    def restart_episodes(self) -> None:
        """The env restarted every episode (a resume that could not restore it mid-episode): the
        rollout's last step is where those episodes ended."""
        if self.rollout.filled:
            self.rollout.done[self.rollout.filled - 1] = 1.0
        if self.hidden is not None:
            self.hidden[...] = 0.0

    def advantage_lambda(self) -> float:
        return self.config.gae_lambda

    def learn(self, batch: dict[str, torch.Tensor], clock: Clock) -> dict[str, float]:
        """Optimise on a full rollout; return the losses and diagnostics."""
        raise NotImplementedError

    def evaluate(
        self, part: dict[str, torch.Tensor], *, entropy: bool, scaled: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """The learner's `evaluate` of a (mini)batch; with a memory, of its whole sequences
        (`memory` and `starts` in `part`), by autograd (no kernel learns through a cell)."""
        if "memory" in part:
            log_probs, entropies, values = self.model.evaluate_sequences(
                part["obs"], part["actions"], part["memory"], part["starts"], entropy=entropy, scaled=scaled
            )
            if "valid" not in part:
                return log_probs, entropies, values
            valid = part["valid"]  # padded chunks: the loss's means over the real steps alone (masked means)
            return log_probs[valid], None if entropies is None else entropies[valid], values[valid]
        return self.learner.evaluate(part["obs"], part["actions"], entropy=entropy, scaled=scaled)

    def entropy_term(self, clock: Clock) -> float:
        """The entropy bonus's weight now; when it is 0 the loss skips computing entropy at all."""
        return self.config.entropy_coef.value(clock.frame, self.max_frame)

    def normalized(self, advantages: torch.Tensor) -> torch.Tensor:
        if not self.config.normalize_advantages or len(advantages) < 2:
            return advantages
        return (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    def state_dict(self) -> dict[str, Any]:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "rollout": self.rollout.state_dict(),
            "next_obs": torch.from_numpy(self.next_obs.copy()),
        }
        if self.hidden is not None and self.rollout_hidden is not None:
            state["hidden"] = torch.from_numpy(self.hidden.copy())
            state["rollout_hidden"] = torch.from_numpy(self.rollout_hidden.copy())
        if self.chunk_hidden is not None:
            state["chunk_hidden"] = torch.from_numpy(self.chunk_hidden.copy())
        if self.noise is not None:
            state["sde_noise"] = torch.from_numpy(self.noise.copy())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.rollout.load_state_dict(state["rollout"])
        self.next_obs = state["next_obs"].numpy()
        if self.hidden is not None:
            self.hidden = state["hidden"].numpy().copy()
            self.rollout_hidden = state["rollout_hidden"].numpy().copy()
        if self.chunk_hidden is not None:
            self.chunk_hidden = state["chunk_hidden"].numpy().copy()
        if self.noise is not None:
            self.noise = state["sde_noise"].numpy().copy()
