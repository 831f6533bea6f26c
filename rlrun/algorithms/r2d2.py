"""DQN with a memory (`agent.network.recurrent`): R2D2 (Kapturowski et al., 2019) without its
distributed actors. The Q-network reads a recurrent cell (`RecurrentQ`); each env copy's state is
the agent's (zeroed where an episode ends, in every snapshot); every row of the replay memory keeps
the state the agent acted from; and a gradient step (`SequenceLearner`) learns from `batch_size`
sequences of `burn_in` + `sequence_length` consecutive rows of one env copy, each unrolled from its
first row's stored state, the burn-in without gradient. The memory makes each learning step's
n-step window (`replay.Sequences`); the TD target and loss are the family's (`q_learning`), and a
sequence's priority is R2D2's mix of its TD errors.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rlrun.algorithms.base import (
    ActingGraph,
    Fast,
    NatureCNN,
    TargetUpdate,
    network_input,
    obs_size,
    orthogonal,
)
from rlrun.algorithms.optim import optimise
from rlrun.algorithms.q_learning import Dueling, Exploration, StepTensors, aggregate, td_loss, td_target
from rlrun.algorithms.recurrent import Cell, torso
from rlrun.algorithms.replay import ReplayMemory
from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock
from rlrun.spec.agents.dqn import Config, importance_exponent


class RecurrentQ(nn.Module):
    """R2D2's Q-network: the torso (`recurrent.torso`: an MLP's hidden layers, or the user's
    network), a recurrent cell (`recurrent.Cell`) and a linear head over its output, one Q-value
    per action or dueling heads (V, then A, aggregated as `Dueling` does). Its state is the cell's,
    (parts, batch, size): an LSTM's h and c, a GRU's h."""

    def __init__(self, obs_space: spaces.Space, actions: int, config: Config, arithmetic: Arithmetic = NEWEST) -> None:
        super().__init__()
        network = config.network
        assert network.recurrent is not None
        self.cnn: NatureCNN | None = None
        """nature_cnn's torso (its convolutions and hidden layers; R2D2's on Atari, a memory in place
        of frame stacking), rounded as the run's arithmetic says; it takes the frames as bytes."""
        self.torso: nn.Module
        if network.kind == "nature_cnn":
            self.cnn = NatureCNN(obs_space, network, arithmetic=arithmetic)
            self.torso, width = self.cnn, self.cnn.width
        else:
            self.torso, width = torso(obs_space, network, obs_size(obs_space))
        self.cell = Cell(width, network.recurrent)
        self.dueling = config.dueling
        self.head = nn.Sequential(orthogonal(nn.Linear(network.recurrent.size, actions + self.dueling), gain=1.0))
        self.fast: tuple[Callable[[np.ndarray], np.ndarray], Fast] | None = None

    def ready(self) -> None:
        """Acting's NumPy copies (the CNN's acting pass), once the module is where it learns."""
        cnn = self.cnn
        if cnn is None:
            self.fast = Fast(self.torso), Fast(self.head)
            return
        device = next(cnn.parameters()).device
        self.fast = (lambda obs: cnn.act(torch.from_numpy(np.asarray(obs)).to(device)).cpu().numpy()), Fast(self.head)

    def initial(self, batch: int) -> np.ndarray:
        """The state of `batch` fresh episodes: zeros."""
        return np.zeros((self.cell.parts, batch, self.cell.size), dtype=np.float32)

    def step(self, obs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Acting's Q-values of `obs` read from `state`, and the state after (a new array), in NumPy."""
        assert self.fast is not None
        torso_, head = self.fast
        after = self.cell.step(torso_(obs), state)
        out = head(after[0])
        return (aggregate(out) if self.dueling else out), after

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


class RecurrentActor:
    """How R2D2 plays (`base.Actor`): the Q-values read from the caller's state, explored as
    DQN explores (`Exploration`) with the caller's generator, or greedy; the state after them.
    Training's `act` is this `step` from the agent's own state and generator."""

    def __init__(self, q: RecurrentQ, exploration: Exploration) -> None:
        self.q, self.exploration = q, exploration
        self.state_shape: tuple[int, ...] | None = (q.cell.parts, q.cell.size)

    def initial_state(self, batch: int) -> np.ndarray:
        return self.q.initial(batch)

    def step(
        self,
        obs: np.ndarray,
        state: np.ndarray,
        *,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        q, after = self.q.step(obs, state)  # explored or not, every step advances the memory
        if deterministic:
            return q.argmax(axis=-1), after
        if generator is None:
            raise ValueError("acting from a memory draws its actions from the caller's generator: pass one")
        return self.exploration.choose(len(obs), lambda: q, generator), after

    def graph(self) -> ActingGraph:
        return RecurrentQGraph(self.q).eval()


class RecurrentQGraph(ActingGraph):
    """R2D2's greedy path: its torso on float32 rows, one cell step from `state` and the (dueling)
    head; the greedy action (int64), the Q-values and the state after."""

    outputs = ("action", "q_values", "next_state")

    def __init__(self, q: RecurrentQ) -> None:
        super().__init__()
        self.torso, self.cell, self.head, self.dueling = q.torso, q.cell.graph(), q.head, q.dueling
        self.frames = q.cnn is not None

    def forward(
        self, observation: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # the CNN takes the frames as they are (it scales them itself); the others float32 rows, as `Fast`
        rows = observation if self.frames else observation.to(torch.float32).reshape(observation.shape[0], -1)
        after = self.cell(self.torso(rows), state)
        out: torch.Tensor = self.head(after[0])
        q = Dueling.aggregate(out) if self.dueling else out
        return q.argmax(dim=-1), q, after


class StoredSequences:
    """R2D2's stored sequences over a memory that holds each frame once (`agent.sequence_overlap`):
    copy e's sequences start at its steps 0, s, 2s, … (row k·num_envs + e, k a multiple of the
    stride s = burn_in + sequence_length − overlap), and only those rows are drawn; a sequence is
    the rows that follow its start, so overlapping ones share their frames and rows. Stride 1 (no
    overlap given): every row starts one, as the memory draws anyway."""

    def __init__(self, memory: ReplayMemory, stride: int) -> None:
        self.memory, self.stride = memory, stride

    def starting(self, slots: np.ndarray) -> np.ndarray:
        """Which of `slots` hold a row that starts a stored sequence."""
        memory = self.memory
        return (memory.row_numbers(slots) // memory.num_envs) % self.stride == 0

    def draw(self, batch_size: int, generator: torch.Generator) -> np.ndarray:
        """Uniformly (with replacement) among the sampleable starts, with the agent's generator:
        excluded ones drawn again until none is left (`ReplayMemory.draw`'s rule)."""
        memory = self.memory
        if self.stride == 1:
            return memory.draw(batch_size, generator)
        n, stride = memory.num_envs, self.stride
        first = memory.rows_end - memory.size
        steps = np.arange(-(-(first // n) // stride) * stride, -(-memory.rows_end // n), stride)
        numbers = (steps[:, None] * n + np.arange(n)).ravel()
        starts = numbers[(numbers >= first) & (numbers < memory.rows_end)] % memory.capacity
        slots = starts[torch.randint(len(starts), (batch_size,), generator=generator).numpy()]
        while not (ok := memory.sampleable(slots)).all():
            redraw = np.flatnonzero(~ok)
            slots[redraw] = starts[torch.randint(len(starts), (len(redraw),), generator=generator).numpy()]
        return slots

    def added(self, count: int) -> None:
        """After the memory took its newest `count` rows: with prioritised replay, those that start
        no sequence get priority 0, so that none is drawn (a new row gets the largest priority;
        a loaded memory, every row: a fork may turn prioritised replay on)."""
        memory = self.memory
        if self.stride == 1 or memory.priorities is None:
            return
        rows = np.arange(memory.rows_end - count, memory.rows_end)
        between = (rows // memory.num_envs) % self.stride != 0
        if between.any():
            memory.priorities.set(rows[between] % memory.capacity, np.zeros(int(between.sum())))


class SequenceLearner:
    """R2D2's gradient steps, on the agent's networks, optimiser, memory and generator (each
    changed in place by a snapshot's load)."""

    def __init__(
        self,
        config: Config,
        q: RecurrentQ,
        target: RecurrentQ,
        optimizer: torch.optim.Optimizer,
        memory: ReplayMemory,
        generator: torch.Generator,
        max_frame: int,
        device: torch.device,
    ) -> None:
        self.config, self.q, self.target, self.optimizer = config, q, target, optimizer
        self.memory, self.generator, self.max_frame, self.device = memory, generator, max_frame, device
        self.target_update = TargetUpdate(target, q)
        self.stored = StoredSequences(memory, config.sequence_stride)
        prioritized = config.memory.prioritized
        self.importance = None if prioritized is None else importance_exponent(prioritized)

    def step(self, clock: Clock) -> StepTensors:
        """One gradient step: `batch_size` sequences drawn (uniformly, or by their first row's
        priority), each unrolled by the online and the target network from the state stored with
        its first row, the burn-in without gradient; the TD loss is the mean over the learning
        steps the memory marks learnt, weighed by importance with prioritised replay, and a
        sequence's priority becomes R2D2's mix of its TD errors, 0.9·max + 0.1·mean (its first
        row's: the priority it is drawn by)."""
        config, memory, burn_in = self.config, self.memory, self.config.burn_in
        weights = None
        if self.importance is not None:
            beta = self.importance.value(clock.frame, self.max_frame)
            slots, weights = memory.draw_prioritized_slots(config.batch_size, self.generator, beta)
        else:
            slots = self.stored.draw(config.batch_size, self.generator)
        batch = memory.sequences(slots, burn_in + config.sequence_length, burn_in, weights).to(self.device)
        obs = network_input(batch.obs.flatten(0, 1), config.network).unflatten(0, batch.obs.shape[:2])
        next_q = self.target.unroll(obs, batch.states, batch.starts, burn_in)[1:]
        at_last: Callable[[torch.Tensor], torch.Tensor] = lambda q: q.gather(  # noqa: E731
            0, batch.last.unsqueeze(-1).expand(-1, -1, q.shape[-1])
        )
        learnt = batch.learnt
        with torch.enable_grad():
            q = self.q.unroll(obs, batch.states, batch.starts, burn_in)
            taken = q[:-1].gather(2, batch.actions.unsqueeze(-1)).squeeze(-1)
            online = at_last(q[1:].detach()) if config.double else None
            target = td_target(
                batch.rewards, batch.discounts, batch.terminated, at_last(next_q), online, config.value_rescaling
            )
            loss = td_loss(taken, target, config.loss, batch.weights, learnt)
            grad_norm = optimise(self.optimizer, loss, config.optimizer, clock.frame, self.max_frame)
        clock.opt_step += 1
        if config.target_update == "polyak":
            self.target_update.polyak(config.tau)
        if self.importance is not None:  # a sequence with no step learnt from (at its copy's newest rows) keeps its own
            errors = (taken.detach() - target).abs() * learnt
            mixed = 0.9 * errors.max(dim=0).values + 0.1 * errors.sum(dim=0) / learnt.sum(dim=0).clamp(min=1)
            seen = learnt.any(dim=0).cpu().numpy()
            if self.stored.stride > 1:  # a rounding past the last row may draw a row between starts: it stays at 0
                seen &= self.stored.starting(slots)
            if seen.any():
                memory.set_priorities(slots[seen], mixed.cpu().numpy()[seen])
        return loss.detach(), taken.detach()[learnt], target[learnt], grad_norm
