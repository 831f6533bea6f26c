"""A memory for PPO, A2C and DQN (`agent.network.recurrent`): a recurrent cell between the
network's torso and its heads, whose hidden state carries what the agent has seen this episode.
DQN's Q-network (`dqn.RecurrentQ`, R2D2's) reads one `Cell` after one `torso`; the rest of this
module is the on-policy actor-critic's.

As sb3-contrib's `RecurrentPPO` does by default (`enable_critic_lstm=True`), the actor and the
critic each have their own cell (a NatureCNN's convolutions stay shared, as without a memory);
where CleanRL's `ppo_atari_lstm.py` and this module agree, the cell sits after the torso (the MLP's
hidden layers, the convolutions, or the user's network) and before the linear heads. Its state
starts from zeros at each episode's start.

A memory is one float32 array of shape (parts, batch, size): the actor's cell's state, then the
critic's (an LSTM's h and c, a GRU's h), so that zeroing where episodes ended and copying it into
a snapshot are one operation each. Playing (`onpolicy.ActorCriticActor`) carries the actor's part
alone: no value is needed there.

Acting steps the cells in NumPy on views of their weights (`Cell.step`, as `base.Fast` does the
MLPs): a handful of observations per step, where torch's dispatch costs more than the arithmetic.
Learning re-runs each env copy's whole rollout in torch from the memory it started with, resetting
where an episode started (truncated backpropagation through time over the rollout, CleanRL's way),
in spans between those starts so that torch's own LSTM and GRU loops run the steps.
"""

from __future__ import annotations

import itertools
from typing import Any, cast

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rlrun.algorithms.base import ACTIVATIONS, Fast, NatureCNN, obs_size, orthogonal
from rlrun.spec import NetworkSpec, RecurrentSpec


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


class Cell(nn.Module):
    """One LSTM or GRU layer. Its state is `parts` arrays of (batch, size): an LSTM's h and c, a GRU's h."""

    def __init__(self, inputs: int, spec: RecurrentSpec) -> None:
        super().__init__()
        self.lstm = spec.cell == "lstm"
        self.parts = 2 if self.lstm else 1
        self.size = spec.size
        self.rnn: nn.LSTM | nn.GRU = (nn.LSTM if self.lstm else nn.GRU)(inputs, spec.size)
        self.weights: tuple[torch.Tensor, ...] = tuple(
            getattr(self.rnn, name) for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
        )
        """The layer's parameters (the same tensors)."""
        for name, param in self.rnn.named_parameters():  # CleanRL's initialisation
            if name.startswith("weight"):
                nn.init.orthogonal_(param, 1.0)
            else:
                nn.init.zeros_(param)
        self._views: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def views(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """The weights as NumPy views (transposed for `x @ w`), sharing memory with the parameters
        (optimisers and `load_state_dict` write in place); None on a GPU."""
        w_ih, w_hh, b_ih, b_hh = self.weights
        if self._views is None and w_ih.device.type == "cpu":
            self._views = (
                w_ih.detach().numpy().T,
                w_hh.detach().numpy().T,
                b_ih.detach().numpy(),
                b_hh.detach().numpy(),
            )
        return self._views

    def step(self, x: np.ndarray, state: np.ndarray) -> np.ndarray:
        """The state after reading one batch of inputs `x` (its h is the output): (parts, batch, size)."""
        views = self.views()
        if views is None:
            return self._step_torch(x, state)
        w_ih, w_hh, b_ih, b_hh = views
        h = state[0]
        if self.lstm:
            gates = x @ w_ih + b_ih + (h @ w_hh + b_hh)
            i, f, g, o = np.split(gates, 4, axis=-1)
            c = _sigmoid(f) * state[1] + _sigmoid(i) * np.tanh(g)
            return np.stack([_sigmoid(o) * np.tanh(c), c]).astype(np.float32, copy=False)
        read, kept = x @ w_ih + b_ih, h @ w_hh + b_hh
        r_i, z_i, n_i = np.split(read, 3, axis=-1)
        r_h, z_h, n_h = np.split(kept, 3, axis=-1)
        z = _sigmoid(z_i + z_h)
        n = np.tanh(n_i + _sigmoid(r_i + r_h) * n_h)
        return (n + z * (h - n))[None].astype(np.float32, copy=False)

    def graph(self) -> CellGraph:
        """`step` as a plain torch module, for an actor's `graph` (export traces it)."""
        return CellGraph(self)

    def _step_torch(self, x: np.ndarray, state: np.ndarray) -> np.ndarray:
        device = self.weights[0].device
        inputs = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(device)[None]
        held = torch.from_numpy(state).to(device)
        with torch.no_grad():
            _, after = self.rnn(inputs, (held[0:1], held[1:2]) if self.lstm else held[0:1])
        out = torch.cat(after) if self.lstm else after
        return np.asarray(out.cpu().numpy(), dtype=np.float32)

    def unroll(self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        """The outputs (steps, batch, size) of reading `x` (steps, batch, inputs) from `state`
        (parts, batch, size), the state zeroed before each step where `starts` (steps, batch) is 1:
        torch's loop over each span between steps where some episode starts."""
        return self.unroll_to(x, state, starts)[0]

    def unroll_to(
        self, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`unroll`'s outputs and the state after the last step (parts, batch, size): where a
        recurrent DQN's burn-in leaves its learning steps to start from."""
        steps = len(x)
        cuts = [0, *(torch.nonzero(starts[1:].any(dim=1)).flatten() + 1).tolist(), steps]
        held = (state[0:1], state[1:2]) if self.lstm else state[0:1]
        kept = (1.0 - starts).unsqueeze(-1)  # once, not a subtraction per span (the same values)
        outs = []
        for begin, end in itertools.pairwise(cuts):
            if begin > 0:  # episodes start here: their state from zeros
                held = (held[0] * kept[begin], held[1] * kept[begin]) if isinstance(held, tuple) else held * kept[begin]
                out, held = self._span(x[begin:end], held)
            else:  # the module's own call checks the arguments and the weights, for every span
                out, held = self.rnn(x[begin:end], held)
            outs.append(out)
        final = torch.cat(held) if isinstance(held, tuple) else held
        return (torch.cat(outs) if len(outs) > 1 else outs[0]), final

    def _span(self, x: torch.Tensor, held: Any) -> tuple[torch.Tensor, Any]:
        """`self.rnn(x, held)` without its checks: the op it calls, with its arguments. Episodes
        start at nearly every step of a short-episode batch, so most spans are a step or two, and
        the module's checks (of the arguments, of whether its weights were replaced) cost a
        quarter of each; the unroll's first span made them for all (same weights, same shapes)."""
        rnn = self.rnn
        weights = cast(list[torch.Tensor], rnn._flat_weights)
        flags = (rnn.bias, rnn.num_layers, rnn.dropout, rnn.training, rnn.bidirectional, rnn.batch_first)
        if self.lstm:
            out, h, c = torch.lstm(x, held, weights, *flags)
            return out, (h, c)
        out, h = torch.gru(x, held, weights, *flags)
        return out, h


class CellGraph(nn.Module):
    """One step of a `Cell` in torch, as `Cell.step` computes it: `forward(x, state)` is the state
    after reading `x` (its h first). The cell's own parameters, under no new names."""

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


def torso(obs_space: spaces.Space, network: NetworkSpec, width: int) -> tuple[nn.Module, int]:
    """What a cell reads, from inputs `width` wide: an MLP's hidden layers (nothing when it has
    none), or the user's network with the cell's size as its outputs; and its output width."""
    if network.user:
        from rlrun.algorithms import user_network

        assert network.recurrent is not None
        return user_network.build(obs_space, network.recurrent.size, network), network.recurrent.size
    layers: list[nn.Module] = []
    if network.kind == "mlp":
        for hidden in network.hidden:
            layers += [orthogonal(nn.Linear(width, hidden), gain=float(np.sqrt(2))), ACTIVATIONS[network.activation]()]
            width = hidden
    return nn.Sequential(*layers), width


class Recurrent(nn.Module):
    """The memory of an on-policy actor-critic (`onpolicy.ActorCritic.recurrent`): a torso and a
    cell for each head, reading the observations or a shared NatureCNN's features."""

    def __init__(self, obs_space: spaces.Space, network: NetworkSpec, shared: NatureCNN | None) -> None:
        super().__init__()
        spec = network.recurrent
        assert spec is not None
        width = shared.width if shared is not None else obs_size(obs_space)
        self.actor_torso, torso_width = torso(obs_space, network, width)
        self.critic_torso, _ = torso(obs_space, network, width)
        self.actor_cell = Cell(torso_width, spec)
        self.critic_cell = Cell(torso_width, spec)
        self.size = spec.size
        self.parts = self.actor_cell.parts
        """Arrays of the actor's state in a memory (the critic's as many after them)."""
        self.fast_torsos: tuple[Fast, Fast] | None = None

    def ready(self) -> None:
        """Acting's NumPy copies, once the module is where it learns."""
        self.fast_torsos = Fast(self.actor_torso), Fast(self.critic_torso)

    def initial(self, batch: int) -> np.ndarray:
        return np.zeros((2 * self.parts, batch, self.size), dtype=np.float32)

    def step(self, features: np.ndarray, memory: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The memory after reading `features` and the critic's cell output."""
        assert self.fast_torsos is not None
        p = self.parts
        actor = self.actor_step(features, memory[:p])
        after = self.critic_cell.step(self.fast_torsos[1](features), memory[p:])
        return np.concatenate([actor, after]), after[0]

    def actor_step(self, features: np.ndarray, state: np.ndarray) -> np.ndarray:
        """The actor's cell's state (`parts` arrays) after reading `features` from `state`: what
        playing carries, the critic's cell left out (no value is needed there)."""
        assert self.fast_torsos is not None
        return self.actor_cell.step(self.fast_torsos[0](features), state)

    def critic_output(self, features: np.ndarray, memory: np.ndarray) -> np.ndarray:
        """The critic's cell's output on `features`, from the critic's part of `memory` (unchanged)."""
        assert self.fast_torsos is not None
        return self.critic_cell.step(self.fast_torsos[1](features), memory[self.parts :])[0]

    def unroll(
        self, features: torch.Tensor, memory: torch.Tensor, starts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's and the critic's cell outputs (steps × envs rows, step-major) over whole
        sequences: `features` (steps × envs rows), from `memory` (parts, envs, size), reset where
        `starts` (steps, envs) is 1."""
        steps, envs = starts.shape
        p = self.parts
        outs = []
        for torso_, cell, state in (
            (self.actor_torso, self.actor_cell, memory[:p]),
            (self.critic_torso, self.critic_cell, memory[p:]),
        ):
            x = torso_(features).reshape(steps, envs, -1)
            outs.append(cell.unroll(x, state, starts).reshape(steps * envs, -1))
        return outs[0], outs[1]
