"""A checkpoint's acting policy as an ONNX graph (`rlrun export REF --onnx policy.onnx`), and such a
file played in place of its checkpoint (`rlrun enjoy REF --policy policy.onnx`, onnxruntime).

The graph's input, `observation`, is a batch of observations as the run's env gives them
(`rlrun.enjoy.policy.Policy.make_env`: Atari's frames already skipped, pooled, resized and stacked by
the env, as uint8), in the env's dtype, the batch axis dynamic. Inside the graph
(`rlrun.enjoy.graph.acting_graph`, which the TorchScript export traces too): the snapshot's
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from rlrun.enjoy.contract import write_contract
from rlrun.enjoy.graph import Exported, acting_graph, check_destination, example_inputs, exported, policy_of
from rlrun.enjoy.onnx_policy import PREFIX, graph_sha256, require, runtime
from rlrun.errors import BadInput
from rlrun.session.stack import versions

if TYPE_CHECKING:
    from rlrun.enjoy.policy import Policy
    from rlrun.refs import RunFilter, RunRef

OPSET = 18


def export_onnx(
    reference: Policy | RunRef | str,
    path: Path | str,
    filters: RunFilter | None = None,
    *,
    home: Path | str | None = None,
    checkpoint: str | int | None = None,
    on_target: Any = None,
) -> Exported:
    """Write the acting policy of the checkpoint `reference` names (as `rlrun enjoy` chooses it;
    `checkpoint`: "best", "latest" or a frame count), or of a loaded `Policy`, to `path` as an ONNX
    graph, atomically, and its contract beside it (`rlrun.enjoy.contract`). Reads the registry,
    never writes it."""
    require("onnx", "onnxscript", "onnxruntime", doing="rlrun export --onnx")
    path = Path(path)
    check_destination(path, (".onnx",), "--onnx")
    from rlrun.fsutil import atomic_write

    policy = policy_of(reference, filters, home=home, checkpoint=checkpoint, on_target=on_target)
    target, obs_space, action_space = policy.target, policy.observation_space, policy.action_space
    actor = policy.actor
    graph = acting_graph(actor, policy.normalizer)
    outputs = list(graph.outputs)
    example, state = example_inputs(policy)
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
    done = exported(path, policy, outputs, len(data))
    runtime = versions("onnx", "onnxscript", "onnxruntime")
    write_contract(done, policy, kind="onnx", home=home, opset=OPSET, runtime=runtime)
    return done


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
