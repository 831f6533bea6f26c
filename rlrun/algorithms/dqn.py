"""DQN (Mnih et al., 2015) and its family: Double DQN (van Hasselt et al., 2016), dueling heads
(Wang et al., 2016), prioritised replay (Schaul et al., 2016), n-step returns (as in Rainbow).

A Q-network learns from transitions replayed from memory (`replay.Transitions`, n-step windows
made there) towards the TD targets (`q_learning`) of a slowly moving copy of itself. Uniform and
prioritised replay differ only in how a batch is drawn and whether it carries importance weights.
With a memory (`agent.network.recurrent`) it is R2D2 (`r2d2`)."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from operator import itemgetter
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rlrun.algorithms import kernels as kernel_for
from rlrun.algorithms.base import Metrics, Step, TargetUpdate, network, network_input
from rlrun.algorithms.optim import flushing_subnormals, make_optimizer
from rlrun.algorithms.q_learning import STEP_STATS, Autograd, Dueling, Exploration, QActor, step_stats, td_target
from rlrun.algorithms.r2d2 import RecurrentActor, RecurrentQ, SequenceLearner
from rlrun.algorithms.replay import ReplayMemory, Transitions
from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock, crossed
from rlrun.errors import BadInput
from rlrun.spec.agents.dqn import Config, importance_exponent


def q_network(obs_space: spaces.Space, actions: int, config: Config, arithmetic: Arithmetic) -> nn.Module:
    """The spec's Q-network: one output per action, `Dueling` heads over the network built for one
    more, or R2D2's (`RecurrentQ`); a user's network that cannot give that many is refused."""
    if config.network.recurrent is not None:
        return RecurrentQ(obs_space, actions, config, arithmetic)
    if not config.dueling:
        return network(obs_space, actions, config.network, arithmetic=arithmetic)
    try:
        return Dueling(network(obs_space, actions + 1, config.network, arithmetic=arithmetic))
    except BadInput as error:
        raise BadInput(
            f"{error} (agent.dueling asks it for {actions + 1} outputs: the state's value, then one "
            "advantage per action; or set agent.dueling = false)"
        ) from None


class Agent:
    METRICS = (*STEP_STATS, "epsilon", "lr")
    """`q_mean`: the mean Q-value of the actions replayed; `td_error`: the mean absolute TD error."""
    HEADLINE = "q_mean"

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
        assert isinstance(action_space, spaces.Discrete)  # rlrun.spec.spaces refuses the others
        self.config, self.num_envs, self.max_frame, self.device = config, num_envs, max_frame, device
        self.arithmetic = arithmetic  # the flags of the run's learning arithmetic (MetaSpec.arithmetic)
        self.actions = int(action_space.n)
        self.q = q_network(obs_space, self.actions, config, arithmetic).to(device)
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.target_update = TargetUpdate(self.target, self.q)
        prioritized = config.memory.prioritized
        self.importance = None if prioritized is None else importance_exponent(prioritized)
        """Prioritised replay's importance-sampling exponent β over frames (to 1 at max_frame)."""
        plain = prioritized is None and not isinstance(self.q, RecurrentQ)  # the kernel steps no weighted loss
        kernel = kernel_for.find_q_network(self.q, self.target, kernels) if plain else None
        self.learner: Autograd | kernel_for.QKernel = kernel or Autograd(self.q, self.target)
        """Autograd, or a kernel that computes the same (`rlrun.algorithms.kernels`, `meta.kernels`)."""
        self.optimizer = make_optimizer(config.optimizer, list(self.q.parameters()), max_frame)
        self.memory = ReplayMemory(
            config.memory,
            tuple(obs_space.shape or ()),
            np.dtype(obs_space.dtype),
            (),
            np.dtype(np.int64),
            num_envs=num_envs,
            frame_stack=frame_stack,
            n_step=config.n_step,
            gamma=config.gamma,
            state_shape=self.q.initial(1)[:, 0].shape if isinstance(self.q, RecurrentQ) else None,
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.frame = 0  # the clock's at the last update: exploration's schedules are read at it
        exploration = Exploration(config, self.actions, max_frame, lambda: self.frame)
        self.hidden: np.ndarray | None = None
        """With a memory: each env copy's state as training left it (zeros where an episode ended)."""
        self._acted: tuple[np.ndarray, np.ndarray] | None = None  # with a memory: the state acted from, after
        self.sequences: SequenceLearner | None = None  # with a memory: R2D2's gradient steps
        self._actor: QActor | RecurrentActor
        if isinstance(self.q, RecurrentQ) and isinstance(self.target, RecurrentQ):
            self.q.ready()
            self.hidden = self.q.initial(num_envs)
            self._actor = RecurrentActor(self.q, exploration)
            self.sequences = SequenceLearner(
                config, self.q, self.target, self.optimizer, self.memory, self.generator, max_frame, device
            )
        else:
            self._actor = QActor(self.q, exploration, cnn=config.network.kind == "nature_cnn")

    # -- acting ---------------------------------------------------------------------------------

    @property
    def actor(self) -> QActor | RecurrentActor:
        """How this agent plays (`base.Actor`): the one acting path outside training."""
        return self._actor

    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> np.ndarray:
        if isinstance(self._actor, QActor):
            return self._actor.step(obs, None, deterministic=deterministic, generator=generator or self.generator)[0]
        if deterministic or generator is not None or self.hidden is None:
            raise RuntimeError("an agent with a memory plays through its actor: this memory is training's")
        actions, after = self._actor.step(obs, self.hidden, generator=self.generator)
        self._acted = (self.hidden, after)
        return actions

    def observe(self, step: Step) -> None:
        acted, done = self._acted, step.terminated | step.truncated
        assert acted is not None or self.hidden is None, "observe() follows a training act()"
        acted_from = None if acted is None else acted[0]  # with a memory: each row keeps the state acted from
        self.memory.add(step.obs, step.action, step.reward, step.next_obs, step.terminated, step.truncated, acted_from)
        if self.sequences is not None:
            self.sequences.stored.added(len(step.action))
        if acted is not None:
            acted[1][:, done] = 0.0  # an episode that ended: the next one starts from zeros
            self.hidden, self._acted = acted[1], None

    def restart_episodes(self) -> None:
        """The env restarted every episode (a resume that could not restore it mid-episode): each
        copy's next observation is a new episode's first, and its state starts from zeros."""
        self.memory.known[:] = False
        if self.hidden is not None:
            self.hidden[...] = 0.0

    # -- learning -------------------------------------------------------------------------------

    def update(self, clock: Clock) -> Mapping[str, float]:
        config, self.frame = self.config, clock.frame
        before, previous = clock.frame, clock.frame - self.num_envs
        if config.target_update == "hard" and crossed(previous, before, config.target_update_frequency):
            self.target_update.copy()
        if before < config.learning_starts or self.memory.size < config.batch_size:
            return {}
        count = (before // config.train_frequency - previous // config.train_frequency) * config.gradient_steps
        if count == 0:
            return {}
        uniform = None  # every uniform batch of the update drawn at once (the memory does not change)
        if self.sequences is None and self.importance is None:
            uniform = self.memory.sample_batches(count, config.batch_size, self.generator).to(self.device)
        with torch.no_grad(), flushing_subnormals(self.device):
            if self.sequences is not None:
                steps = [self.sequences.step(clock) for _ in range(count)]
            else:
                steps = [self._gradient_step(*drawn, clock) for drawn in self._batches(count, clock, uniform)]
        epsilon, lr = config.epsilon.value(before, self.max_frame), self.optimizer.param_groups[0]["lr"]
        # read when the session reports or snapshots (every few thousand frames), not every update
        return Metrics(lambda: {**step_stats(steps, config.loss, self.device), "epsilon": epsilon, "lr": lr})

    def _batches(
        self, count: int, clock: Clock, uniform: Transitions | None
    ) -> Iterator[tuple[np.ndarray | None, Transitions, torch.Tensor | None]]:
        """Each gradient step's batch when its turn comes: the update's `uniform` ones with their
        TD targets where fixed for the whole update, or one drawn by the priorities the previous
        step left (beta annealed to 1 at max_frame) with its slots, which take its TD errors."""
        if uniform is None:
            assert self.importance is not None
            beta = self.importance.value(clock.frame, self.max_frame)
            for _ in range(count):
                slots, batch = self.memory.draw_prioritized(self.config.batch_size, self.generator, beta)
                yield slots, batch.to(self.device), None
            return
        fixed = self._fixed_targets(uniform)
        for i in range(count):
            yield None, uniform.map(itemgetter(i)), None if fixed is None else fixed[i]

    def _gradient_step(
        self, slots: np.ndarray | None, batch: Transitions, target: torch.Tensor | None, clock: Clock
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One gradient step on a batch (its TD targets given when fixed for the whole update);
        prioritised replay's rows (`slots`) then take their TD errors as priorities."""
        config = self.config
        target = self.td_targets(batch) if target is None else target
        obs, chosen = network_input(batch.obs, config.network), batch.actions.unsqueeze(-1)
        schedule = (config.optimizer, clock.frame, self.max_frame)
        loss, taken, grad_norm = self.learner.step(
            obs, chosen, target, config.loss, self.optimizer, *schedule, batch.weights
        )
        clock.opt_step += 1
        if config.target_update == "polyak":
            self.target_update.polyak(config.tau)
        if slots is not None:
            self.memory.set_priorities(slots, (taken - target).cpu().numpy())
        return loss, taken, target, grad_norm

    def td_targets(self, batch: Transitions) -> torch.Tensor:
        """`td_target` of a batch, the next action the online network's choice for double DQN."""
        config = self.config
        next_obs = network_input(batch.next_obs, config.network)
        next_q = self.learner.values(next_obs, target=True)
        online = self.learner.values(next_obs, target=False) if config.double else None
        discounts = config.gamma if batch.discounts is None else batch.discounts  # n_step 1: the number
        return td_target(batch.rewards, discounts, batch.terminated, next_q, online, config.value_rescaling)

    def _fixed_targets(self, batches: Transitions) -> torch.Tensor | None:
        """The TD targets of all of this update's batches at once (one large product costs less
        than many small ones), when no gradient step can change them: the target network stays as
        it is for the whole update (a hard update) and picks the next action itself (not double).
        None otherwise: each step computes its own."""
        config = self.config
        if config.target_update != "hard" or config.double or len(batches.obs) == 1:
            return None
        return self.td_targets(batches.map(lambda value: value.flatten(0, 1))).unflatten(0, batches.obs.shape[:2])

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "q": self.q.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "frame": self.frame,
            **self.memory.state_dict(),
            **({} if self.hidden is None else {"hidden": torch.from_numpy(self.hidden.copy())}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.frame = state["frame"]
        self.memory.load_state_dict(state)
        if self.sequences is not None:
            self.sequences.stored.added(self.memory.size)
        if self.hidden is not None:
            self.hidden = state["hidden"].numpy().copy()
