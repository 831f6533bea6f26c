"""A checkpoint's acting policy as an ONNX graph (`rlrun export REF --onnx policy.onnx`), and such a
file played in place of its checkpoint (`rlrun enjoy REF --policy policy.onnx`, onnxruntime).

The graph's input, `observation`, is a batch of observations as the run's env gives them
(`rlrun.enjoy.policy.Policy.make_env`: Atari's frames already skipped, pooled, resized and stacked by
the env, as uint8), in the env's dtype, the batch axis dynamic. Inside the graph: the snapshot's
observation normalisation (`env.normalize`: its float64 statistics, as constants), then the
agent's actor's `graph()` (`rlrun.algorithms.base.Actor`): the conversions the agent makes
(flattened float32 rows, or frames scaled by the CNN), the network's plain torch forward (never the
hand-written kernels training may run) and the greedy choice. A new algorithm is exported by
writing its actor's `graph()`; nothing here knows an algorithm. Outputs, by algorithm:

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
checks (`rlrun.enjoy.onnx_policy`, which reads and plays a file), so a file changed since it was
written is refused.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlrun.algorithms.base import ActingGraph, Actor
from rlrun.enjoy.onnx_policy import PREFIX, graph_sha256, require, runtime
from rlrun.errors import BadInput

if TYPE_CHECKING:
    from rlrun.refs import RunFilter, RunRef

OPSET = 18


# -- the graph: the run's normalisation, then the actor's own ------------------------------------


def acting_graph(actor: Actor, normalizer: Any) -> ActingGraph:
    """The module `export` traces: the actor's greedy graph after the run's frozen normalisation."""
    graph = actor.graph()
    if normalizer is not None and normalizer.obs_rms is not None:
        graph = (Normalized if actor.state_shape is None else NormalizedWithState)(graph, normalizer)
    return graph.eval()


class Normalized(ActingGraph):
    """`Normalizer.observation` (in float64, as it computes, then float32) before the actor's graph
    (`policy`: not `graph`, which names a traced module's own graph)."""

    def __init__(self, graph: ActingGraph, normalizer: Any) -> None:
        super().__init__()
        rms, spec = normalizer.obs_rms, normalizer.spec
        self.policy, self.outputs, self.clip = graph, graph.outputs, float(spec.clip_obs)
        self.obs_mean: torch.Tensor  # not `mean`: an ONNX initializer may not share an output's name
        self.obs_scale: torch.Tensor
        self.register_buffer("obs_mean", torch.from_numpy(np.array(rms.mean, np.float64)))
        self.register_buffer("obs_scale", torch.from_numpy(np.sqrt(rms.var + spec.epsilon)))

    def normalize(self, observation: torch.Tensor) -> torch.Tensor:
        scaled = (observation.to(torch.float64) - self.obs_mean) / self.obs_scale
        return scaled.clamp(-self.clip, self.clip).to(torch.float32)

    def forward(self, observation: torch.Tensor) -> Any:
        return self.policy(self.normalize(observation))


class NormalizedWithState(Normalized):
    """`Normalized` for a graph with a memory: the state passes through."""

    def forward(self, observation: torch.Tensor, state: torch.Tensor) -> Any:  # type: ignore[override]
        return self.policy(self.normalize(observation), state)


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
    from rlrun.enjoy.policy import load_policy
    from rlrun.fsutil import atomic_write

    policy = load_policy(reference, filters, home=home, checkpoint=checkpoint, option="--checkpoint")
    target, obs_space, action_space = policy.target, policy.observation_space, policy.action_space
    if on_target is not None:
        on_target(target)
    actor = policy.actor
    graph = acting_graph(actor, policy.normalizer)
    outputs = list(graph.outputs)
    example = torch.from_numpy(np.zeros((2, *obs_space.shape), dtype=obs_space.dtype))
    state = None if actor.state_shape is None else torch.from_numpy(actor.initial_state(2))
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
    if actor.state_shape is not None:
        parts, size = actor.state_shape
        metadata["state_shape"] = json.dumps([parts, "batch", size])
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


def _traced(graph: Any, example: Any, outputs: list[str], state: Any = None) -> Any:
    """The module's plain forward, captured by torch.export and written by torch's ONNX exporter
    (onnxscript), its chatter silenced. The batch axis stays dynamic where the capture allows it
    (torch.export's strict mode keeps `len(obs)` symbolic, its non-strict mode makes it a number);
    else the graph takes one observation at a time."""
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
