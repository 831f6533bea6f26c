"""A checkpoint's acting policy as an ONNX graph (`rlrun export REF --onnx policy.onnx`), and such a
file played in place of its checkpoint (`rlrun enjoy REF --policy policy.onnx`, onnxruntime).

The graph's one input, `observation`, is a batch of observations as the run's env gives them
(`rlrun.enjoy.policy.Policy.make_env`: Atari's frames already skipped, pooled, resized and stacked by
the env, as uint8), in the env's dtype, the batch axis dynamic. Inside the graph: the snapshot's
observation normalisation (`env.normalize`: its float64 statistics, as constants), the
conversions the agent makes (flattened float32 rows, or frames scaled by the CNN), the network's
plain torch forward (never the hand-written kernels training may run) and the greedy choice.
Outputs, by algorithm:

- `action` (always): the greedy action as the env takes it (DQN's and the discrete policies'
  argmax, int64 or the space's dtype; a Gaussian's mean clipped to the bounds; SAC's squashed
  mean scaled to the bounds);
- DQN: `q_values`; REINFORCE, A2C and PPO over discrete actions: `logits` (one per choice; a
  MultiDiscrete's components side by side, a MultiBinary's one per bit); A2C and PPO over
  continuous actions: `mean` and `log_std` (a sample is `clip(mean + exp(log_std) * noise, low,
  high)`); SAC: `mean` and `log_std`, clamped to [-20, 2] (a sample is
  `low + (tanh(mean + exp(log_std) * noise) + 1) / 2 * (high - low)`).

A policy with a memory (A2C, PPO and DQN with `agent.network.recurrent`) takes a second input,
`state`, and gives a last output, `next_state`: its actor's (DQN's: its Q-network's) cell state,
float32 of shape (parts, batch, size) (an LSTM's h and c, a GRU's h: `rlrun.state_shape` in the
metadata), zeros at each episode's start, the `next_state` of the step before after it. The file's `metadata_props` name
the run, session, checkpoint frame and the checkpoint's sha256, the env and its spaces, the
outputs, and the sha256 of the graph itself (`rlrun.graph_sha256`), which `enjoy --policy`
checks, so a file changed since it was written is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlrun.errors import BadInput, install_hint

if TYPE_CHECKING:
    from rlrun.enjoy import EnjoyTarget
    from rlrun.refs import RunFilter, RunRef

PREFIX = "rlrun."
"""Every metadata key rlrun writes starts with it."""
OPSET = 18


def require(*modules: str, doing: str) -> None:
    """One line naming the extra when a module of it is missing (exit 2)."""
    import importlib.util

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise BadInput(
            f"{doing} needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
            f" not installed: {install_hint('onnx')}"
        )


# -- the graph ------------------------------------------------------------------------------------


def _acting_graph(algorithm: str, agent: Any, normalizer: Any) -> tuple[Any, list[str]]:
    """The torch module `export` traces, and its outputs' names."""
    import torch
    from torch import nn

    def flat(x: torch.Tensor) -> torch.Tensor:  # what `Fast` feeds a network: float32 rows
        return x.to(torch.float32).reshape(x.shape[0], -1)

    def torch_dtype(dtype: Any) -> torch.dtype:
        return torch.from_numpy(np.zeros(0, dtype)).dtype

    class Normalize(nn.Module):
        """`Normalizer.observation`, in float64 as it computes, then float32."""

        def __init__(self) -> None:
            super().__init__()
            rms, spec = normalizer.obs_rms, normalizer.spec
            self.mean: torch.Tensor
            self.scale: torch.Tensor
            self.register_buffer("mean", torch.from_numpy(np.array(rms.mean, np.float64)))
            self.register_buffer("scale", torch.from_numpy(np.sqrt(rms.var + spec.epsilon)))
            self.clip = float(spec.clip_obs)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            scaled = (x.to(torch.float64) - self.mean) / self.scale
            return scaled.clamp(-self.clip, self.clip).to(torch.float32)

    class Discrete(nn.Module):
        """A discrete policy's greedy action as the env takes it (`distributions.*.greedy`, `to_env`)."""

        def __init__(self, policy: Any) -> None:
            super().__init__()
            self.kind = type(policy).__name__
            self.sizes = list(getattr(policy, "sizes", []))
            self.env_shape = tuple(getattr(policy, "env_shape", ()))
            self.env_dtype = torch_dtype(getattr(policy, "env_dtype", np.int64))
            self.start: torch.Tensor
            self.register_buffer("start", torch.from_numpy(np.asarray(getattr(policy, "start", 0), np.int64)))

        def forward(self, out: torch.Tensor) -> torch.Tensor:
            if self.kind == "Categorical":
                return out.argmax(dim=-1)
            if self.kind == "MultiCategorical":
                chosen = torch.stack([part.argmax(dim=-1) for part in out.split(self.sizes, dim=-1)], dim=-1)
                chosen = chosen + self.start
            else:  # Bernoulli
                chosen = (out > 0).to(torch.int64)
            return chosen.reshape(out.shape[0], *self.env_shape).to(self.env_dtype)

    class Graph(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.normalize = None if normalizer is None or normalizer.obs_rms is None else Normalize()

        def forward(self, observation: torch.Tensor) -> tuple[torch.Tensor, ...]:
            x = observation if self.normalize is None else self.normalize(observation)
            return self.head(x)

        def head(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            raise NotImplementedError

    class DQN(Graph):
        def __init__(self) -> None:
            super().__init__()
            self.q = agent.q

        def head(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            q = self.q(flat(x))
            return q.argmax(dim=-1), q

    class ActorCritic(Graph):  # A2C, PPO
        def __init__(self) -> None:
            super().__init__()
            model = agent.model
            self.shared, self.actor, self.continuous = model.shared, model.actor, model.continuous
            self.fixed_log_std: torch.Tensor  # not `log_std`: an initializer may not share an output's name
            self.low: torch.Tensor
            self.high: torch.Tensor
            if self.continuous:
                self.register_buffer("fixed_log_std", model.log_std.detach().clone())
                self.register_buffer("low", torch.from_numpy(np.asarray(model.low)))
                self.register_buffer("high", torch.from_numpy(np.asarray(model.high)))
            else:
                self.greedy = Discrete(model.policy)

        def head(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            features = x if self.shared is None else self.shared(x)  # the CNN takes the frames as they are
            return self.act_on(self.actor(flat(features)))

        def act_on(self, out: torch.Tensor) -> tuple[torch.Tensor, ...]:
            if not self.continuous:
                return self.greedy(out), out
            action = torch.maximum(torch.minimum(out, self.high), self.low)  # np.clip
            return action, out, self.fixed_log_std.expand(out.shape[0], -1)

    class CellStep(nn.Module):
        """One step of a `recurrent.Cell` from `state` on its torso's output `x`, as `Cell.step`
        computes it: the state after (its h first)."""

        def __init__(self, cell: Any) -> None:
            super().__init__()
            self.lstm = cell.lstm
            self.w_ih, self.w_hh, self.b_ih, self.b_hh = cell.weights

        def forward(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
            read = x @ self.w_ih.t() + self.b_ih
            kept = state[0] @ self.w_hh.t() + self.b_hh
            if self.lstm:  # torch's LSTM gates (i, f, g, o), as `recurrent.Cell.step` computes them
                i, f, g, o = (read + kept).chunk(4, dim=-1)
                c = torch.sigmoid(f) * state[1] + torch.sigmoid(i) * torch.tanh(g)
                return torch.stack([torch.sigmoid(o) * torch.tanh(c), c])
            r_i, z_i, n_i = read.chunk(3, dim=-1)  # the GRU's (r, z, n)
            r_h, z_h, n_h = kept.chunk(3, dim=-1)
            z = torch.sigmoid(z_i + z_h)
            n = torch.tanh(n_i + torch.sigmoid(r_i + r_h) * n_h)
            return (n + z * (state[0] - n))[None]

    class RememberingActorCritic(ActorCritic):  # A2C, PPO with a memory: the actor's torso, cell and head
        def __init__(self) -> None:
            super().__init__()
            recurrent = agent.model.recurrent
            self.torso, self.cell = recurrent.actor_torso, CellStep(recurrent.actor_cell)

        def forward(self, observation: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
            x = observation if self.normalize is None else self.normalize(observation)
            features = x if self.shared is None else self.shared(x)
            after = self.cell(self.torso(flat(features)), state)
            return *self.act_on(self.actor(after[0])), after

    class RememberingDQN(Graph):  # DQN with a memory (`dqn.RecurrentQ`): its torso, cell and (dueling) head
        def __init__(self) -> None:
            super().__init__()
            q = agent.q
            self.torso, self.cell, self.q_head, self.dueling = q.torso, CellStep(q.cell), q.head, q.dueling

        def forward(self, observation: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
            from rlrun.algorithms.dqn import Dueling

            x = observation if self.normalize is None else self.normalize(observation)
            after = self.cell(self.torso(flat(x)), state)
            out: torch.Tensor = self.q_head(after[0])
            q = Dueling.aggregate(out) if self.dueling else out
            return q.argmax(dim=-1), q, after

    class Reinforce(Graph):
        def __init__(self) -> None:
            super().__init__()
            self.policy, self.greedy = agent.policy, Discrete(agent.distribution)

        def head(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            out = self.policy(flat(x))
            return self.greedy(out), out

    class SAC(Graph):
        def __init__(self) -> None:
            super().__init__()
            from rlrun.algorithms.sac import LOG_STD_MAX, LOG_STD_MIN

            self.body, self.bounds = agent.actor.body, (LOG_STD_MIN, LOG_STD_MAX)
            self.low: torch.Tensor
            self.span: torch.Tensor
            self.register_buffer("low", torch.from_numpy(np.asarray(agent.low)))
            self.register_buffer("span", torch.from_numpy(np.asarray(agent.high - agent.low)))

        def head(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            mean, log_std = self.body(flat(x)).chunk(2, dim=-1)
            action = self.low + (torch.tanh(mean) + 1) * 0.5 * self.span
            return action, mean, log_std.clamp(*self.bounds)

    graphs: dict[str, tuple[type[Graph], list[str]]] = {
        "dqn": (DQN, ["action", "q_values"]),
        "reinforce": (Reinforce, ["action", "logits"]),
        "sac": (SAC, ["action", "mean", "log_std"]),
        "a2c": (ActorCritic, []),
        "ppo": (ActorCritic, []),
    }
    if algorithm not in graphs:
        raise BadInput(f"rlrun export --onnx knows {', '.join(sorted(graphs))}, not {algorithm}")
    kind, outputs = graphs[algorithm]
    if kind is DQN and getattr(agent, "hidden", None) is not None:
        return RememberingDQN().eval(), [*outputs, "next_state"]
    if kind is ActorCritic:
        outputs = ["action", "mean", "log_std"] if agent.model.continuous else ["action", "logits"]
        if agent.model.recurrent is not None:
            return RememberingActorCritic().eval(), [*outputs, "next_state"]
    return kind().eval(), outputs


# -- export -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exported:
    path: str
    run_id: str
    session: int
    checkpoint_frame: int
    checkpoint_sha256: str
    outputs: list[str]
    bytes: int


def export_onnx(
    reference: RunRef | str,
    path: Path | str,
    filters: RunFilter | None = None,
    *,
    home: Path | str | None = None,
    checkpoint: str | int | None = None,
    on_target: Any = None,
) -> Exported:
    """Write the acting policy of the checkpoint `reference` names (as `rlrun enjoy` chooses it;
    `checkpoint`: "best", "latest" or a frame count) to `path` as an ONNX graph, atomically.
    Reads the registry, never writes it."""
    require("onnx", "onnxscript", "onnxruntime", doing="rlrun export --onnx")
    path = Path(path)
    if path.suffix.lower() != ".onnx":
        raise BadInput(f"--onnx {path}: write a .onnx file")
    if not path.parent.is_dir():
        raise BadInput(f"--onnx {path}: folder {path.parent} does not exist; create it or write elsewhere")
    import torch

    from rlrun.enjoy.policy import load_policy
    from rlrun.fsutil import atomic_write

    policy = load_policy(reference, filters, home=home, checkpoint=checkpoint, option="--checkpoint")
    target, obs_space, action_space = policy.target, policy.observation_space, policy.action_space
    if on_target is not None:
        on_target(target)
    graph, outputs = _acting_graph(policy.spec.agent.algorithm, policy.agent, policy.normalizer)
    example = torch.from_numpy(np.zeros((2, *obs_space.shape), dtype=obs_space.dtype))
    state = _actor_state(policy.agent, 2)
    model = _traced(graph, example, outputs, state)
    metadata = {
        "run_id": target.run.id,
        "session": str(target.session.index),
        "checkpoint_frame": str(target.checkpoint.frame),
        "checkpoint_sha256": target.checkpoint.sha256,
        "algorithm": policy.spec.agent.algorithm,
        "env_id": policy.spec.env.id,
        "observation_shape": json.dumps(list(obs_space.shape)),
        "observation_dtype": str(obs_space.dtype),
        "action_shape": json.dumps(list(action_space.shape or ())),
        "outputs": json.dumps(outputs),
        "recurrent": json.dumps(state is not None),
        "graph_sha256": graph_sha256(model),
    }
    if state is not None:
        metadata["state_shape"] = json.dumps([state.shape[0], "batch", state.shape[2]])
    for key, value in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = PREFIX + key, value
    model.producer_name = "rlrun"
    data = model.SerializeToString()
    _check_runs(data, example.numpy(), None if state is None else state.numpy())
    atomic_write(path, data)
    return Exported(
        str(path),
        target.run.id,
        target.session.index,
        target.checkpoint.frame,
        target.checkpoint.sha256,
        outputs,
        len(data),
    )


def _actor_state(agent: Any, batch: int) -> Any:
    """Zeros shaped as the graph's `state` input for `batch` observations, or None (no memory)."""
    import torch

    cell = getattr(getattr(agent, "q", None), "cell", None)
    if cell is not None:  # DQN with a memory (`dqn.RecurrentQ`): its one cell's
        return torch.zeros((cell.parts, batch, cell.size))
    recurrent = getattr(getattr(agent, "model", None), "recurrent", None)
    if recurrent is None:
        return None
    return torch.zeros((recurrent.parts, batch, recurrent.size))


def _traced(graph: Any, example: Any, outputs: list[str], state: Any = None) -> Any:
    """The module's plain forward, captured by torch.export and written by torch's ONNX exporter
    (onnxscript), its chatter silenced. The batch axis stays dynamic where the capture allows it
    (torch.export's strict mode keeps `len(obs)` symbolic, its non-strict mode makes it a number);
    else the graph takes one observation at a time."""
    import torch

    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    dim = torch.export.Dim("batch")
    batch: Any = ({0: dim},) if state is None else ({0: dim}, {1: dim})
    names = ["observation"] if state is None else ["observation", "state"]
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
            warnings.simplefilter("ignore")
            captured: Any = None
            whole = (example,) if state is None else (example, state)
            one = (example[:1],) if state is None else (example[:1], state[:, :1])
            for strict, shapes, inputs in ((True, batch, whole), (False, batch, whole), (False, None, one)):
                try:
                    captured = torch.export.export(graph, inputs, dynamic_shapes=shapes, strict=strict)
                    break
                except Exception as error:  # torch.export's many kinds: the next way, or its message
                    failure = error
            if captured is None:
                raise BadInput(
                    f"torch.export cannot capture this policy's network ({type(failure).__name__}:"
                    f" {str(failure).splitlines()[0] if str(failure) else ''})"
                )
            program = torch.onnx.export(
                captured, dynamo=True, opset_version=OPSET, input_names=names, output_names=outputs, verbose=False
            )
    finally:
        quiet.setLevel(level)
    assert program is not None
    return program.model_proto


def _check_runs(data: bytes, example: np.ndarray, state: np.ndarray | None = None) -> None:
    """The graph loads in onnxruntime and acts on the example batch (a file that would not is not written)."""
    session = runtime(data)
    n = 1 if session.get_inputs()[0].shape[0] == 1 else None
    feeds = {"observation": example[:n]}
    if state is not None:
        feeds["state"] = state[:, :n]
    session.run(None, feeds)


def runtime(data: bytes) -> Any:
    """An onnxruntime session of a serialized model, on the CPU, its warnings quiet."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def graph_sha256(model: Any) -> str:
    """The sha256 of the graph (its nodes and weights), metadata aside."""
    return hashlib.sha256(model.graph.SerializeToString(deterministic=True)).hexdigest()


# -- playing a file ----------------------------------------------------------------------------------


def check_policy_file(path: Path) -> PolicyFile:
    """The ONNX model in `path` and rlrun's metadata in it, once the file is known to be an
    unchanged export of `rlrun export --onnx`; else one line (BadInput)."""
    require("onnx", "onnxruntime", doing="rlrun enjoy --policy")
    import onnx

    if not path.is_file():
        raise BadInput(f"--policy {path}: no such file; write one with `rlrun export REF --onnx {path}`")
    try:
        model = onnx.load_from_string(path.read_bytes())
    except Exception:  # protobuf's DecodeError and its kin: not a model
        raise BadInput(
            f"--policy {path}: not an ONNX model (it does not parse); export it again with"
            f" `rlrun export REF --onnx {path}`"
        ) from None
    metadata = {p.key[len(PREFIX) :]: p.value for p in model.metadata_props if p.key.startswith(PREFIX)}
    needed = ("run_id", "checkpoint_sha256", "observation_shape", "action_shape", "graph_sha256")
    if any(key not in metadata for key in needed):
        raise BadInput(
            f"--policy {path}: not a policy `rlrun export --onnx` wrote (its metadata does not name a"
            " run and checkpoint); export one with `rlrun export REF --onnx FILE`"
        )
    if graph_sha256(model) != metadata["graph_sha256"]:
        raise BadInput(
            f"--policy {path}: its graph was changed after rlrun exported it (sha256 mismatch);"
            f" export it again with `rlrun export {metadata['run_id']} --onnx {path}`"
        )
    return PolicyFile(path, model, metadata)


@dataclass(frozen=True)
class PolicyFile:
    """An unchanged export (`check_policy_file`): its path, model and rlrun's metadata."""

    path: Path
    model: Any
    metadata: dict[str, str]

    def check_target(self, target: EnjoyTarget) -> None:
        """The file must be the policy of the checkpoint `target` names; else one line."""
        meta = self.metadata
        exported = f"run {meta['run_id']} s{meta.get('session', '?')} @{meta.get('checkpoint_frame', '?')}"
        named = f"run {target.run.id} s{target.session.index} @{target.checkpoint.frame}"
        if meta["run_id"] != target.run.id or meta["checkpoint_sha256"] != target.checkpoint.sha256:
            raise BadInput(
                f"--policy {self.path} is the policy of {exported}, and the reference names {named};"
                f" name its checkpoint ({meta['run_id']}/s{meta.get('session', 0)}"
                f"@{meta.get('checkpoint_frame', 'best')}) or export this one"
            )


class OnnxAgent:
    """An exported policy acting through onnxruntime where enjoy's agent would: `act` gives the
    graph's greedy `action` for a batch of raw observations (the graph normalises them itself). A
    policy with a memory acts through `act_remembering` instead (`rlrun.algorithms.base.Remembering`),
    which evaluation's `play` calls, the state carried from one step to the next."""

    def __init__(self, session: Any, dtype: np.dtype[Any], state_shape: list[Any] | None = None) -> None:
        self.session, self.dtype = session, dtype
        if state_shape is not None:  # the Remembering interface, only for a graph with a state
            parts, _, size = state_shape
            self.initial_memory = lambda batch: np.zeros((parts, batch, size), np.float32)
            self.act_remembering = self._act_remembering

    def _act_remembering(
        self, obs: np.ndarray, memory: np.ndarray, *, deterministic: bool = True, generator: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        action, after = self.session.run(
            ["action", "next_state"], {"observation": np.asarray(obs, self.dtype), "state": memory}
        )
        return action, after

    @classmethod
    def open(cls, file: PolicyFile, env: Any) -> OnnxAgent:
        """The file's graph in onnxruntime, once it is known to take `env`'s observations and give its actions."""
        path, meta = file.path, file.metadata
        obs_shape = list(env.observation_space.shape or ())
        action_shape = list(env.action_space.shape or ())
        if json.loads(meta["observation_shape"]) != obs_shape or json.loads(meta["action_shape"]) != action_shape:
            raise BadInput(
                f"--policy {path}: made for observations {meta['observation_shape']} and actions"
                f" {meta['action_shape']}, and the run's env has {obs_shape} and {action_shape};"
                " export the policy again"
            )
        try:
            session = runtime(file.model.SerializeToString())
        except Exception as error:  # onnxruntime's own failures: a graph it cannot run
            raise BadInput(
                f"--policy {path}: onnxruntime cannot load it ({type(error).__name__}); export it again"
            ) from None
        inputs = session.get_inputs()
        state_shape = json.loads(meta["state_shape"]) if "state_shape" in meta else None
        if len(inputs) != (1 if state_shape is None else 2) or list(inputs[0].shape[1:]) != obs_shape:
            raise BadInput(
                f"--policy {path}: its graph does not take the run's observations {obs_shape}; export it again"
            )
        return cls(session, np.dtype(env.observation_space.dtype), state_shape)

    def act(self, obs: np.ndarray, *, deterministic: bool = True, generator: Any = None) -> np.ndarray:
        action: np.ndarray = self.session.run(["action"], {"observation": np.asarray(obs, self.dtype)})[0]
        return action
