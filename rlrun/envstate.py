"""Capture and restore a Gymnasium env's state as plain JSON, never pickle.

A snapshot taken mid-episode must put the env back exactly where it was: the physics state, the
time-limit counter, the wrappers' flags and every random generator (the env's own and its spaces').
Classic-control envs keep all of that in plain attributes (numbers, arrays, tuples), so the walk
below records every plain attribute of each wrapper layer and of the base env, and every
generator's bit-generator state. An attribute that is not plain (a Box2D world, a MuJoCo model)
makes the env *not capturable*; the session then resumes at an episode boundary instead, and says
so in the registry.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

# Configuration, rendering and structure: rebuilt from the spec, never captured.
_SKIP = {
    "env", "envs", "env_fns", "spec", "_cached_spec", "_saved_kwargs", "metadata", "_metadata", "render_mode",
    "screen", "clock", "isopen", "action_space", "_action_space", "observation_space", "_observation_space",
    "single_action_space", "single_observation_space", "autoreset_mode", "observation_mode", "copy", "num_envs",
    "_np_random",
}


class NotCapturable(Exception):
    """The env holds state that cannot be written as plain data."""


# -- plain values <-> JSON ------------------------------------------------------------------------


def encode(value: Any, where: str) -> Any:
    """A JSON form that `decode` turns back into an identical value (dtype and shape included)."""
    if isinstance(value, np.generic):  # before float: np.float64 is a float subclass
        return {"scalar": encode(np.asarray(value), where), "dtype": value.dtype.str}
    if value is None or isinstance(value, bool | int | str | float):
        return value  # Python's json writes floats with repr, which reads back to the same double
    if isinstance(value, np.ndarray) and value.dtype != object:
        return {"array": value.ravel().tolist(), "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, tuple | list):
        items = [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return {"tuple": items} if isinstance(value, tuple) else {"list": items}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: encode(v, f"{where}.{k}") for k, v in value.items()}}
    raise NotCapturable(f"{where} is a {type(value).__name__}")


def decode(data: Any) -> Any:
    if data is None or isinstance(data, bool | int | str | float):
        return data
    if "array" in data:
        return np.array(data["array"], dtype=np.dtype(data["dtype"])).reshape(data["shape"])
    if "scalar" in data:
        return decode(data["scalar"])[()]
    if "tuple" in data:
        return tuple(decode(v) for v in data["tuple"])
    if "list" in data:
        return [decode(v) for v in data["list"]]
    return {k: decode(v) for k, v in data["dict"].items()}


# -- random generators ------------------------------------------------------------------------------


def generator_state(generator: np.random.Generator | None) -> Any:
    return None if generator is None else generator.bit_generator.state


def make_generator(state: Any) -> np.random.Generator | None:
    if state is None:
        return None
    generator = np.random.Generator(getattr(np.random, state["bit_generator"])())
    generator.bit_generator.state = state
    return generator


def _space_generators(space: spaces.Space[Any]) -> Any:
    """A space's generator state, and its sub-spaces' for Dict and Tuple spaces."""
    own = generator_state(space._np_random)
    children = getattr(space, "spaces", None)
    if isinstance(children, dict):
        return {"own": own, "children": {k: _space_generators(s) for k, s in children.items()}}
    if isinstance(children, tuple | list):
        return {"own": own, "children": [_space_generators(s) for s in children]}
    return {"own": own}


def _restore_space_generators(space: spaces.Space[Any], state: Any) -> None:
    space._np_random = make_generator(state["own"])  # type: ignore[assignment]  # None: never seeded yet
    children = getattr(space, "spaces", None)
    if isinstance(children, dict):
        for key, child in children.items():
            _restore_space_generators(child, state["children"][key])
    elif isinstance(children, tuple | list):
        for child, child_state in zip(children, state["children"], strict=True):
            _restore_space_generators(child, child_state)


# -- whole envs ---------------------------------------------------------------------------------------


def _layers(env: Any) -> list[Any]:
    """The wrapper chain from the outside in, ending with the base env."""
    chain = [env]
    while hasattr(chain[-1], "env"):
        chain.append(chain[-1].env)
    return chain


def _plain_attributes(obj: Any, where: str) -> dict[str, Any]:
    return {key: encode(value, f"{where}.{key}") for key, value in vars(obj).items() if key not in _SKIP}


def capture_env(env: Any, where: str = "env") -> dict[str, Any]:
    """The state of one env (all its wrapper layers); raises NotCapturable."""
    layers = _layers(env)
    base = layers[-1]
    return {
        "layers": [_plain_attributes(layer, f"{where}.{type(layer).__name__}") for layer in layers],
        "np_random": generator_state(getattr(base, "_np_random", None)),
        "action_space": _space_generators(base.action_space),
        "observation_space": _space_generators(base.observation_space),
    }


def restore_env(env: Any, state: dict[str, Any]) -> None:
    layers = _layers(env)
    if len(layers) != len(state["layers"]):
        raise NotCapturable("the env's wrappers differ from the snapshot's")
    for layer, attributes in zip(layers, state["layers"], strict=True):
        for key, value in attributes.items():
            setattr(layer, key, decode(value))
    base = layers[-1]
    base._np_random = make_generator(state["np_random"])
    _restore_space_generators(base.action_space, state["action_space"])
    _restore_space_generators(base.observation_space, state["observation_space"])


def capture_vector_env(vector_env: Any) -> dict[str, Any]:
    """A synchronous vector env: its own buffers and spaces, and each copy's state."""
    if not hasattr(vector_env, "envs"):
        raise NotCapturable(f"{type(vector_env).__name__} keeps its copies in other processes")
    return {
        "own": _plain_attributes(vector_env, "vector_env"),
        "action_space": _space_generators(vector_env.action_space),
        "observation_space": _space_generators(vector_env.observation_space),
        "envs": [capture_env(env, f"envs[{i}]") for i, env in enumerate(vector_env.envs)],
    }


def restore_vector_env(vector_env: Any, state: dict[str, Any]) -> None:
    for key, value in state["own"].items():
        setattr(vector_env, key, decode(value))
    _restore_space_generators(vector_env.action_space, state["action_space"])
    _restore_space_generators(vector_env.observation_space, state["observation_space"])
    for env, env_state in zip(vector_env.envs, state["envs"], strict=True):
        restore_env(env, env_state)
