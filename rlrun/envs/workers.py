"""`env.workers`: the copies split into blocks, each block stepped in order by one worker process.

`BlockVectorEnv` is a Gymnasium VectorEnv that gives what a `SyncVectorEnv` over the same copies
gives, bit for bit (the same observations, rewards, flags and infos, same-step autoreset), while W
processes step W contiguous blocks at once; the session acts on all copies in one batch as before.
Its protocol is `AsyncVectorEnv`'s (spawned processes, one pipe each, a command and its reply),
with a block of copies behind each pipe instead of one: a step costs one message each way per
worker, not per copy. `call` and `set_attr` reach every copy, in order, so a snapshot captures and
restores each copy inside its worker exactly as for an async env (`rlrun.envs.state`).

A worker ignores SIGINT and SIGTERM (a Ctrl-C reaches the whole process group, and a scheduler such
as SLURM may signal every process of a job): the session decides when to stop, and it needs its
workers alive to capture their copies into the preemption snapshot. A worker ends when the session
closes the env, when the session exits (daemonic processes are ended at exit), or when its pipe
closes under it (the session was killed with -9).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from rlrun.spec.cores import blocks

EnvMaker = Callable[[], gym.Env[Any, Any]]


class WorkerError(RuntimeError):
    """A worker's command raised; the worker's traceback is the message."""


class BlockVectorEnv(VectorEnv[Any, Any, Any]):
    def __init__(self, make_copy: EnvMaker, num_envs: int, workers: int) -> None:
        self.num_envs = num_envs
        self.blocks = blocks(num_envs, workers)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.autoreset_mode = AutoresetMode.SAME_STEP
        context = multiprocessing.get_context("spawn")  # no fork of a process that holds torch threads
        self._pipes: list[Connection] = []
        self._processes: list[Any] = []
        for index, block in enumerate(self.blocks):
            parent, child = context.Pipe()
            process = context.Process(
                target=_work, args=(child, make_copy, len(block)), name=f"rlrun-env-worker-{index}", daemon=True
            )
            process.start()
            child.close()
            self._pipes.append(parent)
            self._processes.append(process)
        spaces = self._gather()[0]
        self.single_observation_space, self.single_action_space = spaces
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.closed = False

    # -- the pipe protocol --------------------------------------------------------------------------

    def _send(self, command: str, payloads: Sequence[Any]) -> list[Any]:
        """Send one command to every worker (each its payload), then wait for every reply, in order."""
        for pipe, payload in zip(self._pipes, payloads, strict=True):
            pipe.send((command, payload))
        return self._gather()

    def _gather(self) -> list[Any]:
        replies = [self._reply(index) for index in range(len(self._pipes))]
        failed = [payload for ok, payload in replies if not ok]
        if failed:
            raise WorkerError(failed[0])
        return [payload for _, payload in replies]

    def _reply(self, index: int) -> tuple[bool, Any]:
        try:
            reply: tuple[bool, Any] = self._pipes[index].recv()
            return reply
        except EOFError:
            code = self._processes[index].exitcode
            return False, f"env worker {index} ended (exit code {code}) before it replied"

    def _per_copy(self, values: Sequence[Any]) -> list[list[Any]]:
        return [[values[i] for i in block] for block in self.blocks]

    # -- VectorEnv ----------------------------------------------------------------------------------

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        # the seeds SyncVectorEnv gives its copies: seed + i, a list as it is, or none
        seeds = (
            [None] * self.num_envs
            if seed is None
            else ([seed + i for i in range(self.num_envs)] if isinstance(seed, int) else list(seed))
        )
        if len(seeds) != self.num_envs:
            raise ValueError(f"{len(seeds)} seeds for {self.num_envs} copies")
        replies = self._send("reset", [(block_seeds, options) for block_seeds in self._per_copy(seeds)])
        observations: list[Any] = []
        infos: dict[str, Any] = {}
        for block, (block_obs, block_infos) in zip(self.blocks, replies, strict=True):
            observations += block_obs
            for i, info in zip(block, block_infos, strict=True):
                infos = self._add_info(infos, info, i)
        return self._batched(observations), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        replies = self._send("step", self._per_copy(list(iterate(self.action_space, actions))))
        observations: list[Any] = []
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        infos: dict[str, Any] = {}
        for block, results in zip(self.blocks, replies, strict=True):
            for i, (obs, reward, terminated, truncated, info_parts) in zip(block, results, strict=True):
                observations.append(obs)
                rewards[i], terminations[i], truncations[i] = reward, terminated, truncated
                for part in info_parts:  # as SyncVectorEnv adds them: the final step's, then the reset's
                    infos = self._add_info(infos, part, i)
        return self._batched(observations), rewards, terminations, truncations, infos

    def _batched(self, observations: list[Any]) -> Any:
        out = create_empty_array(self.single_observation_space, n=self.num_envs, fn=np.zeros)
        return concatenate(self.single_observation_space, observations, out)  # type: ignore[arg-type]

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """`getattr(copy, name)(*args, **kwargs)` for every copy (its value, when not callable)."""
        replies = self._send("call", [(name, args, kwargs)] * len(self.blocks))
        return tuple(result for block_results in replies for result in block_results)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set `name` on every copy: one value each (a list or tuple of num_envs), or the same one."""
        if not isinstance(values, list | tuple):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"{len(values)} values for {self.num_envs} copies")
        self._send("set_attr", [(name, block_values) for block_values in self._per_copy(values)])

    def seed_copy_spaces(self, seeds: list[tuple[int, int]]) -> None:
        """Seed each copy's action and observation space, (action, observation) seeds per copy."""
        self._send("seed_spaces", self._per_copy(seeds))

    def close_extras(self, **kwargs: Any) -> None:
        for pipe in self._pipes:
            with contextlib.suppress(OSError):  # a worker already gone (BrokenPipeError)
                pipe.send(("close", None))
        for pipe, process in zip(self._pipes, self._processes, strict=True):
            with contextlib.suppress(EOFError, OSError):
                pipe.recv()
            pipe.close()
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
                process.join()


# -- the worker process -----------------------------------------------------------------------------


def _work(pipe: Connection, make_copy: EnvMaker, count: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    envs: list[gym.Env[Any, Any]] = []
    try:
        envs = [make_copy() for _ in range(count)]
        pipe.send((True, (envs[0].observation_space, envs[0].action_space)))
    except Exception:
        pipe.send((False, traceback.format_exc()))
        pipe.close()
        return
    try:
        while True:
            command, payload = pipe.recv()
            if command == "close":
                pipe.send((True, None))
                break
            try:
                pipe.send((True, _COMMANDS[command](envs, payload)))
            except Exception:
                pipe.send((False, traceback.format_exc()))
    except (EOFError, KeyboardInterrupt, BrokenPipeError):
        pass  # the session is gone
    finally:
        for env in envs:
            env.close()
        pipe.close()


def _reset(envs: list[gym.Env[Any, Any]], payload: tuple[list[int | None], dict[str, Any] | None]) -> Any:
    seeds, options = payload
    results = [env.reset(seed=seed, options=options) for env, seed in zip(envs, seeds, strict=True)]
    return [obs for obs, _ in results], [info for _, info in results]


def _step(envs: list[gym.Env[Any, Any]], actions: list[Any]) -> list[Any]:
    """Each copy's step, reset where its episode ended (same-step autoreset, as SyncVectorEnv)."""
    results = []
    for env, action in zip(envs, actions, strict=True):
        obs, reward, terminated, truncated, info = env.step(action)
        parts = [info]
        if terminated or truncated:
            final = {"final_obs": obs, "final_info": info}
            obs, reset_info = env.reset()
            parts = [final, reset_info]
        results.append((obs, reward, terminated, truncated, parts))
    return results


def _call(envs: list[gym.Env[Any, Any]], payload: tuple[str, tuple[Any, ...], dict[str, Any]]) -> list[Any]:
    name, args, kwargs = payload
    results = []
    for env in envs:
        value = env.get_wrapper_attr(name)
        results.append(value(*args, **kwargs) if callable(value) else value)
    return results


def _set_attr(envs: list[gym.Env[Any, Any]], payload: tuple[str, list[Any]]) -> None:
    name, values = payload
    for env, value in zip(envs, values, strict=True):
        env.set_wrapper_attr(name, value)


def seed_spaces(envs: Sequence[gym.Env[Any, Any]], seeds: list[tuple[int, int]]) -> None:
    """Seed each copy's action and observation space, (action, observation) seeds per copy: in a
    worker, or in the session's process for the copies it steps itself."""
    for env, (action_seed, observation_seed) in zip(envs, seeds, strict=True):
        env.action_space.seed(action_seed)
        env.observation_space.seed(observation_seed)


_COMMANDS: dict[str, Callable[[list[gym.Env[Any, Any]], Any], Any]] = {
    "reset": _reset,
    "step": _step,
    "call": _call,
    "set_attr": _set_attr,
    "seed_spaces": seed_spaces,
}
