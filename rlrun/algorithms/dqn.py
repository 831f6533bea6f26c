"""DQN (Mnih et al., 2015), with its family as options: Double DQN (van Hasselt et al., 2016),
dueling heads (Wang et al., 2016), prioritised replay (Schaul et al., 2016) and n-step returns
(Sutton, 1988; as in Rainbow, Hessel et al., 2018).

A Q-network learns from transitions replayed from memory (uniformly, or by priority), towards
targets computed by a slowly moving copy of itself (copied every `target_update_frequency` frames,
or Polyak-averaged after each gradient step). Exploration is epsilon-greedy or Boltzmann, each with
its schedule. n-step targets are formed by the memory when it draws a batch (`replay`), so the
agent holds no queue of recent steps; prioritised replay draws each gradient step's batch after the
previous step has set the priorities of the rows it learnt from, and weighs each sample's loss by
its importance-sampling weight.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rlrun.algorithms import kernels as kernel_for
from rlrun.algorithms.base import (
    Fast,
    Metrics,
    Step,
    TargetUpdate,
    log_softmax,
    mse_loss,
    network,
    network_input,
    sample_categorical,
    step_means,
    to_device,
)
from rlrun.algorithms.optim import flushing_subnormals, make_optimizer, optimise
from rlrun.algorithms.replay import ReplayMemory
from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock, crossed
from rlrun.errors import BadInput
from rlrun.spec import OptimizerSpec
from rlrun.spec.agents.dqn import Config, importance_exponent

_STEP_STATS = ("loss", "q_mean", "td_error", "grad_norm")
_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    # each loss, functional's kernel mean-reduced (1; `.default`: the overload itself, which the
    # packet `torch.ops.aten.x` would look up on every call); taken and target have the same
    # shape, so functional's broadcasting checks have nothing to do
    "huber": lambda taken, target: torch.ops.aten.smooth_l1_loss.default(taken, target, 1, 1.0),
    "mse": mse_loss,
}
_SAMPLE_LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    # each loss per sample (reduction 0: none), for prioritised replay's weighted mean
    "huber": lambda taken, target: torch.ops.aten.smooth_l1_loss.default(taken, target, 0, 1.0),
    "mse": lambda taken, target: torch.ops.aten.mse_loss.default(taken, target, 0),
}


class Dueling(nn.Module):
    """Dueling heads (Wang et al., 2016, eq. 9) over a network with one output more than there are
    actions: the first is the state's value V, the others the advantages A, and
    Q = V + (A − mean(A)). The torso and both heads are the network's own (for the built-ins, one
    linear layer whose first row is V's head)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(obs)
        value, advantage = out[:, :1], out[:, 1:]
        return value + (advantage - advantage.mean(dim=-1, keepdim=True))


def fast_values(q: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    """Acting's Q-values, by NumPy where `Fast` can (a few observations a step: torch's dispatch
    would cost more than the arithmetic); dueling heads aggregated as `Dueling` does."""
    if not isinstance(q, Dueling):
        return Fast(q)
    heads = Fast(q.net)

    def values(obs: np.ndarray) -> np.ndarray:
        out = heads(obs)
        value, advantage = out[:, :1], out[:, 1:]
        return value + (advantage - advantage.mean(axis=-1, keepdims=True))

    return values


def q_network(obs_space: spaces.Space, actions: int, config: Config, arithmetic: Arithmetic) -> nn.Module:
    """The spec's Q-network: one output per action, or `Dueling` heads over the network built for
    one more; a user's network that cannot give that many is refused (BadInput, one line)."""
    if not config.dueling:
        return network(obs_space, actions, config.network, arithmetic=arithmetic)
    try:
        return Dueling(network(obs_space, actions + 1, config.network, arithmetic=arithmetic))
    except BadInput as error:
        raise BadInput(f"{error} (agent.dueling asks it for {actions + 1} outputs: the state's value, then one "
                       "advantage per action; or set agent.dueling = false)") from None


class Autograd:
    """Autograd's learner, for every network: the Q-networks' forward passes, and one gradient
    step down the TD loss."""

    def __init__(self, q: nn.Module, target: nn.Module) -> None:
        self.q, self.target = q, target

    def values(self, obs: torch.Tensor, *, target: bool) -> torch.Tensor:
        """The target network's Q-values of `obs` (`target`), or the online network's."""
        out: torch.Tensor = (self.target if target else self.q)(obs)
        return out

    def step(self, obs: torch.Tensor, chosen: torch.Tensor, target: torch.Tensor, loss: str,
             optimizer: torch.optim.Optimizer, spec: OptimizerSpec, frame: int, max_frame: int,
             weights: torch.Tensor | None = None) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """One gradient step on a replayed batch (its observations, the actions taken as a column,
        their TD targets, and with prioritised replay each sample's importance-sampling weight);
        returns the loss, the Q-values of the actions taken and the gradient norm."""
        with torch.enable_grad():
            taken = self.q(obs).gather(1, chosen).squeeze(1)
            if weights is None:
                value = _LOSSES[loss](taken, target)
            else:
                value = (weights * _SAMPLE_LOSSES[loss](taken, target)).mean()
            grad_norm = optimise(optimizer, value, spec, frame, max_frame)
        return value.detach(), taken.detach(), grad_norm


class Agent:
    METRICS = (*_STEP_STATS, "epsilon", "lr")
    """`q_mean`: the mean Q-value of the actions replayed; `td_error`: the mean absolute TD error."""
    HEADLINE = "q_mean"

    def __init__(self, config: Config, obs_space: spaces.Space, action_space: spaces.Space, *, seed: int,
                 num_envs: int, max_frame: int, device: torch.device, frame_stack: int = 1,
                 arithmetic: Arithmetic = NEWEST, kernels: str = "auto") -> None:
        assert isinstance(action_space, spaces.Discrete)  # rlrun.spec.spaces refuses the others
        self.config, self.num_envs, self.max_frame, self.device = config, num_envs, max_frame, device
        self.arithmetic = arithmetic  # the flags of the run's learning arithmetic (MetaSpec.arithmetic)
        self.actions = int(action_space.n)
        self.q = q_network(obs_space, self.actions, config, arithmetic).to(device)
        self.fast_q = fast_values(self.q)
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.target_update = TargetUpdate(self.target, self.q)
        self.prioritized = config.memory.prioritized
        self.importance = None if self.prioritized is None else importance_exponent(self.prioritized)
        """Prioritised replay's importance-sampling exponent β over frames (to 1 at max_frame)."""
        kernel = kernel_for.find_q_network(self.q, self.target, kernels) if self.prioritized is None else None
        self.learner: Autograd | kernel_for.QKernel = kernel or Autograd(self.q, self.target)
        """Runs the networks and steps the loss: autograd, or a kernel that computes the same
        (`rlrun.algorithms.kernels`; `kernels`: the spec's `meta.kernels`). The kernel takes no
        weighted loss (prioritised replay's) and no dueling network (`QKernel.fits`)."""
        self.optimizer = make_optimizer(config.optimizer, list(self.q.parameters()), max_frame)
        self.memory = ReplayMemory(config.memory, tuple(obs_space.shape or ()), np.dtype(obs_space.dtype), (),
                                   np.dtype(np.int64), num_envs=num_envs, frame_stack=frame_stack,
                                   n_step=config.n_step, gamma=config.gamma)
        self.generator = torch.Generator().manual_seed(seed)
        self.frame = 0
        """The clock's frame at the last update: exploration schedules are read at it."""

    # -- acting ---------------------------------------------------------------------------------

    def act(self, obs: np.ndarray, *, deterministic: bool = False,
            generator: torch.Generator | None = None) -> np.ndarray:
        if deterministic:
            return self.fast_q(obs).argmax(axis=-1)
        g = generator or self.generator
        if self.config.exploration == "boltzmann":
            temperature = self.config.temperature.value(self.frame, self.max_frame)
            return sample_categorical(log_softmax(self.fast_q(obs) / temperature), g)
        epsilon = self.config.epsilon.value(self.frame, self.max_frame)
        explore = torch.rand(len(obs), generator=g).numpy() < epsilon
        random_actions = torch.randint(self.actions, (len(obs),), generator=g).numpy()
        if explore.all():  # no copy reads its Q-values: skip the forward pass (the draws are the same)
            return random_actions
        return np.where(explore, random_actions, self.fast_q(obs).argmax(axis=-1))

    def observe(self, step: Step) -> None:
        self.memory.add(step.obs, step.action, step.reward, step.next_obs, step.terminated, step.truncated)

    # -- learning -------------------------------------------------------------------------------

    def update(self, clock: Clock) -> Mapping[str, float]:
        self.frame = before = clock.frame
        previous = before - self.num_envs
        config = self.config
        if config.target_update == "hard" and crossed(previous, before, config.target_update_frequency):
            self.target_update.copy()
        if before < config.learning_starts or self.memory.size < config.batch_size:
            return {}
        rounds = before // config.train_frequency - previous // config.train_frequency
        count = rounds * config.gradient_steps
        if count == 0:
            return {}
        if self.prioritized is not None:
            with torch.no_grad(), flushing_subnormals(self.device):
                steps = [self._prioritized_step(clock) for _ in range(count)]
            return self._metrics(steps, before)
        batches = to_device(self.memory.sample_batches(count, config.batch_size, self.generator), self.device)
        with torch.no_grad(), flushing_subnormals(self.device):
            targets = self._fixed_targets(batches)
            obs = network_input(batches["obs"].flatten(0, 1), config.network).unflatten(0, (count, -1)).unbind(0)
            chosen = batches["actions"].unsqueeze(-1).unbind(0)
            steps = [self._gradient_step(obs[i], chosen[i], targets[i] if targets is not None else
                                         self._td_target({name: value[i] for name, value in batches.items()}), clock)
                     for i in range(count)]
        return self._metrics(steps, before)

    def _metrics(self, steps: list[tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]],
                 frame: int) -> Metrics:
        # read when the session reports or snapshots (every few thousand frames), not every update
        epsilon, lr = self.config.epsilon.value(frame, self.max_frame), self.optimizer.param_groups[0]["lr"]
        return Metrics(lambda: {**self._step_stats(steps), "epsilon": epsilon, "lr": lr})

    def _prioritized_step(self, clock: Clock
                          ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One gradient step of prioritised replay: a batch drawn by the priorities the previous
        step left, its loss weighed by importance (beta annealed to 1 at max_frame), and the rows'
        priorities set from their TD errors."""
        config = self.config
        assert self.importance is not None
        beta = self.importance.value(clock.frame, self.max_frame)
        slots, batch = self.memory.draw_prioritized(config.batch_size, self.generator, beta)
        batch = to_device(batch, self.device)
        target = self._td_target(batch)
        obs = network_input(batch["obs"], config.network)
        step = self._gradient_step(obs, batch["actions"].unsqueeze(-1), target, clock, batch["weights"])
        self.memory.set_priorities(slots, (step[1] - target).cpu().numpy())
        return step

    def _step_stats(self, steps: list[tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]]
                    ) -> dict[str, float]:
        """The `_STEP_STATS`, each the mean over the update's gradient steps (`steps`: each one's
        loss, None where the step did not need it, replayed Q-values, TD targets and gradient norm)."""
        loss_function = _LOSSES[self.config.loss]
        with flushing_subnormals(self.device):  # where the steps formed them, before the stats were deferred
            rows = [torch.stack([loss_function(taken, target) if loss is None else loss, taken.mean(),
                                 (taken - target).abs().mean(), grad_norm])
                    for loss, taken, target, grad_norm in steps]
        return step_means(_STEP_STATS, rows)

    def _fixed_targets(self, batches: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """The TD targets of all of this update's batches at once (one large product costs less
        than many small ones), when no gradient step can change them: the target network stays as
        it is for the whole update (a hard update) and picks the next action itself (not double).
        None otherwise: each step computes its own."""
        config = self.config
        if config.target_update != "hard" or config.double or len(batches["obs"]) == 1:
            return None
        return self._td_target({name: value.flatten(0, 1) for name, value in batches.items()}
                               ).unflatten(0, batches["obs"].shape[:2])

    def _td_target(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """r + gamma * max_a' Q_target(s', a'), the next action chosen by the online network for
        double DQN; no bootstrap past a terminal state. With n-step returns r is the window's
        discounted rewards, s' its last next observation and gamma the batch's "discounts" (gamma^n,
        or less where the window was cut)."""
        config = self.config
        next_obs = network_input(batch["next_obs"], config.network)
        next_q = self.learner.values(next_obs, target=True)
        if config.double:
            online_q = self.learner.values(next_obs, target=False)
            chosen = online_q.argmax(dim=-1, keepdim=True)
            next_value = next_q.gather(1, chosen).squeeze(1)
        else:
            next_value = next_q.max(dim=-1).values
        discount = batch.get("discounts", config.gamma)  # n_step 1: the number, as it always was
        target: torch.Tensor = batch["rewards"] + discount * (1.0 - batch["terminated"]) * next_value
        return target

    def _gradient_step(self, obs: torch.Tensor, chosen: torch.Tensor, target: torch.Tensor, clock: Clock,
                       weights: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One gradient step on a replayed batch: its observations, actions taken (a column), TD
        targets and importance weights (prioritised replay); returns what `_step_stats` reads: its
        loss (None where the learner did not need it to step), Q-values of the actions taken,
        targets and gradient norm."""
        config = self.config
        if weights is None:
            loss, taken, grad_norm = self.learner.step(obs, chosen, target, config.loss, self.optimizer,
                                                       config.optimizer, clock.frame, self.max_frame)
        else:
            assert isinstance(self.learner, Autograd)
            loss, taken, grad_norm = self.learner.step(obs, chosen, target, config.loss, self.optimizer,
                                                       config.optimizer, clock.frame, self.max_frame, weights)
        clock.opt_step += 1
        if config.target_update == "polyak":
            self.target_update.polyak(config.tau)
        return loss, taken, target, grad_norm

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "q": self.q.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "frame": self.frame,
            **self.memory.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.frame = state["frame"]
        self.memory.load_state_dict(state)
