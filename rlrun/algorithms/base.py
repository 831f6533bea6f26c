"""What every algorithm shares: the agent interface and a few small building blocks.

The interface follows Stable-Baselines3's split between collecting and training, without its
class hierarchy: the session loop calls `act`, steps the env, hands the transition to `observe`,
and calls `update`, which optimises when the algorithm has gathered enough. `state_dict` must hold
everything needed to continue bit for bit (weights, optimiser, partial rollouts, random generators)
as tensors and plain Python values, so a snapshot loads with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import torch
from torch import nn

from rlrun.arithmetic import NEWEST, Arithmetic
from rlrun.clock import Clock
from rlrun.spec import NetworkSpec


@dataclass(frozen=True)
class Step:
    """One vector-env step: arrays with a leading `num_envs` axis.

    `next_obs` is the true next observation: for an env whose episode just ended it is the final
    observation, not the first of the next episode.
    """

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: np.ndarray


class Agent(Protocol):
    METRICS: ClassVar[tuple[str, ...]]
    """The scalars `update` reports, in the order the metrics log's columns take them."""
    HEADLINE: ClassVar[str]
    """The one the live display shows beside return and frames/s."""

    def act(
        self, obs: np.ndarray, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> np.ndarray:
        """Training's actions for a batch of observations, drawn from the agent's own generator
        (and memory). Playing outside training goes through `actor`, which never touches either;
        `deterministic` and `generator` are kept for callers of the agent itself."""
        ...

    def observe(self, step: Step) -> None: ...

    def update(self, clock: Clock) -> Mapping[str, float]:
        """Optimise if it is time to; advance `clock.opt_step`; return the losses and diagnostics
        named in `METRICS` (empty if idle; `Metrics` to compute them only if read). Diagnostics
        come from tensors the update computes anyway: they never change what it learns."""
        ...

    @property
    def actor(self) -> Actor:
        """How this agent plays (`Actor`): the one acting path outside training."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Actor(Protocol):
    """How an agent plays: the one acting path. Evaluation, `enjoy`, `load_policy`, `record` and the
    ONNX/TorchScript export use only this, so a new algorithm gets all of them by writing its actor
    (in its own file, beside its networks). Training's `act` may be built on the same `step`, with
    the agent's own state and generator; an actor's `step` never touches either.

    State is what the agent remembers between steps of an episode (`agent.network.recurrent`):
    float32 arrays of shape (parts, batch, size) (an LSTM's h and c, a GRU's h), the batch axis
    second as torch's cells keep it. A memoryless actor has `state_shape` None and its state is
    always None."""

    state_shape: tuple[int, ...] | None
    """One env copy's state without the batch axis, (parts, size); None without a memory."""

    def initial_state(self, batch: int) -> Any:
        """The state `batch` fresh episodes start from (zeros; None without a memory)."""
        ...

    def step(
        self, obs: np.ndarray, state: Any, *, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> tuple[np.ndarray, Any]:
        """Actions for a batch of observations (normalised as the agent sees them) as the env takes
        them, and the state after reading them; the `state` passed in is never changed. Greedy when
        `deterministic`; else drawn from `generator` alone (ValueError when none is given)."""
        ...

    def graph(self) -> ActingGraph:
        """The greedy path as a plain torch module (never the hand-written kernels): what the
        exporter traces after the normalisation it adds."""
        ...


def zero_state(state_shape: tuple[int, ...] | None, batch: int) -> np.ndarray | None:
    """`Actor.initial_state` of an actor whose memory starts at zeros: (parts, batch, size) float32
    for `state_shape` (parts, size), None without a memory."""
    if state_shape is None:
        return None
    parts, size = state_shape
    return np.zeros((parts, batch, size), np.float32)


class ActingGraph(nn.Module):
    """An actor's greedy path as torch: `forward(observation)` (with a memory: `forward(observation,
    state)`) returns one tensor per name in `outputs`: `action` first, as the env takes it, then the
    algorithm's own (`q_values`, `logits`, `mean`, `log_std`), and `next_state` last with a memory.
    `observation` is a batch as the agent's `act` takes it (after the normalisation), in the env's dtype."""

    outputs: tuple[str, ...] = ("action",)


class Metrics(Mapping[str, float]):
    """An update's diagnostics, computed from its tensors the first time they are read. The
    session reads only the last update's before it logs or snapshots (every few thousand frames),
    so an algorithm that updates every few frames need not reduce each update's tensors to numbers
    (a dozen small operations a gradient step): it hands `compute` the tensors, which it must not
    change afterwards, and the numbers are the ones computing them at once would have given."""

    def __init__(self, compute: Callable[[], dict[str, float]]) -> None:
        self._compute: Callable[[], dict[str, float]] | None = compute
        self._values: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        if self._compute is not None:
            self._values, self._compute = self._compute(), None  # the tensors are let go once read
        return self._values

    def __getitem__(self, name: str) -> float:
        return self._read()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __bool__(self) -> bool:  # an update that has something to report: read it only when asked
        return True


ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}


def mlp(inputs: int, outputs: int, network: NetworkSpec, *, output_gain: float = 1.0) -> nn.Sequential:
    """A multi-layer perceptron with orthogonal initialisation (the PPO-paper default)."""
    if network.kind != "mlp":
        raise ValueError(
            f'this algorithm builds multi-layer perceptrons only, not a {network.kind}; use agent.network.kind = "mlp"'
        )
    layers: list[nn.Module] = []
    width = inputs
    for hidden in network.hidden:
        layers += [orthogonal(nn.Linear(width, hidden), gain=float(np.sqrt(2))), ACTIVATIONS[network.activation]()]
        width = hidden
    layers.append(orthogonal(nn.Linear(width, outputs), gain=output_gain))
    return nn.Sequential(*layers)


def network(
    obs_space: Any, outputs: int, spec: NetworkSpec, *, output_gain: float = 1.0, arithmetic: Arithmetic = NEWEST
) -> nn.Module:
    """The spec's network from observations to `outputs` values: an `mlp`, a `NatureCNN` and a
    linear head, or the user's own (`user_network`, which initialises its own output layer);
    `arithmetic`: the run's revision's flags (`rlrun.arithmetic`), which the `NatureCNN` computes with."""
    if spec.user:
        from rlrun.algorithms import user_network

        return user_network.build(obs_space, outputs, spec)
    if spec.kind == "nature_cnn":
        torso = NatureCNN(obs_space, spec, arithmetic=arithmetic)
        return nn.Sequential(torso, orthogonal(nn.Linear(torso.width, outputs), gain=output_gain))
    return mlp(obs_size(obs_space), outputs, spec, output_gain=output_gain)


def mlp_or_user(obs_space: Any, outputs: int, spec: NetworkSpec, *, output_gain: float = 1.0) -> nn.Module:
    """An `mlp`, or the user's own network, for an algorithm without a convolutional variant (its
    `mlp` refuses a nature_cnn)."""
    if spec.user:
        return network(obs_space, outputs, spec)
    return mlp(obs_size(obs_space), outputs, spec, output_gain=output_gain)


class NatureCNN(nn.Module):
    """The convolutions of the Nature DQN (Mnih et al., 2015) and the spec's hidden layers after them.

    Observations are uint8 images: (H, W), a stack of them (N, H, W), colour ones (H, W, 3) or a
    stack of colour ones (N, H, W, 3); the stack (and the colours) are the channels. They are scaled
    by 1/255 here, so memories and rollouts keep them as bytes. Flattened rows (a replay memory's)
    are put back in shape first.

    The run's arithmetic (`arithmetic`, flags of `MetaSpec.arithmetic`'s revision) may compute the
    same functions rounded differently, in less time: the 1/255 folded into the first convolution's
    weights (`cnn_scaling_in_weights`, `ScalingConv2d`: no pass over every frame's floats), and
    acting's dense layers reading their weights transposed (`cnn_acts_transposed`,
    `TransposedWeights`). Revision 1 keeps the bits it always had.
    """

    def __init__(self, obs_space: Any, spec: NetworkSpec, *, arithmetic: Arithmetic = NEWEST) -> None:
        super().__init__()
        self.obs_shape, (channels, height, width) = tuple(obs_space.shape), _image_layout(obs_space)
        self.colour = len(self.obs_shape) >= 3 and self.obs_shape[-1] == 3
        self.folded = arithmetic.cnn_scaling_in_weights
        """The frames' 1/255 is the first convolution's (`ScalingConv2d`), not `scaled`'s."""
        gain = float(np.sqrt(2))
        first = ScalingConv2d if self.folded else nn.Conv2d
        # ReLUs in place: a convolution's backward reads its input, never its output
        self.convolutions = nn.Sequential(
            orthogonal(first(channels, 32, 8, stride=4), gain),
            nn.ReLU(inplace=True),
            orthogonal(nn.Conv2d(32, 64, 4, stride=2), gain),
            nn.ReLU(inplace=True),
            orthogonal(nn.Conv2d(64, 64, 3, stride=1), gain),
            FlatReLU(),
            nn.Flatten(),
        )
        # oneDNN's faster layout on the CPU (a fifth off a DQN gradient step); a device move keeps it
        self.convolutions.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        width = 64 * _conv_out(height) * _conv_out(width)
        layers: list[nn.Module] = []
        for hidden in spec.hidden:
            layers += [orthogonal(nn.Linear(width, hidden), gain), ACTIVATIONS[spec.activation]()]
            width = hidden
        self.dense = nn.Sequential(*layers)
        self.width = width
        """Features out, what the heads take."""
        self.acting_dense = TransposedWeights(self.dense) if arithmetic.cnn_acts_transposed else None
        """How `act` runs the dense layers: with their weights transposed, or as learning does."""

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.of_scaled(self.scaled(obs))

    def scaled(self, obs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Observations as the convolutions read them: floats scaled to [0, 1] (or left in [0, 255]
        when the first convolution scales its weights instead: `folded`), channels
        first in shape and last in memory (oneDNN's layout). Into `out` if given (a float32 buffer of that
        shape and layout, which a learner keeps: the same values, without a fresh allocation's
        page faults each minibatch), else a new tensor."""
        x = obs.reshape(len(obs), *self.obs_shape)
        if self.colour:  # channels last: move them before the rows, and merge them with a stack's
            x = x.movedim(-1, -3).flatten(1, -3) if x.dim() == 5 else x.movedim(-1, 1)
        elif x.dim() == 3:
            x = x[:, None]
        if x.dtype == torch.uint8:  # row-major bytes (acting's): transposed as bytes, a quarter of the
            x = x.contiguous(memory_format=torch.channels_last)  # floats' traffic (a third off the pass)
        # bytes to scaled floats in oneDNN's layout in two passes, not three: half the time of the
        # three (a third of the first convolution's forward and backward on a PPO minibatch); a copy
        # always, so the in-place scaling never writes into the caller's tensor
        if out is None:
            out = x.to(dtype=torch.float32, memory_format=torch.channels_last, copy=True)
        else:
            out.copy_(x)
        return out if self.folded else out.mul_(1.0 / 255.0)

    def of_scaled(self, x: torch.Tensor) -> torch.Tensor:
        """The features of observations already `scaled`."""
        out: torch.Tensor = self.dense(self.convolutions(x))
        return out

    @torch.inference_mode()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """The features of observations to act on, without autograd's bookkeeping (no version
        counters, no views tracked): a few per cent of an acting pass on a handful of frames. The
        output is for NumPy at once (inference tensors never enter a graph)."""
        if self.acting_dense is None:
            out: torch.Tensor = self(obs)
            return out
        return self.acting_dense(self.convolutions(self.scaled(obs)))


class ScalingConv2d(nn.Conv2d):
    """The first convolution of a `NatureCNN` that takes frames in [0, 255] (`cnn_scaling_in_weights`):
    its weights times 1/255, so the frames' floats need no scaling pass of their own (a pass over
    a PPO minibatch's 29 MB of floats; the weights are 8k numbers). The same parameters, under the
    same names, as the `nn.Conv2d` that scales the frames instead."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(x, self.weight * (1.0 / 255.0), self.bias)


class TransposedWeights:
    """Dense layers as acting runs them (`cnn_acts_transposed`): each weight read from a transposed
    copy, which the matrix product takes in its faster order (on a handful of frames, 0.3 ms for a
    512-unit layer on Breakout's features against 0.7 ms: a fifth of acting). A copy is made again
    whenever its weight changed since (an optimiser's step or `load_state_dict`, in place: its
    version moves; a device move: its storage), so acting always reads the current weights."""

    def __init__(self, dense: nn.Sequential) -> None:
        self.dense = dense
        self.kept: dict[int, tuple[tuple[int, int], torch.Tensor]] = {}
        """Layer index: ((the weight's storage, its version) when copied, the transposed copy)."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.dense):
            x = (
                torch.addmm(layer.bias, x, self.transposed(i, layer.weight))
                if isinstance(layer, nn.Linear)
                else layer(x)
            )
        return x

    def transposed(self, i: int, weight: torch.Tensor) -> torch.Tensor:
        seen = (weight.data_ptr(), weight._version)
        kept = self.kept.get(i)
        if kept is None or kept[0] != seen:
            kept = self.kept[i] = (seen, weight.detach().t().contiguous())
        return kept[1]


class FlatReLU(nn.ReLU):
    """The last convolution's ReLU, taken after its output is put in row-major order (what Flatten
    needs: the same copy it would make, made first). Taken before, in oneDNN's channels-last layout,
    its backward would meet Flatten's row-major gradient, and a ReLU's backward over two layouts
    runs ten times slower than over one (a tenth of a PPO minibatch's whole backward on Breakout)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu_(x.contiguous())


def channels_last_zeros(leading: tuple[int, ...], obs_shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Zeros for `leading` batches of image observations, in their own shape but laid out in
    memory as `NatureCNN` reads them: a grey stack (N, H, W) with its frames last. Its bytes then
    become floats in oneDNN's layout in one straight pass, not a gather across the frames (a
    PPO minibatch's conversion in a third of the time); anything else is stored as it is."""
    if np.dtype(dtype) != np.uint8 or len(obs_shape) != 3 or obs_shape[-1] == 3:
        return np.zeros((*leading, *obs_shape), dtype=dtype)
    frames, height, width = obs_shape
    return np.moveaxis(np.zeros((*leading, height, width, frames), dtype=dtype), -1, -3)


def copy_into(into: np.ndarray, value: np.ndarray) -> None:
    """`into[...] = value`, by torch for frames: NumPy copies a row-major stack into a channels-last
    rollout element by element, torch in a third of the time (the same bytes)."""
    if (
        isinstance(value, np.ndarray)
        and value.shape == into.shape
        and value.dtype == into.dtype == np.uint8
        and value.flags.writeable
    ):
        torch.from_numpy(into).copy_(torch.from_numpy(value))
    else:
        into[...] = value


def take_rows(batch: torch.Tensor, index: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """`batch[index]` along the first axis, gathered as whole rows in memory order. Indexing
    reads a channels-last stack of frames one byte at a time across its strides: gathered as
    (N, H, W, C) rows, a PPO minibatch's frames take a sixth of the time (a copy each, the
    same bytes in the same layout). Into `out` if given (shaped and laid out as the result)."""
    if batch.dim() == 4 and not batch.is_contiguous() and batch.is_contiguous(memory_format=torch.channels_last):
        rows = None if out is None else out.permute(0, 2, 3, 1)
        return torch.index_select(batch.permute(0, 2, 3, 1), 0, index, out=rows).permute(0, 3, 1, 2)
    if out is None:
        return batch[index]
    return torch.index_select(batch, 0, index, out=out)


class KeptFrames:
    """A learner's minibatches of frames, gathered and scaled into buffers it keeps from one
    minibatch to the next (the same values as `take_rows` then `NatureCNN.scaled` give). Fresh
    tensors of a minibatch's size (a PPO one on Breakout: 7 MB of bytes, 29 MB of floats) come
    from the system each time, and their first writes fault in every page: kept ones are
    written at memory speed. Each minibatch's floats are overwritten by the next one's, so a
    graph that read them must have run its backward first (one gradient step per minibatch)."""

    def __init__(self, cnn: NatureCNN) -> None:
        self.cnn = cnn
        self.rows: torch.Tensor | None = None
        self.floats: torch.Tensor | None = None

    def take(self, frames: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        n = len(index)
        if (
            self.rows is None
            or self.rows.shape[1:] != frames.shape[1:]
            or len(self.rows) < n
            or self.rows.dtype != frames.dtype
            or self.rows.device != frames.device
        ):
            self.rows = take_rows(frames, index)
            self.floats = self.cnn.scaled(self.rows)
            return self.floats
        assert self.floats is not None
        return self.cnn.scaled(take_rows(frames, index, out=self.rows[:n]), out=self.floats[:n])


def _conv_out(size: int) -> int:
    """A side of the Nature convolutions' output for a side of `size` pixels."""
    return ((size - 8) // 4 + 1 - 4) // 2 + 1 - 3 + 1


def _image_layout(space: Any) -> tuple[int, int, int]:
    """(channels, height, width) of image observations; ValueError for anything else."""
    shape = tuple(getattr(space, "shape", None) or ())
    is_image = getattr(space, "dtype", None) == np.uint8 and 2 <= len(shape) <= 4
    if not is_image:
        seen = f"{getattr(space, 'dtype', None)} of shape {shape}" if shape else type(space).__name__
        raise ValueError(
            f"the nature_cnn network needs image observations (uint8 frames), not {seen};"
            ' use agent.network.kind = "mlp"'
        )
    colour = len(shape) >= 3 and shape[-1] == 3
    height, width = shape[-3:-1] if colour else shape[-2:]
    channels = int(np.prod(shape[:-3])) * 3 if colour else int(np.prod(shape[:-2]))
    if min(height, width) < 36:
        raise ValueError(
            f"the nature_cnn network needs frames of at least 36×36 pixels, not {height}×{width}; "
            "raise env.atari.screen_size"
        )
    return channels, height, width


class Fast:
    """Evaluates an `mlp` with NumPy on views of its torch parameters, for acting.

    Acting feeds a handful of observations per step, where torch's per-operation dispatch costs
    several times the arithmetic; NumPy does the same forward pass in a fraction of the time. The
    views share memory with the parameters, which optimisers and `load_state_dict` update in
    place, so this always computes with the current weights. Learning stays in torch.
    """

    _ACTIVATIONS: ClassVar[dict[type[nn.Module], Callable[[np.ndarray], np.ndarray]]] = {
        nn.Tanh: np.tanh,
        nn.ReLU: lambda x: np.maximum(x, 0, out=x),
        nn.ELU: lambda x: np.where(x > 0, x, np.expm1(x)),
    }

    def __init__(self, net: nn.Module) -> None:
        self.steps: list[tuple[np.ndarray, np.ndarray] | Any] = []
        device = next(net.parameters(), torch.empty(0)).device
        if device.type != "cpu" or not isinstance(net, nn.Sequential):  # on a GPU, or the user's: torch's forward
            self.steps = [lambda x: forward_no_grad(net, torch.from_numpy(x).to(device)).cpu().numpy()]
            return
        for module in net:
            if isinstance(module, nn.Linear):
                self.steps.append((module.weight.detach().numpy().T, module.bias.detach().numpy()))
            elif type(module) in self._ACTIVATIONS:
                self.steps.append(self._ACTIVATIONS[type(module)])
            else:
                self.steps = [lambda x, net=net: forward_no_grad(net, torch.from_numpy(x)).numpy()]  # e.g. GELU
                return

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
        for step in self.steps:
            x = x @ step[0] + step[1] if isinstance(step, tuple) else step(x)
        return x


@torch.no_grad()
def forward_no_grad(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = net(x)
    return out


class TargetUpdate:
    """A target network's parameters and its source network's, listed once: the in-place steps
    that move the target towards the source (`load_state_dict` and the optimisers write into these
    same tensors, so the lists stay current). Plain views of the parameters, detached: no autograd
    needed around them, and no override check per Parameter."""

    def __init__(self, target: nn.Module, source: nn.Module) -> None:
        self.target = [param.detach() for param in target.parameters()]
        self.source = [param.detach() for param in source.parameters()]

    def polyak(self, tau: float) -> None:
        """target += tau * (source - target), each tensor by torch's lerp kernel."""
        torch._foreach_lerp_(self.target, self.source, tau)

    def copy(self) -> None:
        """target = source (a hard update, in place: a fraction of load_state_dict's cost)."""
        torch._foreach_copy_(self.target, self.source)


_MSE_LOSS: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor] = torch._C._nn.mse_loss  # type: ignore[assignment]
"""Its stub names the reduction a str; the binding takes torch's enum as an int (1: "mean")."""


def mse_loss(prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """`functional.mse_loss(prediction, target)` (the mean) for tensors of the same shape: its
    kernel, without functional's Python checks and broadcasting (nothing to do at equal shapes)."""
    return _MSE_LOSS(prediction, target, 1)


def step_means(names: tuple[str, ...], rows: list[torch.Tensor]) -> dict[str, float]:
    """An update's diagnostics: each gradient step's row of numbers (in `names`' order), averaged
    over the steps in double precision."""
    return dict(zip(names, torch.stack(rows).double().mean(dim=0).tolist(), strict=True))


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A batch from host memory on the device the networks learn on (on the CPU: the same
    tensors, not copies). Memories, rollouts and generators stay on the host (`rlrun.session.device`)."""
    if device.type == "cpu":  # skips a dispatch per tensor per gradient step
        return batch
    return {name: value.to(device) for name, value in batch.items()}


def flat_float(obs: torch.Tensor) -> torch.Tensor:
    """A batch of observations as a multi-layer perceptron takes them: one float32 row each (the
    replay memory keeps the env's shape and dtype)."""
    return obs.reshape(len(obs), -1).float()


def network_input(obs: torch.Tensor, spec: NetworkSpec) -> torch.Tensor:
    """A replayed batch of observations as the spec's `network` takes it: float rows for an MLP,
    the frames as they are for the CNN (it scales its uint8 input itself; a float copy would be 4×
    the bytes)."""
    return obs if spec.kind == "nature_cnn" else flat_float(obs)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def sample_categorical(log_probs: np.ndarray, generator: torch.Generator) -> np.ndarray:
    """One draw per row, by inverting the cumulative distribution at a uniform number from the
    agent's generator (what torch.multinomial does, at a fraction of its cost for small batches)."""
    uniform = torch.rand(len(log_probs), 1, generator=generator, dtype=torch.float64).numpy()
    cumulative = np.exp(log_probs.astype(np.float64)).cumsum(axis=-1)
    return np.minimum((cumulative < uniform * cumulative[:, -1:]).sum(axis=-1), log_probs.shape[-1] - 1)


_Layer = TypeVar("_Layer", nn.Linear, nn.Conv2d)


def orthogonal(layer: _Layer, gain: float) -> _Layer:
    nn.init.orthogonal_(layer.weight, gain)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


def explained_variance(predicted: np.ndarray, target: np.ndarray) -> float:
    """1 - Var(target - predicted) / Var(target): 1 for a perfect value function, 0 for one no
    better than a constant, negative for worse (NaN when the targets do not vary)."""
    variance = float_variance(target)
    return math.nan if variance == 0 else 1.0 - float_variance(target - predicted) / variance


def float_variance(x: np.ndarray) -> float:
    """`float(np.var(x))` for a float array, by NumPy's own arithmetic (the sum, divided in place
    by the count, is the mean; the squared deviations' sum over the count, the variance) without
    its generality, which costs several times the arithmetic for a rollout's few hundred numbers."""
    count = np.intp(x.size)
    mean = np.add.reduce(x, axis=None, keepdims=True)
    np.true_divide(mean, count, out=mean, casting="unsafe")
    deviations = np.subtract(x, mean)
    total = np.add.reduce(np.square(deviations, out=deviations), axis=None)
    return float(total.dtype.type(total / count))


def obs_size(space: Any) -> int:
    return int(np.prod(space.shape))
