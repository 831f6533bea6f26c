"""Gymnasium environments as a session uses them."""

from __future__ import annotations

import inspect
import json
import re
import warnings
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import load_env_creator
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

from rlrun import seeding
from rlrun.envs import atari, workers
from rlrun.envs.ports import use_exact_ports
from rlrun.envs.spaces import observations_as_arrays
from rlrun.envs.state import EpisodeRecorder
from rlrun.envs.workers import BlockVectorEnv
from rlrun.envs.wrappers import apply_wrappers
from rlrun.errors import BadInput
from rlrun.spec import EnvSpec
from rlrun.spec.cores import worker_count
from rlrun.spec.env_ids import extra_for, import_env_code, missing_package, not_an_env


def make_env(spec: EnvSpec, render_mode: str | None = None, *, training: bool = False) -> gym.Env[Any, Any]:
    """One copy of the env. `training` only changes what Atari preprocessing makes of the game (clipped
    rewards, a lost life ends the episode); anything else, such as evaluation, sees the real game."""
    import_env_code(spec.id, spec.packages)
    kwargs = dict(spec.kwargs)
    if spec.max_episode_steps is not None:
        kwargs["max_episode_steps"] = spec.max_episode_steps
    stickiness = 0.0
    if spec.atari is not None:
        kwargs, stickiness = atari.ale_kwargs(spec, kwargs)
    if extra_for(spec.id) == "mujoco":
        _mujoco_warnings_to_python()
    try:
        env = gym.make(spec.id, render_mode=render_mode, **kwargs)
        if spec.atari is not None:
            env = atari.preprocess(env, spec.atari, stickiness, training=training)
    except gym.error.DependencyNotInstalled as error:
        raise missing_package(spec.id, error) from None
    except (TypeError, ValueError, AssertionError) as error:
        if _NOT_AN_ENV in str(error):
            raise BadInput(not_an_env(spec.id, _made_class(str(error)))) from None
        if not spec.kwargs:
            raise  # not the user's input: a bug to see in full
        raise BadInput(_rejected_kwargs(spec, error)) from None
    # The user's wrappers see the env as configured (Atari preprocessing included) and its observations
    # in their structure; a Dict or Tuple is flattened after them, and the frame stack stacks flat
    # frames, as RL Zoo's `env_wrapper` comes before its VecFrameStack.
    env = apply_wrappers(env, spec.wrappers)
    env = observations_as_arrays(env, spec.id)
    if spec.frame_stack > 1:
        env = gym.wrappers.FrameStackObservation(env, spec.frame_stack, padding_type="reset")
    use_exact_ports(env)  # last: it checks the base env as the user's wrappers left it
    return env


_NOT_AN_ENV = "must inherit from the gymnasium.Env class"
"""Gymnasium's TypeError for an entry point that gives something else."""


def _made_class(message: str) -> str:
    """The class a refused entry point gave, as Gymnasium's message names it."""
    found = re.search(r"actual class: <class '([^']+)'>", message)
    return found[1] if found else "something"


_UNEXPECTED = re.compile(r"unexpected keyword argument '(?P<key>[^']+)'")


def _rejected_kwargs(spec: EnvSpec, error: Exception) -> str:
    """Why the env's constructor refused `env.kwargs`, naming the key and the ones it takes."""
    unexpected = _UNEXPECTED.search(str(error))
    if unexpected is None:
        detail = str(error).split(" was raised from the environment creator")[0] or type(error).__name__
        return f"env.kwargs = {json.dumps(spec.kwargs)}: {spec.id} refused them ({detail}); fix or remove them"
    taken = _keywords(spec.id)
    if taken is None:
        options = "see its documentation for the ones it takes"
    else:
        options = f"it takes {', '.join(taken)}" if taken else "it takes none"
    return f"env.kwargs.{unexpected['key']}: {spec.id} has no such keyword argument; {options}"


def _keywords(env_id: str) -> list[str] | None:
    """The keyword arguments an env's constructor takes (but render_mode, which rlrun sets), as
    far as its signature says; None when it says nothing."""
    try:
        entry = gym.spec(env_id).entry_point
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
        parameters = inspect.signature(creator).parameters.values() if creator is not None else None
    except (TypeError, ValueError, ImportError, gym.error.Error):
        return None
    if parameters is None:
        return None
    keywords = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.kind in keywords and p.name != "render_mode"]


def _mujoco_warnings_to_python() -> None:
    """MuJoCo's default warning handler appends to MUJOCO_LOG.TXT in the working directory (for
    every env built: MuJoCo 4 finds a deprecated attribute in Gymnasium's model files); Python's
    warnings say it once per process instead, and leave the user's directory alone."""
    try:
        import mujoco
    except ImportError:
        return  # gym.make then says which extra is missing
    mujoco.set_mju_user_warning(lambda text: warnings.warn(f"MuJoCo: {text}", RuntimeWarning, stacklevel=1))


def make_recorded_env(spec: EnvSpec) -> gym.Env[Any, Any]:
    """A training copy: the env, recording its episode so a snapshot can replay it."""
    return EpisodeRecorder(make_env(spec, training=True))


def make_vector_env(spec: EnvSpec, *, sessions: int = 1, threads: int = 1) -> VectorEnv:
    """`num_envs` copies stepped together: in this process, in `env.workers` processes (a block of
    copies each; "auto" resolved here, for `sessions` sessions sharing the machine and a learner of
    `threads` torch threads: `rlrun.spec.cores.split_cores`) or one process each ("async").
    Same-step autoreset: an env whose episode ends returns the next episode's first observation at
    once and its final one in `info["final_obs"]`, so every observation the agent sees is one it
    can act on."""
    make_copy = partial(make_recorded_env, spec)
    if spec.vectorization == "async":
        return AsyncVectorEnv([make_copy] * spec.num_envs, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn")
    workers = worker_count(spec, sessions, threads)
    if workers > 1:
        return BlockVectorEnv(make_copy, spec.num_envs, workers)
    return SyncVectorEnv([make_copy] * spec.num_envs, autoreset_mode=AutoresetMode.SAME_STEP)


def seed_spaces(vector_env: VectorEnv, seed: int) -> None:
    """Seed every space's generator (the vector env's and each copy's) from the session seed.
    Gymnasium otherwise seeds a space from OS entropy the first time anything samples it. The
    copies in block workers and in async workers get the seeds they would get in this process, so
    "sync", "async" and `env.workers` train the same bits (and a resume may switch among them)."""
    seeds = [seeding.derive(seed, seeding.ACTION_SPACE, i) for i in range(2 + 2 * vector_env.num_envs)]
    vector_env.action_space.seed(seeds[0])
    vector_env.observation_space.seed(seeds[1])
    copies = list(zip(seeds[2::2], seeds[3::2], strict=True))
    if isinstance(vector_env, BlockVectorEnv):
        vector_env.seed_copy_spaces(copies)
    elif isinstance(vector_env, SyncVectorEnv):
        workers.seed_spaces(vector_env.envs, copies)
    elif isinstance(vector_env, AsyncVectorEnv):  # each copy seeds its own, in its worker
        vector_env.set_attr("rlrun_space_seeds", copies)
        vector_env.call("rlrun_seed_spaces")


def true_next_obs(next_obs: np.ndarray, done: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    """The observation each transition really led to: the final one where an episode ended."""
    if not done.any():
        return next_obs
    result = next_obs.copy()
    for i in np.flatnonzero(done):
        result[i] = info["final_obs"][i]
    return result
