"""A policy file `rlrun export --onnx` wrote, checked and played in place of its checkpoint
(`rlrun enjoy REF --policy policy.onnx`, through onnxruntime); what the file holds is said in
`rlrun.enjoy.onnx`, which writes it.

A file is played only once it is known to be an unchanged export (its graph's sha256 is the one
its metadata names) of the checkpoint the reference names, made for the run's env's observations
and actions; else one line says why (BadInput)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlrun.errors import BadInput, install_hint

if TYPE_CHECKING:
    from rlrun.algorithms.base import ActingGraph
    from rlrun.enjoy import EnjoyTarget

PREFIX = "rlrun."
"""Every metadata key rlrun writes starts with it."""


def require(*modules: str, doing: str) -> None:
    """One line naming the extra when a module of it is missing (exit 2)."""
    import importlib.util

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise BadInput(
            f"{doing} needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
            f" not installed: {install_hint('onnx')}"
        )


def runtime(data: bytes) -> Any:
    """An onnxruntime session of a serialized model, on the CPU, its warnings quiet."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])


def graph_sha256(model: Any) -> str:
    """The sha256 of the graph (its nodes and weights), metadata aside."""
    return hashlib.sha256(model.graph.SerializeToString(deterministic=True)).hexdigest()


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


class OnnxActor:
    """An exported policy as an actor (`rlrun.algorithms.base.Actor`), played through onnxruntime
    where the checkpoint's would be: `step` gives the graph's greedy `action` for a batch of raw
    observations (the graph normalises them itself) and, with a memory, its `next_state`."""

    def __init__(self, session: Any, dtype: np.dtype[Any], state_shape: tuple[int, int] | None = None) -> None:
        self.session, self.dtype, self.state_shape = session, dtype, state_shape

    def initial_state(self, batch: int) -> np.ndarray | None:
        from rlrun.algorithms.base import zero_state  # the checkpoint's actors' rule (this module stays torch-free)

        return zero_state(self.state_shape, batch)

    def step(
        self, obs: np.ndarray, state: np.ndarray | None, *, deterministic: bool = True, generator: Any = None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        if not deterministic:
            raise ValueError("a policy file plays its greedy action only")
        feeds = {"observation": np.asarray(obs, self.dtype)}
        if state is None:
            action: np.ndarray = self.session.run(["action"], feeds)[0]
            return action, None
        action, after = self.session.run(["action", "next_state"], {**feeds, "state": state})
        return action, after

    def graph(self) -> ActingGraph:
        raise NotImplementedError("a policy file is already a graph")

    @classmethod
    def open(cls, file: PolicyFile, env: Any) -> OnnxActor:
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
        state_shape = None
        if "state_shape" in meta:
            parts, _, size = json.loads(meta["state_shape"])
            state_shape = (int(parts), int(size))
        if len(inputs) != (1 if state_shape is None else 2) or list(inputs[0].shape[1:]) != obs_shape:
            raise BadInput(
                f"--policy {path}: its graph does not take the run's observations {obs_shape}; export it again"
            )
        return cls(session, np.dtype(env.observation_space.dtype), state_shape)
