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

With a memory (`agent.network.recurrent`), it is R2D2 (Kapturowski et al., 2019) without its
distributed actors: the Q-network reads a recurrent cell (`RecurrentQ`), each env copy's state is
the agent's (zeroed where an episode ends, in every snapshot), every row of the replay memory keeps
the state the agent acted from, and a gradient step learns from `batch_size` sequences of
`burn_in` + `sequence_length` consecutive rows of one env copy, each unrolled from its first row's
stored state, the burn-in without gradient (`_sequence_step`).
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
    ActingGraph,
    Fast,
    Metrics,
    Step,
    TargetUpdate,
    log_softmax,
    mse_loss,
    network,
    network_input,
    obs_size,
    orthogonal,
    sample_categorical,
    step_means,
    to_device,
)
from rlrun.algorithms.optim import flushing_subnormals, make_optimizer, optimise
from rlrun.algorithms.recurrent import Cell, torso
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
        return self.aggregate(self.net(obs))

    @staticmethod
    def aggregate(out: torch.Tensor) -> torch.Tensor:
        """V + (A − mean(A)) from heads `out` (V, then A, along the last axis)."""
        value, advantage = out[..., :1], out[..., 1:]
        return value + (advantage - advantage.mean(dim=-1, keepdim=True))


def _aggregate(out: np.ndarray) -> np.ndarray:
    """`Dueling.aggregate` in NumPy, for acting."""
    value, advantage = out[:, :1], out[:, 1:]
    return value + (advantage - advantage.mean(axis=-1, keepdims=True))


def fast_values(q: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
    """Acting's Q-values, by NumPy where `Fast` can (a few observations a step: torch's dispatch
    would cost more than the arithmetic); dueling heads aggregated as `Dueling` does."""
    if not isinstance(q, Dueling):
        return Fast(q)
    heads = Fast(q.net)
    return lambda obs: _aggregate(heads(obs))


class RecurrentQ(nn.Module):
    """R2D2's Q-network: the torso (`recurrent.torso`: an MLP's hidden layers, or the user's
    network), a recurrent cell (`recurrent.Cell`) and a linear head over its output, one Q-value
    per action or dueling heads (V, then A, aggregated as `Dueling` does). Its state is the cell's,
    (parts, batch, size): an LSTM's h and c, a GRU's h."""

    def __init__(self, obs_space: spaces.Space, actions: int, config: Config) -> None:
        super().__init__()
        network = config.network
        assert network.recurrent is not None
        if network.kind == "nature_cnn":
            raise BadInput(
                "agent.network.recurrent: DQN's memory reads an MLP's or a user's network, not "
                "nature_cnn yet; set agent.network.kind to mlp or remove agent.network.recurrent"
            )
        self.torso, width = torso(obs_space, network, obs_size(obs_space))
        self.cell = Cell(width, network.recurrent)
        self.dueling = config.dueling
        self.head = nn.Sequential(orthogonal(nn.Linear(network.recurrent.size, actions + self.dueling), gain=1.0))
        self.fast: tuple[Fast, Fast] | None = None

    def ready(self) -> None:
        """Acting's NumPy copies, once the module is where it learns."""
        self.fast = Fast(self.torso), Fast(self.head)

    def initial(self, batch: int) -> np.ndarray:
        """The state of `batch` fresh episodes: zeros."""
        return np.zeros((self.cell.parts, batch, self.cell.size), dtype=np.float32)

    def step(self, obs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Acting's Q-values of `obs` read from `state`, and the state after (a new array), in NumPy."""
        assert self.fast is not None
        torso_, head = self.fast
        after = self.cell.step(torso_(obs), state)
        out = head(after[0])
        return (_aggregate(out) if self.dueling else out), after

    def unroll(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor, burn_in: int = 0) -> torch.Tensor:
        """The Q-values (steps − burn_in, batch, actions) of sequences `obs` (steps, batch, inputs:
        float rows) read from `state` (parts, batch, size), zeroed before each step where `starts`
        (steps, batch) is 1; the first `burn_in` steps only advance the state, without gradient."""
        if burn_in:
            with torch.no_grad():
                _, state = self.cell.unroll_to(
                    self.torso(obs[:burn_in].flatten(0, 1)).unflatten(0, (burn_in, -1)), state, starts[:burn_in]
                )
            state = state * (1.0 - starts[burn_in]).view(1, -1, 1)  # an episode starting right after it
            obs, starts = obs[burn_in:], starts[burn_in:]
        x = self.torso(obs.flatten(0, 1)).unflatten(0, (len(obs), -1))
        out: torch.Tensor = self.head(self.cell.unroll(x, state, starts))
        return Dueling.aggregate(out) if self.dueling else out


class QActor:
    """How a DQN agent plays (`base.Actor`): epsilon-greedy or Boltzmann over its Q-values, at the
    schedules' values for the agent's last update's frame, drawn from the caller's generator alone;
    greedy when `deterministic`. With a memory (`RecurrentQ`) the state is the cell's, as training's
    is; without one it is None. Training's `act` is this same `step`, from the agent's own state and
    generator."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.state_shape: tuple[int, ...] | None = None
        if isinstance(agent.q, RecurrentQ):
            self.state_shape = (agent.q.cell.parts, agent.q.cell.size)

    def initial_state(self, batch: int) -> np.ndarray | None:
        q = self.agent.q
        return q.initial(batch) if isinstance(q, RecurrentQ) else None

    def step(
        self,
        obs: np.ndarray,
        state: np.ndarray | None,
        *,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        agent = self.agent
        after: np.ndarray | None = None
        if isinstance(agent.q, RecurrentQ):
            assert state is not None, "an agent with a memory acts from a state: initial_state(n) for fresh episodes"
            q, after = agent.q.step(obs, state)
            values: Callable[[], np.ndarray] = lambda: q  # noqa: E731
        else:
            values = lambda: agent.fast_q(obs)  # noqa: E731
        if deterministic:
            return values().argmax(axis=-1), after
        if generator is None:
            raise ValueError("an actor draws its exploring actions from the caller's generator: pass one")
        return agent._choose(len(obs), values, generator), after

    def graph(self) -> ActingGraph:
        q = self.agent.q
        if isinstance(q, RecurrentQ):
            return RecurrentQGraph(q).eval()
        return QGraph(q, cnn=self.agent.config.network.kind == "nature_cnn").eval()


def _rows(observation: torch.Tensor) -> torch.Tensor:
    """A batch of observations as `Fast` feeds a network: float32 rows (the batch axis traced)."""
    return observation.to(torch.float32).reshape(observation.shape[0], -1)


class QGraph(ActingGraph):
    """A memoryless Q-network's greedy path: the greedy action (int64) and the Q-values. The CNN
    takes the frames as they are (it scales them itself), the others float32 rows."""

    outputs = ("action", "q_values")

    def __init__(self, q: nn.Module, *, cnn: bool) -> None:
        super().__init__()
        self.q, self.cnn = q, cnn

    def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q: torch.Tensor = self.q(observation if self.cnn else _rows(observation))
        return q.argmax(dim=-1), q


class CellStep(nn.Module):
    """One step of a `recurrent.Cell` from `state` on its torso's output `x`, in torch, as
    `Cell.step` computes it: the state after (its h first)."""

    def __init__(self, cell: Cell) -> None:
        super().__init__()
        self.lstm = cell.lstm
        self.w_ih, self.w_hh, self.b_ih, self.b_hh = cell.weights

    def forward(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        read = x @ self.w_ih.t() + self.b_ih
        kept = state[0] @ self.w_hh.t() + self.b_hh
        if self.lstm:  # torch's LSTM gates (i, f, g, o)
            i, f, g, o = (read + kept).chunk(4, dim=-1)
            c = torch.sigmoid(f) * state[1] + torch.sigmoid(i) * torch.tanh(g)
            return torch.stack([torch.sigmoid(o) * torch.tanh(c), c])
        r_i, z_i, n_i = read.chunk(3, dim=-1)  # the GRU's (r, z, n)
        r_h, z_h, n_h = kept.chunk(3, dim=-1)
        z = torch.sigmoid(z_i + z_h)
        n = torch.tanh(n_i + torch.sigmoid(r_i + r_h) * n_h)
        return (n + z * (state[0] - n))[None]


class RecurrentQGraph(ActingGraph):
    """R2D2's greedy path (`RecurrentQ`): its torso on float32 rows, one cell step from `state`
    and the (dueling) head; the greedy action (int64), the Q-values and the state after."""

    outputs = ("action", "q_values", "next_state")

    def __init__(self, q: RecurrentQ) -> None:
        super().__init__()
        self.torso, self.cell, self.head, self.dueling = q.torso, CellStep(q.cell), q.head, q.dueling

    def forward(
        self, observation: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        after = self.cell(self.torso(_rows(observation)), state)
        out: torch.Tensor = self.head(after[0])
        q = Dueling.aggregate(out) if self.dueling else out
        return q.argmax(dim=-1), q, after


def q_network(obs_space: spaces.Space, actions: int, config: Config, arithmetic: Arithmetic) -> nn.Module:
    """The spec's Q-network: one output per action, or `Dueling` heads over the network built for
    one more; a user's network that cannot give that many is refused (BadInput, one line)."""
    if config.network.recurrent is not None:
        return RecurrentQ(obs_space, actions, config)
    if not config.dueling:
        return network(obs_space, actions, config.network, arithmetic=arithmetic)
    try:
        return Dueling(network(obs_space, actions + 1, config.network, arithmetic=arithmetic))
    except BadInput as error:
        raise BadInput(
            f"{error} (agent.dueling asks it for {actions + 1} outputs: the state's value, then one "
            "advantage per action; or set agent.dueling = false)"
        ) from None


class Autograd:
    """Autograd's learner, for every network: the Q-networks' forward passes, and one gradient
    step down the TD loss."""

    def __init__(self, q: nn.Module, target: nn.Module) -> None:
        self.q, self.target = q, target

    def values(self, obs: torch.Tensor, *, target: bool) -> torch.Tensor:
        """The target network's Q-values of `obs` (`target`), or the online network's."""
        out: torch.Tensor = (self.target if target else self.q)(obs)
        return out

    def step(
        self,
        obs: torch.Tensor,
        chosen: torch.Tensor,
        target: torch.Tensor,
        loss: str,
        optimizer: torch.optim.Optimizer,
        spec: OptimizerSpec,
        frame: int,
        max_frame: int,
        weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
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
        self.hidden: np.ndarray | None = None
        """With a memory (`RecurrentQ`): each env copy's state, as training's last step left it,
        zeroed where an episode ended. State: in every snapshot."""
        self._acted: tuple[np.ndarray, np.ndarray] | None = None
        """With a memory: the state the last training step acted from, and the state after it."""
        if isinstance(self.q, RecurrentQ):
            self.q.ready()
            self.hidden = self.q.initial(num_envs)
            # the Remembering interface (`base.remembers`), only on agents with a memory
            self.initial_memory = self.q.initial
            self.act_remembering = self._act_remembering
        else:
            self.fast_q = fast_values(self.q)
        self.target_update = TargetUpdate(self.target, self.q)
        self.prioritized = config.memory.prioritized
        self.importance = None if self.prioritized is None else importance_exponent(self.prioritized)
        """Prioritised replay's importance-sampling exponent β over frames (to 1 at max_frame)."""
        kernel = (
            kernel_for.find_q_network(self.q, self.target, kernels)
            if self.prioritized is None and self.hidden is None
            else None
        )
        self.learner: Autograd | kernel_for.QKernel = kernel or Autograd(self.q, self.target)
        """Runs the networks and steps the loss: autograd, or a kernel that computes the same
        (`rlrun.algorithms.kernels`; `kernels`: the spec's `meta.kernels`). The kernel takes no
        weighted loss (prioritised replay's), no recurrent network and no dueling network (`QKernel.fits`)."""
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
            state_shape=None if self.hidden is None else self.hidden[:, 0].shape,
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.frame = 0
        """The clock's frame at the last update: exploration schedules are read at it."""
        self._actor = QActor(self)

    # -- acting ---------------------------------------------------------------------------------

    @property
    def actor(self) -> QActor:
        """How this agent plays (`base.Actor`): the one acting path outside training."""
        return self._actor

    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> np.ndarray:
        if self.hidden is not None:
            if deterministic or generator is not None:
                raise RuntimeError(
                    "an agent with a memory plays through act_remembering: training's memory is for training's steps"
                )
            # explored or not, every step advances the memory
            actions, after = self.actor.step(obs, self.hidden, generator=self.generator)
            assert after is not None
            self._acted = (self.hidden, after)
            return actions
        return self.actor.step(obs, None, deterministic=deterministic, generator=generator or self.generator)[0]

    def _choose(self, count: int, values: Callable[[], np.ndarray], g: torch.Generator) -> np.ndarray:
        """Exploring actions for `count` observations whose Q-values `values` gives, drawn from `g`."""
        if self.config.exploration == "boltzmann":
            temperature = self.config.temperature.value(self.frame, self.max_frame)
            return sample_categorical(log_softmax(values() / temperature), g)
        epsilon = self.config.epsilon.value(self.frame, self.max_frame)
        explore = torch.rand(count, generator=g).numpy() < epsilon
        random_actions = torch.randint(self.actions, (count,), generator=g).numpy()
        if explore.all():  # no copy reads its Q-values: skip the forward pass (the draws are the same)
            return random_actions
        return np.where(explore, random_actions, values().argmax(axis=-1))

    def _act_remembering(
        self,
        obs: np.ndarray,
        memory: np.ndarray,
        *,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Actions from the caller's `memory` and the memory after `obs` (`base.Remembering`): the
        agent's own memory and generator are not touched. The actor's `step`, kept for the callers
        that have not moved to it."""
        if not deterministic and generator is None:
            raise ValueError("acting from a memory draws its actions from the caller's generator: pass one")
        actions, after = self.actor.step(obs, memory, deterministic=deterministic, generator=generator)
        assert after is not None
        return actions, after

    def observe(self, step: Step) -> None:
        if self.hidden is None:
            self.memory.add(step.obs, step.action, step.reward, step.next_obs, step.terminated, step.truncated)
            return
        assert self._acted is not None, "observe() follows a training act()"
        acted_from, after = self._acted
        self.memory.add(step.obs, step.action, step.reward, step.next_obs, step.terminated, step.truncated, acted_from)
        after[:, step.terminated | step.truncated] = 0.0  # an episode that ended: the next one starts from zeros
        self.hidden, self._acted = after, None

    def restart_episodes(self) -> None:
        """The env restarted every episode (a resume that could not restore it mid-episode): each
        copy's next observation is a new episode's first, for the memory, and its state starts
        from zeros."""
        self.memory.known[:] = False
        if self.hidden is not None:
            self.hidden[...] = 0.0

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
        if self.hidden is not None:
            with torch.no_grad(), flushing_subnormals(self.device):
                steps = [self._sequence_step(clock) for _ in range(count)]
            return self._metrics(steps, before)
        if self.prioritized is not None:
            with torch.no_grad(), flushing_subnormals(self.device):
                steps = [self._prioritized_step(clock) for _ in range(count)]
            return self._metrics(steps, before)
        batches = to_device(self.memory.sample_batches(count, config.batch_size, self.generator), self.device)
        with torch.no_grad(), flushing_subnormals(self.device):
            targets = self._fixed_targets(batches)
            obs = network_input(batches["obs"].flatten(0, 1), config.network).unflatten(0, (count, -1)).unbind(0)
            chosen = batches["actions"].unsqueeze(-1).unbind(0)
            steps = [
                self._gradient_step(
                    obs[i],
                    chosen[i],
                    targets[i]
                    if targets is not None
                    else self._td_target({name: value[i] for name, value in batches.items()}),
                    clock,
                )
                for i in range(count)
            ]
        return self._metrics(steps, before)

    def _metrics(
        self, steps: list[tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]], frame: int
    ) -> Metrics:
        # read when the session reports or snapshots (every few thousand frames), not every update
        epsilon, lr = self.config.epsilon.value(frame, self.max_frame), self.optimizer.param_groups[0]["lr"]
        return Metrics(lambda: {**self._step_stats(steps), "epsilon": epsilon, "lr": lr})

    def _prioritized_step(self, clock: Clock) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
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

    def _sequence_step(self, clock: Clock) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One gradient step of R2D2: `batch_size` sequences drawn (uniformly, or by their first
        row's priority), each unrolled by the online and the target network from the state stored
        with its first row, the burn-in without gradient; the TD loss is the mean over the steps
        after it (those `ReplayMemory.sequences` marks valid and not cut), weighed by importance
        with prioritised replay, and a sequence's priority becomes R2D2's mix of its TD errors,
        0.9·max + 0.1·mean (its first row's: the priority it is drawn by)."""
        config, memory = self.config, self.memory
        assert isinstance(self.q, RecurrentQ) and isinstance(self.target, RecurrentQ)
        weights = None
        if self.importance is not None:
            beta = self.importance.value(clock.frame, self.max_frame)
            slots, drawn = memory.draw_prioritized_slots(config.batch_size, self.generator, beta)
            weights = torch.from_numpy(drawn).to(self.device)
        else:
            slots = memory.draw(config.batch_size, self.generator)
        batch = to_device(memory.sequences(slots, config.burn_in + config.sequence_length), self.device)
        burn_in = config.burn_in
        obs = network_input(batch["obs"].flatten(0, 1), config.network).unflatten(0, batch["obs"].shape[:2])
        state, starts = batch["states"], batch["starts"]
        next_q = self.target.unroll(obs, state, starts, burn_in)[1:]
        with torch.enable_grad():
            q = self.q.unroll(obs, state, starts, burn_in)
            taken = q[:-1].gather(2, batch["actions"][burn_in:].unsqueeze(-1)).squeeze(-1)
            if config.double:
                next_value = next_q.gather(2, q[1:].detach().argmax(dim=-1, keepdim=True)).squeeze(-1)
            else:
                next_value = next_q.max(dim=-1).values
            target, learnt = self._sequence_targets(batch, next_value)
            losses = _SAMPLE_LOSSES[config.loss](taken, target) * learnt
            if weights is not None:
                losses = losses * weights
            loss = losses.sum() / learnt.sum().clamp(min=1)
            grad_norm = optimise(self.optimizer, loss, config.optimizer, clock.frame, self.max_frame)
        clock.opt_step += 1
        if config.target_update == "polyak":
            self.target_update.polyak(config.tau)
        if self.importance is not None:  # a sequence with no step learnt from (at its copy's newest rows) keeps its own
            errors = (taken.detach() - target).abs() * learnt
            mixed = 0.9 * errors.max(dim=0).values + 0.1 * errors.sum(dim=0) / learnt.sum(dim=0).clamp(min=1)
            seen = learnt.any(dim=0).cpu().numpy()
            if seen.any():
                memory.set_priorities(slots[seen], mixed.cpu().numpy()[seen])
        return loss.detach(), taken.detach()[learnt], target[learnt], grad_norm

    def _sequence_targets(
        self, batch: dict[str, torch.Tensor], next_value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The TD targets of a batch of sequences' learning steps (steps, batch), from the target
        network's values of what each step led to (`next_value`), and which steps are learnt
        from: valid ones whose bootstrap is known (not a truncation the sequence runs past). With
        n-step returns, each step's window runs over the following steps of the sequence while its
        episode goes on (cut at the episode's end or the sequence's last valid step) and
        bootstraps where it stops."""
        config, burn_in = self.config, self.config.burn_in
        rewards, terminated = batch["rewards"][burn_in:], batch["terminated"][burn_in:]
        valid, stop = batch["valid"][burn_in:], batch["starts"][burn_in + 1 :] == 1
        bootstrap = (1.0 - terminated) * next_value
        steps = len(rewards)
        index = torch.arange(steps, device=rewards.device).unsqueeze(1).expand_as(rewards)
        total, discount, last = rewards.clone(), torch.full_like(rewards, config.gamma), index
        going = ~stop & ~terminated.bool()
        for k in range(1, config.n_step):
            ahead = (index + k).clamp(max=steps - 1)
            going = going & (index + k < steps) & valid.gather(0, ahead)
            total = torch.where(going, total + discount * rewards.gather(0, ahead), total)
            discount = torch.where(going, discount * config.gamma, discount)
            last = torch.where(going, ahead, last)
            going = going & ~stop.gather(0, ahead) & ~terminated.gather(0, ahead).bool()
        learnt = valid & ~batch["cut"][burn_in:].gather(0, last)
        return total + discount * bootstrap.gather(0, last), learnt

    def _step_stats(
        self, steps: list[tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]]
    ) -> dict[str, float]:
        """The `_STEP_STATS`, each the mean over the update's gradient steps (`steps`: each one's
        loss, None where the step did not need it, replayed Q-values, TD targets and gradient norm)."""
        loss_function = _LOSSES[self.config.loss]
        with flushing_subnormals(self.device):  # where the steps formed them, before the stats were deferred
            rows = [
                torch.stack(
                    [
                        loss_function(taken, target) if loss is None else loss,
                        taken.mean(),
                        (taken - target).abs().mean(),
                        grad_norm,
                    ]
                )
                for loss, taken, target, grad_norm in steps
            ]
        return step_means(_STEP_STATS, rows)

    def _fixed_targets(self, batches: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """The TD targets of all of this update's batches at once (one large product costs less
        than many small ones), when no gradient step can change them: the target network stays as
        it is for the whole update (a hard update) and picks the next action itself (not double).
        None otherwise: each step computes its own."""
        config = self.config
        if config.target_update != "hard" or config.double or len(batches["obs"]) == 1:
            return None
        return self._td_target({name: value.flatten(0, 1) for name, value in batches.items()}).unflatten(
            0, batches["obs"].shape[:2]
        )

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

    def _gradient_step(
        self,
        obs: torch.Tensor,
        chosen: torch.Tensor,
        target: torch.Tensor,
        clock: Clock,
        weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One gradient step on a replayed batch: its observations, actions taken (a column), TD
        targets and importance weights (prioritised replay); returns what `_step_stats` reads: its
        loss (None where the learner did not need it to step), Q-values of the actions taken,
        targets and gradient norm."""
        config = self.config
        if weights is None:
            loss, taken, grad_norm = self.learner.step(
                obs, chosen, target, config.loss, self.optimizer, config.optimizer, clock.frame, self.max_frame
            )
        else:
            assert isinstance(self.learner, Autograd)
            loss, taken, grad_norm = self.learner.step(
                obs, chosen, target, config.loss, self.optimizer, config.optimizer, clock.frame, self.max_frame, weights
            )
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
            **({} if self.hidden is None else {"hidden": torch.from_numpy(self.hidden.copy())}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.q.load_state_dict(state["q"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.frame = state["frame"]
        self.memory.load_state_dict(state)
        if self.hidden is not None:
            self.hidden = state["hidden"].numpy().copy()
