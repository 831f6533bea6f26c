"""Capture and restore a Gymnasium env's state as plain JSON, never pickle.

A snapshot taken mid-episode must put the env back exactly where it was: the physics state, the
time-limit counter, the wrappers' flags and every random generator (the env's own and its spaces').
Each env copy is restored by the best of three means, and says which:

- *captured*, by the env itself: an env (the base env, under its wrappers) that implements rlrun's
  state protocol hands over its own state and takes it back, and is trusted to be complete:

      def get_rlrun_state(self) -> dict[str, Any]: ...   # plain data: numbers, strings, None,
                                                        # NumPy arrays and scalars, and lists,
                                                        # tuples and str-keyed dicts of them
      def set_rlrun_state(self, state: dict[str, Any]) -> None: ...

  rlrun keeps the rest itself: the env's generator (`self.np_random`) and its spaces', and the
  wrappers' attributes (the time limit's step count). Never pickle: a state that is not plain data
  (say, an object) is refused as such, and the env is replayed instead. This is the first rung;
  an env without the protocol goes down the others.
- *captured*: classic-control envs keep all of that in plain attributes (numbers, arrays, tuples),
  so the walk below records every plain attribute of each wrapper layer and of the base env, and
  every generator's bit-generator state. An attribute holding a plain object (a running-statistics
  record such as Gymnasium's `RunningMeanStd`) is recorded as its own plain attributes and restored
  into the rebuilt object in place; one holding a function (`ClipAction`'s transform) is
  configuration, rebuilt from the spec like the wrapper itself. MuJoCo envs are captured the same way, with the engine's
  own integration state (`mj_getState`) in place of the model and data objects. ALE (Atari) envs
  too: the emulator's serialized state with its random generator (`cloneState(include_rng=True)`),
  as bytes, in place of the emulator object; the preprocessing's max-pool buffers and lives, the
  frame stack's frames, the sticky actions' previous action and the env's generator (no-op starts,
  sticky draws) are plain attributes. ALE's state leaves out the previous action of its own sticky
  actions, so `env.atari` does them in Python (`rlrun.envs.atari.StickyActions`); a raw ALE env with
  sticky actions is replayed instead.
- *replayed*: any other env that is deterministic given its generators and actions (Box2D). An
  `EpisodeRecorder`, the outermost wrapper of each copy, keeps the episode's start (the generator
  state just before the reset, and the reset's seed and options) and the actions since; a restore
  resets the rebuilt copy the same way, steps the same actions through the same wrappers, and
  accepts the result only if the observation hashes the same as the one it replaces. The wrappers'
  own state at the episode's start (counters and statistics kept across episodes, `env.wrappers`)
  is recorded with it, as plain attributes, and put back before the replay.
- *restarted*: a replay that does not reproduce the observation (a non-deterministic env) raises
  NotCapturable; the session then resumes at an episode boundary instead, and says so.

The recorder's methods are reached by name (`rlrun_capture`, `rlrun_restore`), so an async vector
env runs them inside each worker process through `AsyncVectorEnv.call`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import types
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlrun.envs.workers import seed_spaces as seed_copy_spaces

# Configuration, rendering and structure: rebuilt from the spec, never captured.
_SKIP = {
    "env",
    "envs",
    "env_fns",
    "spec",
    "_cached_spec",
    "_saved_kwargs",
    "metadata",
    "_metadata",
    "render_mode",
    "screen",
    "clock",
    "isopen",
    "action_space",
    "_action_space",
    "observation_space",
    "_observation_space",
    "single_action_space",
    "single_observation_space",
    "autoreset_mode",
    "observation_mode",
    "copy",
    "num_envs",
    "_np_random",
}


class NotCapturable(Exception):
    """The env holds state that cannot be written as plain data."""


# Behaviour, not state: a wrapper's transform is rebuilt with the wrapper from the spec.
_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial)
_OBJECT_DEPTH = 3
"""How deep plain objects inside plain objects are followed (a reference cycle ends here)."""


# -- plain values <-> JSON ------------------------------------------------------------------------


def encode(value: Any, where: str, depth: int = 0) -> Any:
    """A JSON form that `decode` turns back into an identical value (dtype and shape included)."""
    if isinstance(value, np.generic):  # before float: np.float64 is a float subclass
        return {"scalar": encode(np.asarray(value), where), "dtype": value.dtype.str}
    if value is None or isinstance(value, bool | int | str | float):
        return value  # Python's json writes floats with repr, which reads back to the same double
    if isinstance(value, np.ndarray) and value.dtype.itemsize == 1 and value.dtype.kind in "biu":
        # pixels and emulator bytes: their raw bytes, a third of the JSON of a list of numbers
        raw = base64.b64encode(np.ascontiguousarray(value).tobytes()).decode("ascii")
        return {"bytes": raw, "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, np.ndarray) and value.dtype != object:
        return {"array": value.ravel().tolist(), "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, deque):
        return {"deque": [encode(v, f"{where}[{i}]") for i, v in enumerate(value)], "maxlen": value.maxlen}
    if isinstance(value, tuple | list):
        items = [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return {"tuple": items} if isinstance(value, tuple) else {"list": items}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: encode(v, f"{where}.{k}") for k, v in value.items()}}
    if _is_plain_object(value) and depth < _OBJECT_DEPTH:
        return {"object": type(value).__qualname__, "attributes": _plain_attributes(value, where, depth=depth + 1)}
    raise NotCapturable(f"{where} is a {type(value).__name__}")


def _is_plain_object(value: Any) -> bool:
    """An instance of an ordinary Python class (not an env, a space, a generator or a module):
    its attributes are its state."""
    return (
        hasattr(value, "__dict__")
        and not isinstance(value, (type, types.ModuleType, *_FUNCTIONS))
        and not isinstance(value, gym.Env | spaces.Space | np.random.Generator)
    )


def assign(owner: Any, key: str, data: Any) -> None:
    """Set `owner.key` to the decoded `data`; a recorded object's attributes go into the object
    `owner.key` already holds (rebuilt from the spec), which must be of the same class."""
    if isinstance(data, dict) and "object" in data:
        target = getattr(owner, key, None)
        if type(target).__qualname__ != data["object"]:
            raise NotCapturable(
                f"{type(owner).__name__}.{key} is a {type(target).__name__}, the snapshot's a {data['object']}"
            )
        for name, value in data["attributes"].items():
            assign(target, name, value)
        return
    setattr(owner, key, decode(data))


def decode(data: Any) -> Any:
    if data is None or isinstance(data, bool | int | str | float):
        return data
    if "bytes" in data:
        raw = base64.b64decode(data["bytes"])
        return np.frombuffer(raw, dtype=np.dtype(data["dtype"])).reshape(data["shape"]).copy()
    if "deque" in data:
        return deque((decode(v) for v in data["deque"]), maxlen=data["maxlen"])
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
    """The wrapper chain from the outside in, ending with the base env (the recorder left out:
    what it holds matters only to a replay, which rebuilds it)."""
    chain = [env]
    while hasattr(chain[-1], "env"):
        chain.append(chain[-1].env)
    return [layer for layer in chain if not isinstance(layer, EpisodeRecorder)]


def _plain_attributes(obj: Any, where: str, skip: frozenset[str] = frozenset(), depth: int = 0) -> dict[str, Any]:
    return {
        key: encode(value, f"{where}.{key}", depth)
        for key, value in vars(obj).items()
        if key not in _SKIP and key not in skip and not isinstance(value, _FUNCTIONS)
    }


PROTOCOL = ("get_rlrun_state", "set_rlrun_state")
"""The methods of the state protocol an env may implement (see the module's note)."""


def has_state_protocol(base: Any) -> bool:
    return all(callable(getattr(base, name, None)) for name in PROTOCOL)


def capture_env(env: Any, where: str = "env") -> dict[str, Any]:
    """The state of one env (all its wrapper layers); raises NotCapturable."""
    layers = _layers(env)
    base = layers[-1]
    if has_state_protocol(base):
        return _capture_by_protocol(layers, where)
    physics = _mujoco_state(base)
    emulator = _ale_state(base)
    skip = _MUJOCO_OBJECTS if physics is not None else _ALE_OBJECTS if emulator is not None else frozenset()
    state = {
        "layers": [_plain_attributes(layer, f"{where}.{type(layer).__name__}", skip) for layer in layers],
        "np_random": generator_state(getattr(base, "_np_random", None)),
        "action_space": _space_generators(base.action_space),
        "observation_space": _space_generators(base.observation_space),
    }
    if physics is not None:
        state["mujoco"] = physics
    if emulator is not None:
        state["ale"] = emulator
    return state


def _capture_by_protocol(layers: list[Any], where: str) -> dict[str, Any]:
    """The wrappers' plain attributes, the generators, and what the base env's `get_rlrun_state`
    gives (its attributes themselves are its own business)."""
    base = layers[-1]
    name = f"{where}.{type(base).__name__}.get_rlrun_state()"
    own = base.get_rlrun_state()
    if not isinstance(own, dict):
        raise NotCapturable(f"{name} gave a {type(own).__name__}, not a dict")
    return {
        "layers": [*(_plain_attributes(layer, f"{where}.{type(layer).__name__}") for layer in layers[:-1]), {}],
        "protocol": encode(own, name),
        "np_random": generator_state(getattr(base, "_np_random", None)),
        "action_space": _space_generators(base.action_space),
        "observation_space": _space_generators(base.observation_space),
    }


def restore_env(env: Any, state: dict[str, Any]) -> None:
    layers = _layers(env)
    if len(layers) != len(state["layers"]):
        raise NotCapturable("the env's wrappers differ from the snapshot's")
    if "protocol" in state:
        if not has_state_protocol(layers[-1]):
            raise NotCapturable("the snapshot holds the env's own state but the env has no set_rlrun_state")
        layers[-1].set_rlrun_state(decode(state["protocol"]))
    for layer, attributes in zip(layers, state["layers"], strict=True):
        for key, value in attributes.items():
            assign(layer, key, value)
    base = layers[-1]
    if "mujoco" in state:
        _set_mujoco_state(base, state["mujoco"])
    if "ale" in state:
        _set_ale_state(base, state["ale"])
    _restore_generators(base, state)


def _restore_generators(base: Any, state: dict[str, Any]) -> None:
    base._np_random = make_generator(state["np_random"])
    _restore_space_generators(base.action_space, state["action_space"])
    _restore_space_generators(base.observation_space, state["observation_space"])


# -- MuJoCo: the engine's own state ------------------------------------------------------------------

# The compiled model and the simulation data (rebuilt from the spec, the data then overwritten with
# the engine's state), the renderer, and the constructor's arguments kept for pickling.
_MUJOCO_OBJECTS = frozenset({"model", "data", "mujoco_renderer", "_ezpickle_args", "_ezpickle_kwargs"})


def _is_mujoco(base: Any) -> bool:
    return type(getattr(base, "data", None)).__module__.startswith("mujoco")


# What `mj_forward` (inside `mj_step`) and gymnasium's `mj_rnePostConstraint` compute from the
# state. `mj_step` recomputes all of it from the integration state before it integrates, so the
# physics never reads it; but it is left behind computed from the state *before* the last
# integration (one step behind qpos/qvel), and envs read it between steps: Ant-v5 takes its reward's
# velocity from the torso's `xpos` before and after the step, Humanoid-v5 from `xipos` (its centre
# of mass); restored with the integration state alone, their first reward after a resume differs.
# Only the previous state could recompute it, and that is gone (`mj_forward` on the restored state
# gives the quantities one step ahead, other bits); so it is kept as it is, as plain data: every
# quantity of the position, velocity and acceleration stages and of `mj_rnePostConstraint` whose
# size the model fixes (the solver's per-contact arrays, sized by the contacts found, are scratch
# that `mj_step` redoes). The solver's warm start, `qacc_warmstart`, is in the integration state.
_MUJOCO_DERIVED = (
    # positions: frames of bodies, inertias, joints, geoms, sites, cameras, lights; tendons, actuators
    "xpos",
    "xquat",
    "xmat",
    "xipos",
    "ximat",
    "xanchor",
    "xaxis",
    "geom_xpos",
    "geom_xmat",
    "site_xpos",
    "site_xmat",
    "cam_xpos",
    "cam_xmat",
    "light_xpos",
    "light_xdir",
    "subtree_com",
    "cdof",
    "cinert",
    "crb",
    "ten_length",
    "actuator_length",
    # velocities
    "cvel",
    "cdof_dot",
    "ten_velocity",
    "actuator_velocity",
    "qfrc_bias",
    "qfrc_passive",
    "qfrc_spring",
    "qfrc_damper",
    "qfrc_gravcomp",
    "qfrc_fluid",
    "subtree_linvel",
    "subtree_angmom",
    # accelerations and forces (Humanoid-v5 observes qfrc_actuator)
    "actuator_force",
    "qfrc_actuator",
    "qfrc_smooth",
    "qacc_smooth",
    "qfrc_constraint",
    "qacc",
    # mj_rnePostConstraint: Ant-v5 and Humanoid-v5 observe cfrc_ext and charge for it
    "cacc",
    "cfrc_int",
    "cfrc_ext",
    "sensordata",
    "energy",
)


def _mujoco_state(base: Any) -> dict[str, Any] | None:
    """Everything `mj_step` reads (time, positions, velocities, activations, controls, applied
    forces, the solver's warm start), as plain floats, with what the last step derived from the
    state before it (`_MUJOCO_DERIVED`); None for an env that is not MuJoCo's."""
    if not _is_mujoco(base):
        return None
    import mujoco

    what = mujoco.mjtState.mjSTATE_INTEGRATION
    state = np.empty(mujoco.mj_stateSize(base.model, what), dtype=np.float64)
    mujoco.mj_getState(base.model, base.data, state, what)
    derived = {
        name: encode(np.array(getattr(base.data, name)), f"mujoco.{name}")
        for name in _MUJOCO_DERIVED
        if hasattr(base.data, name)
    }  # a field an older MuJoCo lacks
    return {"integration": encode(state, "mujoco"), "derived": derived}


def _set_mujoco_state(base: Any, physics: dict[str, Any]) -> None:
    import mujoco

    if not _is_mujoco(base):
        raise NotCapturable("the snapshot holds MuJoCo state but the env is not MuJoCo's")
    for name, value in physics.get("derived", {}).items():  # a snapshot from before they were kept has none
        array, target = decode(value), getattr(base.data, name, None)
        if target is None or target.shape != array.shape:
            raise NotCapturable(f"the snapshot's MuJoCo data has a {name} this MuJoCo and model do not")
        target[...] = array
    mujoco.mj_setState(base.model, base.data, decode(physics["integration"]), mujoco.mjtState.mjSTATE_INTEGRATION)


# -- ALE (Atari): the emulator's own state ---------------------------------------------------------

# The emulator (rebuilt from the spec, then given the saved state), the action set it gives (ALE
# enums, from the ROM), and the constructor's arguments kept for pickling.
_ALE_OBJECTS = frozenset({"ale", "_action_set", "_ezpickle_args", "_ezpickle_kwargs"})


def _is_ale(base: Any) -> bool:
    return type(getattr(base, "ale", None)).__module__.startswith("ale_py")


def _ale_state(base: Any) -> dict[str, Any] | None:
    """The emulator's state (RAM, CPU and TIA registers, frame counters, the sticky-action random
    generator) as ALE serializes it, plain bytes; None for an env that is not ALE's."""
    if not _is_ale(base):
        return None
    if base.ale.getFloat("repeat_action_probability") > 0:
        raise NotCapturable(
            "ALE's saved state leaves out its sticky actions' previous action"
            " (env.atari does sticky actions that a snapshot holds)"
        )
    serialized = base.ale.cloneState(include_rng=True).serialize()
    return {"state": encode(np.frombuffer(serialized, dtype=np.uint8), "ale")}


def _set_ale_state(base: Any, emulator: dict[str, Any]) -> None:
    import ale_py

    if not _is_ale(base):
        raise NotCapturable("the snapshot holds an ALE state but the env is not ALE's")
    base.ale.restoreState(ale_py.ALEState(decode(emulator["state"]).tobytes()))


# -- episode replay -----------------------------------------------------------------------------------


def observation_hash(obs: Any) -> str:
    """A digest of an observation's values, dtype and shape (nested ones flattened in order)."""
    digest = hashlib.sha256()
    for part in _leaves(obs):
        array = np.ascontiguousarray(part)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def _leaves(obs: Any) -> list[Any]:
    if isinstance(obs, dict):
        return [leaf for key in sorted(obs) for leaf in _leaves(obs[key])]
    if isinstance(obs, tuple | list):
        return [leaf for item in obs for leaf in _leaves(item)]
    return [obs]


class EpisodeRecorder(gym.Wrapper[Any, Any, Any, Any]):
    """Keeps what a replay of the current episode needs: how it was reset and the actions since
    (at most one episode's worth). It changes nothing the env does."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.rlrun_start: dict[str, Any] | None = None
        self.rlrun_actions: list[Any] = []
        self.rlrun_last_obs: Any = None
        """The latest observation (hashed only when captured: hashing every step would cost)."""
        self.rlrun_pending: dict[str, Any] | None = None
        """A state to restore, set by `AsyncVectorEnv.set_attr` (one per worker) before `rlrun_apply`."""
        self.rlrun_space_seeds: tuple[int, int] | None = None
        """This copy's (action, observation) space seeds, set by `AsyncVectorEnv.set_attr` before
        `rlrun_seed_spaces`."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        # Only a seeded reset reseeds the env; every later one draws from the env's generator as it
        # stands now, so that state is part of the episode's start.
        self.rlrun_start = {
            "np_random": generator_state(getattr(self.env.unwrapped, "_np_random", None)),
            "seed": seed,
            "options": encode(options, "reset options"),
            "wrappers": wrappers_state(self.env),
        }
        self.rlrun_actions = []
        obs, info = self.env.reset(seed=seed, options=options)
        self.rlrun_last_obs = obs
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        self.rlrun_actions.append(np.array(action, copy=True))
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.rlrun_last_obs = obs
        return obs, reward, terminated, truncated, info

    # -- reached by name, also from an async vector env's worker --------------------------------

    def rlrun_capture(self) -> dict[str, Any]:
        """This copy's state: captured where it can be, else what a replay needs."""
        try:
            return {"method": "captured", **capture_env(self.env)}
        except NotCapturable as error:
            reason = str(error)
        if self.rlrun_start is None:
            raise NotCapturable(f"{reason}, and the env was never reset")
        base = self.env.unwrapped
        return {
            "method": "replayed",
            "why": reason,
            "start": self.rlrun_start,
            "actions": _encode_actions(self.rlrun_actions),
            "obs_hash": observation_hash(self.rlrun_last_obs),
            "action_space": _space_generators(base.action_space),
            "observation_space": _space_generators(base.observation_space),
        }

    def rlrun_restore(self, state: dict[str, Any]) -> str:
        """Put this copy back in `state`; says how, or (a replay that diverged) why it could not,
        as "failed: ..." — an exception would end an async worker."""
        try:
            if state.get("method", "captured") == "captured":  # older snapshots: no method, captured
                restore_env(self.env, state)
                return _captured(state)
            return self._replay(state)
        except NotCapturable as error:
            return f"failed: {error}"

    def rlrun_apply(self) -> str:
        state, self.rlrun_pending = self.rlrun_pending, None
        if state is None:
            return "failed: no state was sent to this worker"
        return self.rlrun_restore(state)

    def rlrun_seed_spaces(self) -> None:
        """Seed this copy's spaces with the seeds sent to its worker (`rlrun.envs.seed_spaces`)."""
        if self.rlrun_space_seeds is None:
            raise ValueError("no space seeds were sent to this worker")
        seed_copy_spaces([self], [self.rlrun_space_seeds])

    def _replay(self, state: dict[str, Any]) -> str:
        start = state["start"]
        base = self.env.unwrapped
        restore_wrappers_state(self.env, start.get("wrappers"))  # older snapshots: not recorded
        base._np_random = make_generator(start["np_random"])
        self.reset(seed=start["seed"], options=decode(start["options"]))
        actions = _decode_actions(state["actions"])
        for action in actions:
            self.step(action)
        if observation_hash(self.rlrun_last_obs) != state["obs_hash"]:
            raise NotCapturable(
                f"replaying {len(actions)} steps did not reproduce the observation "
                "(the env is not deterministic given its seed and actions)"
            )
        _restore_space_generators(base.action_space, state["action_space"])
        _restore_space_generators(base.observation_space, state["observation_space"])
        return f"replayed {len(actions)} steps"


def wrappers_state(env: Any) -> list[Any] | None:
    """The plain attributes of every wrapper layer (the base env left out: it is what could not
    be captured); None when some are not plain data (a replay then starts from fresh wrappers)."""
    layers = _layers(env)[:-1]
    try:
        return [_plain_attributes(layer, f"wrapper.{type(layer).__name__}") for layer in layers]
    except NotCapturable:
        return None


def restore_wrappers_state(env: Any, state: list[Any] | None) -> None:
    if state is None:
        return
    layers = _layers(env)[:-1]
    if len(layers) != len(state):
        raise NotCapturable("the env's wrappers differ from the snapshot's")
    for layer, attributes in zip(layers, state, strict=True):
        for key, value in attributes.items():
            assign(layer, key, value)


def _encode_actions(actions: list[Any]) -> Any:
    """Array actions (Discrete, Box, MultiDiscrete) as one stacked array: a tenth of the JSON of
    one record each; others (Dict, Tuple spaces) one by one."""
    if actions and all(isinstance(a, np.ndarray) and a.dtype != object for a in actions):
        try:
            return {"stacked": encode(np.stack(actions), "actions")}
        except ValueError:  # shapes differ
            pass
    return [encode(a, "action") for a in actions]


def _decode_actions(data: Any) -> list[Any]:
    if isinstance(data, dict):
        return list(decode(data["stacked"]))
    return [decode(a) for a in data]


def capture_vector_env(vector_env: Any) -> dict[str, Any]:
    """A vector env: its own buffers (a synchronous one's; an async one's are overwritten by every
    step) and spaces, and each copy's state, taken where the copy lives."""
    in_process = hasattr(vector_env, "envs")
    return {
        "own": _plain_attributes(vector_env, "vector_env") if in_process else {},
        "action_space": _space_generators(vector_env.action_space),
        "observation_space": _space_generators(vector_env.observation_space),
        "envs": (
            [_capture_copy(env) for env in vector_env.envs] if in_process else list(vector_env.call("rlrun_capture"))
        ),
    }


def _capture_copy(env: Any) -> dict[str, Any]:
    if isinstance(env, EpisodeRecorder):
        return env.rlrun_capture()
    return {"method": "captured", **capture_env(env)}


def restore_vector_env(vector_env: Any, state: dict[str, Any]) -> str:
    """Restore every copy (replays first, as they reset and step the copies), then the vector
    env's own state; returns how, e.g. "env: replayed 143+12 steps". Raises NotCapturable when a
    copy could not be put back exactly (the env must then be reset)."""
    if hasattr(vector_env, "envs"):
        copies = zip(vector_env.envs, state["envs"], strict=True)
        outcomes = [_restore_copy(env, env_state) for env, env_state in copies]
    else:
        vector_env.set_attr("rlrun_pending", list(state["envs"]))
        outcomes = list(vector_env.call("rlrun_apply"))
    failed = [f"copy {i}: {o.removeprefix('failed: ')}" for i, o in enumerate(outcomes) if o.startswith("failed")]
    if failed:
        raise NotCapturable("; ".join(failed))
    if hasattr(vector_env, "envs"):  # a fork may step a sync run's copies asynchronously, or back
        for key, value in state["own"].items():
            assign(vector_env, key, value)
    _restore_space_generators(vector_env.action_space, state["action_space"])
    _restore_space_generators(vector_env.observation_space, state["observation_space"])
    return describe_restore(outcomes)


def _restore_copy(env: Any, state: dict[str, Any]) -> str:
    if isinstance(env, EpisodeRecorder):
        return env.rlrun_restore(state)
    try:
        restore_env(env, state)
    except NotCapturable as error:
        return f"failed: {error}"
    return _captured(state)


def _captured(state: dict[str, Any]) -> str:
    return "captured by set_rlrun_state" if "protocol" in state else "captured"


def describe_restore(outcomes: list[str]) -> str:
    """One line for the registry's note: "env: captured", "env: replayed 143+0 steps"."""
    replayed = [o.split()[1] for o in outcomes if o.startswith("replayed")]
    if not replayed:
        by_protocol = any(o.endswith("set_rlrun_state") for o in outcomes)
        return "env: captured by its set_rlrun_state" if by_protocol else "env: captured"
    return f"env: replayed {'+'.join(replayed)} steps"
