"""SAC (Haarnoja et al., 2018): off-policy actor-critic for continuous actions with an entropy
bonus whose weight (the temperature alpha) tunes itself towards a target entropy.

A tanh-squashed Gaussian actor; two critics and their Polyak-averaged targets (the smaller of the
two values is used, against over-estimation); uniform random actions until `learning_starts`.
The temperature and its optimiser are part of the agent's state, so they resume exactly.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional

from rlrun.algorithms.base import (
    Fast,
    Metrics,
    Step,
    TargetUpdate,
    flat_float,
    mlp,
    mse_loss,
    obs_size,
    step_means,
    to_device,
)
from rlrun.algorithms.hand_mlp import HandMLP, Workspace, without_grad
from rlrun.algorithms.optim import apply_gradients, flushing_subnormals, make_optimizer, optimise_unmeasured
from rlrun.algorithms.replay import ReplayMemory
from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock
from rlrun.spec import NetworkSpec
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


def squash(out: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """`Actor.forward` from its network's output `out` (means, then log standard deviations)."""
    if generator is None:
        return torch.tanh(out.chunk(2, dim=-1)[0]), torch.zeros(len(out), device=out.device)
    sample = sample_squashed(out, generator)
    return sample.action, sample.log_prob


class Squashed(NamedTuple):
    """A squashed Gaussian sample and what its gradient needs (`Squashed.backward`)."""

    action: torch.Tensor
    log_prob: torch.Tensor
    unclamped: torch.Tensor
    """The network's log standard deviations, before the clamp."""
    std: torch.Tensor
    noise: torch.Tensor
    squeeze: torch.Tensor
    """1 - action^2 + 1e-6, the change of variables' factor, per action dimension."""

    @without_grad
    def backward(self, grad_log_prob: torch.Tensor, grad_action: torch.Tensor) -> torch.Tensor:
        """The gradient of the network's output `out`, given those of `log_prob` and of `action`
        from elsewhere (the critics): each of autograd's backward formulas for the operations of
        `sample_squashed`, with its kernels, in its order, so its bits (tests/unit/test_sac_hand.py).
        A value used twice gets its two gradients summed, which is exact in either order."""
        # the negated gradient of log_prob, per action dimension: the Sub's and the Sum's backward,
        # formed once for its two uses (a negation is exact, wherever it is taken)
        negated = (-grad_log_prob).unsqueeze(-1).expand(self.action.shape)
        # log_prob = gaussian - log(squeeze).sum(-1), squeeze = 1 - action.pow(2) + 1e-6
        grad_squeeze = negated.div(self.squeeze)  # Sub, Sum, Log
        grad_action = grad_action + (-grad_squeeze) * (2.0 * self.action.pow(1.0))  # Rsub, Pow
        grad_raw = torch.ops.aten.tanh_backward.default(grad_action, self.action)  # action = tanh(raw)
        # raw = mean + std * noise, std = log_std.exp(); gaussian = (... - log_std - ...).sum(-1)
        grad_log_std = grad_raw * self.noise * self.std + negated
        inside = (self.unclamped >= LOG_STD_MIN).logical_and_(self.unclamped <= LOG_STD_MAX)
        grad_log_std = torch.where(inside, grad_log_std, _zero(grad_raw))
        return torch.cat([grad_raw, grad_log_std], dim=-1)  # chunk's backward


_CONSTANTS: dict[tuple[Any, ...], Any] = {}


def _made_once(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """The constant `make` makes, made the first time `key` is asked for (tensors a step reads and
    never writes, the same for every step of a dtype, device and batch size)."""
    if key not in _CONSTANTS:
        _CONSTANTS[key] = make()
    return _CONSTANTS[key]


def _zero(like: torch.Tensor) -> torch.Tensor:
    """A zero-dimensional 0 of `like`'s dtype and device (what a gradient that does not flow is
    filled with)."""
    zero: torch.Tensor = _made_once(("zero", like.dtype, like.device),
                                    lambda: torch.zeros((), dtype=like.dtype, device=like.device))
    return zero


def sample_squashed(out: torch.Tensor, generator: torch.Generator) -> Squashed:
    """Squashed actions sampled from the Gaussians of the network's output `out` (means, then log
    standard deviations), their log-probabilities, and what `Squashed.backward` needs."""
    mean, unclamped = out.chunk(2, dim=-1)
    log_std = unclamped.clamp(LOG_STD_MIN, LOG_STD_MAX)
    noise = torch.randn(mean.shape, generator=generator).to(mean.device)  # drawn on the host
    std = log_std.exp()
    action = torch.tanh(mean + std * noise)
    gaussian = (-0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)
    squeeze = 1 - action.pow(2) + 1e-6  # the change of variables
    return Squashed(action, gaussian - torch.log(squeeze).sum(-1), unclamped, std, noise, squeeze)


def temperature_gradient(log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """The gradient of the temperature's loss `-(log_alpha * (log_prob + target_entropy)).mean()`
    with respect to `log_alpha` (a number), as autograd computes it: the mean's backward gives
    each row -1/n (a float32 quotient), the product's multiplies it by its factor, and the
    broadcast's backward sums the rows (`sum_to`: a sum over the first dimension). The same
    kernels, so the same bits (tests/unit/test_sac_hand.py), without a graph for one number."""
    rows = (log_prob + target_entropy).mul_(float(np.float32(-1.0) / np.float32(log_prob.shape[0])))
    return rows.sum([0], keepdim=True).squeeze(0)


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
        rows = [torch.stack([step.critic_loss, step.actor_loss, step.critic_loss.new_tensor(step.alpha),
                             torch.min(step.q1, step.q2).mean(), -step.log_prob.mean()]) for step in steps]
    return step_means(_STEP_STATS, rows)


class Agent:
    METRICS = (*_STEP_STATS, "lr")
    """`alpha`: the entropy coefficient; `q_mean`: the smaller critic's mean on replayed actions;
    `entropy`: the policy's, estimated from its sampled actions' log-probabilities."""
    HEADLINE = "alpha"

    def __init__(self, config: Config, obs_space: spaces.Space, action_space: spaces.Space, *, seed: int,
                 num_envs: int, max_frame: int, device: torch.device, frame_stack: int = 1,
                 arithmetic: Arithmetic = NEWEST, kernels: str = "auto") -> None:
        assert isinstance(action_space, spaces.Box)  # rlrun.spec.spaces refuses the others
        self.config, self.num_envs, self.max_frame, self.device = config, num_envs, max_frame, device
        self.arithmetic = arithmetic  # the flags of the run's learning arithmetic (MetaSpec.arithmetic)
        obs_dim, action_dim = obs_size(obs_space), int(np.prod(action_space.shape))
        self.low = action_space.low.astype(np.float32)
        self.high = action_space.high.astype(np.float32)
        self.actor = Actor(obs_dim, action_dim, config.network).to(device)
        self.fast_actor = Fast(self.actor.body)
        self.critic = Critic(obs_dim, action_dim, config.network).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.target_update = TargetUpdate(self.critic_target, self.critic)
        # built-in MLPs (always, unless a user's network is ever allowed here): passes by hand
        self.hand = (HandSAC(self.actor, self.critic, self.critic_target, arithmetic=arithmetic)
                     if kernels == "auto" and HandSAC.fits(self.critic) else None)
        self.actor_optimizer = make_optimizer(config.optimizer, list(self.actor.parameters()), max_frame)
        self.critic_optimizer = make_optimizer(config.optimizer, list(self.critic.parameters()), max_frame)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(config.alpha_init), device=device))
        self.alpha_optimizer = make_optimizer(config.optimizer, [self.log_alpha], max_frame)
        self.target_entropy = -float(action_dim) if config.target_entropy == "auto" else config.target_entropy
        self.memory = ReplayMemory(config.memory, tuple(obs_space.shape or ()), np.dtype(obs_space.dtype),
                                   (action_dim,), np.dtype(np.float32), num_envs=num_envs, frame_stack=frame_stack)
        self.generator = torch.Generator().manual_seed(seed)
        self.frame = 0
        """The clock's frame at the last update: random actions are taken until learning_starts."""

    def alpha(self) -> float:
        return math.exp(self.log_alpha.item()) if self.config.alpha == "auto" else float(self.config.alpha)

    # -- acting ---------------------------------------------------------------------------------

    def act(self, obs: np.ndarray, *, deterministic: bool = False,
            generator: torch.Generator | None = None) -> np.ndarray:
        training = not deterministic and generator is None
        if training and self.frame < self.config.learning_starts:
            squashed = torch.rand((len(obs), len(self.low)), generator=self.generator).numpy() * 2 - 1
        else:
            mean, log_std = np.split(self.fast_actor(obs), 2, axis=-1)
            if deterministic:
                squashed = np.tanh(mean)
            else:
                noise = torch.randn(mean.shape, generator=generator or self.generator).numpy()
                squashed = np.tanh(mean + np.exp(np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)) * noise)
        return self.low + (squashed + 1) * 0.5 * (self.high - self.low)

    def observe(self, step: Step) -> None:
        squashed = 2 * (step.action - self.low) / (self.high - self.low) - 1
        self.memory.add(step.obs, squashed.reshape(len(step.obs), -1), step.reward, step.next_obs, step.terminated,
                        step.truncated)

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
        batch = to_device(self.memory.sample(config.batch_size, self.generator), self.device)
        obs, next_obs = flat_float(batch["obs"]), flat_float(batch["next_obs"])
        alpha = self.alpha()
        with torch.no_grad():
            if self.hand is None:
                next_action, next_log_prob = self.actor(next_obs, self.generator)
                next_q = torch.min(*self.critic_target(next_obs, next_action)) - alpha * next_log_prob
            else:
                next_q = self.hand.target_values(next_obs, self.generator, alpha)
            target = batch["rewards"] + config.gamma * (1 - batch["terminated"]) * next_q
        if self.hand is None:
            q1, q2 = self.critic(obs, batch["actions"])
            critic_loss = 0.5 * (functional.mse_loss(q1, target) + functional.mse_loss(q2, target))
            optimise_unmeasured(self.critic_optimizer, critic_loss, config.optimizer, clock.frame, self.max_frame)
        else:
            q1, q2, critic_loss, grads = self.hand.critic_step(obs, batch["actions"], target)
            apply_gradients(self.critic_optimizer, grads, config.optimizer, clock.frame, self.max_frame,
                            measured=False)

        if self.hand is None:
            action, log_prob = self.actor(obs, self.generator)
            # The actor's gradient flows through the critics to the actions only: the critics' weights
            # need none (they would be computed, then thrown away, by the next critic step).
            self.critic.requires_grad_(False)
            actor_q = torch.min(*self.critic(obs, action))
            self.critic.requires_grad_(True)
            actor_loss = (alpha * log_prob - actor_q).mean()
            optimise_unmeasured(self.actor_optimizer, actor_loss, config.optimizer, clock.frame, self.max_frame)
        else:
            actor_loss, log_prob, grads = self.hand.actor_loss(obs, self.generator, alpha)
            apply_gradients(self.actor_optimizer, grads, config.optimizer, clock.frame, self.max_frame,
                            measured=False)
        if config.alpha == "auto" and self.hand is not None:
            self.log_alpha.grad = temperature_gradient(log_prob, self.target_entropy)
            apply_gradients(self.alpha_optimizer, [self.log_alpha.grad], config.optimizer, clock.frame,
                            self.max_frame, measured=False)
        elif config.alpha == "auto":
            alpha_loss = -(self.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            optimise_unmeasured(self.alpha_optimizer, alpha_loss, config.optimizer, clock.frame, self.max_frame)
        with torch.no_grad():
            self.target_update.polyak(config.tau)
            clock.opt_step += 1
        return StepTensors(critic_loss, actor_loss, alpha, q1, q2, log_prob)  # read under no_grad

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "frame": self.frame,
            **self.memory.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
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


class HandSAC:
    """The critics' and the actor's gradient steps by hand, for built-in MLPs (`HandMLP`): each
    operation's gradient as autograd's formula for it computes it, with the same kernels, so the
    same bits (tests/unit/test_sac_hand.py), without recording and walking a graph of some eighty
    nodes per step. (The temperature's step keeps autograd: one number.)

    Their hidden layers go into kept buffers (`hand_mlp.Workspace`): one scratch workspace for
    every pass whose activations are not kept past its own backward (the targets', each critic's
    in its step, taken one after the other, and every backward), and one each for the three whose
    activations the actor's backward needs at once."""

    @staticmethod
    def fits(critic: Critic) -> bool:
        return HandMLP.fits(critic.q1) and HandMLP.fits(critic.q2)

    def __init__(self, actor: Actor, critic: Critic, critic_target: Critic, *, arithmetic: Arithmetic) -> None:
        """`arithmetic`'s `narrow_products_wide_first`: products with a narrow side are formed the
        faster way round (`HandMLP`'s `narrow`), the same update rounded differently; its
        `bf16_wide_products`: the wide products take bfloat16 operands (`HandMLP`'s `bf16`)."""
        kinds = {"narrow": arithmetic.narrow_products_wide_first, "bf16": arithmetic.bf16_wide_products}
        self.actor = HandMLP(actor.body, **kinds)
        self.critics = (HandMLP(critic.q1, **kinds), HandMLP(critic.q2, **kinds))
        self.targets = (HandMLP(critic_target.q1, **kinds), HandMLP(critic_target.q2, **kinds))
        self.scratch: Workspace = {}
        self.kept: tuple[Workspace, Workspace, Workspace] = ({}, {}, {})  # the actor's, each critic's

    @staticmethod
    def _half(like: torch.Tensor) -> torch.Tensor:
        """0.5 as autograd's chain gives it to each critic's loss (a 1 times 0.5)."""
        half: torch.Tensor = _made_once(("half", like.dtype, like.device), lambda: like.new_ones(()) * 0.5)
        return half

    @staticmethod
    def _mean_gradients(loss: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The mean's backward (1 / rows, each row), its negation (the minimum's gradient) and half
        that (a tie's share), as the actor's backward computes them."""
        def make() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            grad = torch.ones_like(loss).expand(rows) / rows
            grad_min = -grad
            return grad, grad_min, grad_min / 2

        key = ("mean", rows, loss.dtype, loss.device)
        made: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = _made_once(key, make)
        return made

    def target_values(self, next_obs: torch.Tensor, generator: torch.Generator, alpha: float) -> torch.Tensor:
        """The soft value of the next observations: the smaller target critic's value of an action
        the actor samples there, less alpha times its log-probability (no gradient)."""
        next_action, next_log_prob = squash(self.actor.run(next_obs, self.scratch)[0], generator)
        inputs = torch.cat([next_obs, next_action], dim=-1)
        q1 = self.targets[0].run(inputs, self.scratch)[0].squeeze(-1)
        q2 = self.targets[1].run(inputs, self.scratch)[0].squeeze(-1)
        return torch.min(q1, q2) - alpha * next_log_prob

    @without_grad
    def critic_step(self, obs: torch.Tensor, action: torch.Tensor, target: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Both critics' values of the replayed actions, the critics' loss, and its gradients (set
        on the critics' parameters, in `Critic.parameters()` order)."""
        inputs = torch.cat([obs, action], dim=-1)
        values = []
        for hand in self.critics:  # each one's backward needs only its own value: one after the other
            out, saved = hand.run(inputs, self.scratch)
            q = out.squeeze(-1)
            # autograd's chain from 0.5 * (mse(q1) + mse(q2)): d loss / d loss (a 1) times 0.5, to each mse
            grad = torch.ops.aten.mse_loss_backward.default(self._half(target), q, target, 1).unsqueeze(-1)
            hand.backward_from(saved, grad, workspace=self.scratch)
            values.append(q)
        q1, q2 = values
        loss = 0.5 * (mse_loss(q1, target) + mse_loss(q2, target))
        return q1, q2, loss, [*self.critics[0].gradients(), *self.critics[1].gradients()]

    @without_grad
    def actor_loss(self, obs: torch.Tensor, generator: torch.Generator, alpha: float
                   ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The actor's loss, its sampled actions' log-probabilities, and its gradients (set on the
        actor's parameters). The critics' weights get none (they would be computed, then thrown
        away, by the next critic step): the gradient flows through them to the actions only. Each
        gradient is autograd's formula for the operation, with its kernels: its bits."""
        out, saved = self.actor.run(obs, self.kept[0])
        sample = sample_squashed(out, generator)
        inputs = torch.cat([obs, sample.action], dim=-1)
        out1, saved1 = self.critics[0].run(inputs, self.kept[1])
        out2, saved2 = self.critics[1].run(inputs, self.kept[2])
        q1, q2 = out1.squeeze(-1), out2.squeeze(-1)
        loss = (alpha * sample.log_prob - torch.min(q1, q2)).mean()
        # loss = (alpha * log_prob - minimum(q1, q2)).mean(), backwards
        grad, grad_min, grad_tied = self._mean_gradients(loss, obs.shape[0])
        grad_log_prob = grad * alpha
        tie = q1 == q2
        grad_q1 = torch.where(tie, grad_tied, grad_min).masked_fill_(q1 > q2, 0)
        grad_q2 = torch.where(tie, grad_tied, grad_min).masked_fill_(q1 < q2, 0)
        actions = slice(obs.shape[-1], None)  # the cat's backward: the inputs' gradient for the actions
        grad_in1 = self.critics[0].backward_from(saved1, grad_q1.unsqueeze(-1), params=False, inputs=True,
                                                 workspace=self.scratch, input_columns=actions)
        grad_in2 = self.critics[1].backward_from(saved2, grad_q2.unsqueeze(-1), params=False, inputs=True,
                                                 workspace=self.scratch, input_columns=actions)
        assert grad_in1 is not None and grad_in2 is not None
        grad_action = grad_in1 + grad_in2
        self.actor.backward_from(saved, sample.backward(grad_log_prob, grad_action), workspace=self.scratch)
        return loss, sample.log_prob, self.actor.gradients()
