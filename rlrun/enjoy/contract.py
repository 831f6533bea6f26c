"""`policy.contract.json`: what a policy file `rlrun export` wrote promises, written beside it
(`NAME.contract.json` for `NAME.onnx` or `NAME.pt`), so a deployment can check its side without
rlrun: the observation and action spaces and dtypes, the inputs and outputs, the preprocessing the
env must apply before the file sees an observation (the spec's env: Atari's preprocessing, the frame
stack, the wrappers it names; `rlrun.load_policy(...).make_env()` builds exactly that env), the
normalisation inside the graph, the ONNX opset, the software the checkpoint was trained on and
exported with (`rlrun.session.stack`), and the sha256 of the checkpoint and of the file itself.

Plain JSON, sorted keys; written atomically after the file it describes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlrun.enjoy.graph import normalization

if TYPE_CHECKING:
    from rlrun.enjoy.graph import Exported
    from rlrun.enjoy.policy import Policy

FORMAT = "rlrun.policy-contract/1"
PREPROCESSING_KEYS = ("id", "packages", "kwargs", "max_episode_steps", "atari", "frame_stack", "wrappers")
"""The spec's env settings that shape what the policy sees (not how many copies step, or where)."""


def contract_path(policy_file: Path | str) -> Path:
    """Where the contract of `policy_file` goes: `policy.onnx` → `policy.contract.json`."""
    path = Path(policy_file)
    return path.with_name(f"{path.stem}.contract.json")


def write_contract(
    done: Exported,
    policy: Policy,
    *,
    kind: str,
    home: Path | str | None = None,
    opset: int | None = None,
    runtime: dict[str, str] | None = None,
) -> Path:
    """Write the contract of the policy file `done` describes (`kind`: "onnx" or "torchscript";
    `home`: the runs home the checkpoint is in, whose snapshot names the software it trained on;
    `runtime`: the versions of what wrote the file beyond the run's own stack)."""
    from rlrun.fsutil import atomic_write
    from rlrun.session.stack import software_stack

    path = Path(done.path)
    actor = policy.actor
    state = None if actor.state_shape is None else [actor.state_shape[0], "batch", actor.state_shape[1]]
    obs_space, action_space = policy.observation_space, policy.action_space
    document = {
        "format": FORMAT,
        "file": path.name,
        "file_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "kind": kind,
        "run_id": done.run_id,
        "session": done.session,
        "checkpoint_frame": done.checkpoint_frame,
        "checkpoint_sha256": done.checkpoint_sha256,
        "algorithm": policy.spec.agent.algorithm,
        "observation_space": describe_space(obs_space),
        "action_space": describe_space(action_space),
        "inputs": [
            {"name": "observation", "shape": ["batch", *obs_space.shape], "dtype": str(obs_space.dtype)},
            *([] if state is None else [{"name": "state", "shape": state, "dtype": "float32", "initial": "zeros"}]),
        ],
        "outputs": done.outputs,
        "greedy": True,
        "preprocessing": preprocessing(policy),
        "normalization": normalization(policy.normalizer),
        "opset": opset,
        "software": {
            "trained_on": _trained_on(policy, home),
            "exported_with": {**software_stack(policy.spec), **(runtime or {})},
        },
    }
    written = contract_path(path)
    atomic_write(written, (json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode())
    return written


def preprocessing(policy: Policy) -> dict[str, Any]:
    """What the env must do before the file sees an observation: the spec's env, as rlrun builds it."""
    env = policy.spec.to_json()["env"]
    kept = {key: env[key] for key in PREPROCESSING_KEYS if key in env}
    return {
        **kept,
        "built_by": "rlrun.load_policy(...).make_env(): gym.make(id, **kwargs), then Atari's preprocessing,"
        " the frame stack and the wrappers, innermost first",
    }


def describe_space(space: Any) -> dict[str, Any]:
    """A Gymnasium space as JSON: its kind, shape and dtype, and its bounds or counts."""
    from gymnasium import spaces

    described: dict[str, Any] = {
        "type": type(space).__name__,
        "shape": list(space.shape or ()),
        "dtype": str(space.dtype),
    }
    if isinstance(space, spaces.Box):
        described.update(low=_bound(space.low), high=_bound(space.high))
    elif isinstance(space, spaces.Discrete):
        described.update(n=int(space.n), start=int(space.start))
    elif isinstance(space, spaces.MultiDiscrete):
        described.update(nvec=np.asarray(space.nvec).tolist())
    elif isinstance(space, spaces.MultiBinary):
        described.update(n=np.asarray(space.n).tolist())
    return described


def _bound(values: np.ndarray) -> Any:
    """A Box's bound: one number when every entry has it (Atari's 0..255 frames), else the array."""
    flat = np.asarray(values).ravel()
    if flat.size and (flat == flat[0]).all():
        return flat[0].item()
    return np.asarray(values).tolist()


def _trained_on(policy: Policy, home: Path | str | None) -> dict[str, str] | None:
    """The software the checkpoint's session recorded (None: a snapshot from before it did, or
    one outside the home, as a run folder named by its path)."""
    from rlrun import paths, snapshot

    folder = paths.resolve_home(home) / policy.target.checkpoint.path
    if not folder.is_dir():
        return None
    return snapshot.read_meta(folder).stack
