"""`env.workers`: the copies split into blocks, each block stepped in order by one worker process.

`BlockVectorEnv` is a Gymnasium VectorEnv that gives what a `SyncVectorEnv` over the same copies
gives, bit for bit (the same observations, rewards, flags and infos, same-step autoreset), while W
processes step W contiguous blocks at once; the session acts on all copies in one batch as before.

A step costs one byte each way per worker and no pickling: the actions, observations, rewards and
flags are exchanged in shared memory laid out as the batch, each worker reading and writing its
block's rows in place, and infos of plain numbers travel packed beside them
(`rlrun.envs.batch_memory`). What is not plain (an ended episode's `final_obs` and `final_info`,
the reset's info, an info holding arrays or dicts) is pickled on the steps that have it. Every other
command (reset, `call`, `set_attr`) is `AsyncVectorEnv`'s protocol over the same pipe, a pickled
command and its pickled reply, with a block of copies behind each pipe instead of one; `call` and
`set_attr` reach every copy, in order, so a snapshot captures and restores each copy inside its
worker exactly as for an async env (`rlrun.envs.state`). `transport="pipes"` steps through the
pipes too (one pickled message each way per worker and step), as every step did before; copies
whose observations are not arrays (a Text or Graph space) always do.

The wait for the workers blocks on their pipes (a spin before blocking bought nothing on 2 busy
cores: the spinning session takes a worker's core). A worker that ends (killed, crashed: while it
steps, or between two commands, when the session's write to it fails) or does not answer within
`timeout` seconds fails the command with a `WorkerError` naming the worker, its
copies and the copy it was at (each worker marks in shared memory the copy it is stepping,
capturing or restoring); one that hung is ended, and the env is then broken: every later command
says so, and `close` ends the rest.

A worker ignores SIGINT and SIGTERM (a Ctrl-C reaches the whole process group, and a scheduler such
as SLURM may signal every process of a job): the session decides when to stop, and it needs its
workers alive to capture their copies into the preemption snapshot. A worker ends when the session
closes the env, or when its pipe closes under it: the session was killed with -9, or exits with the
env still open (an exit hook closes the session's ends first, since multiprocessing's own would
wait for workers that ignore its SIGTERM).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import select
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from rlrun.envs import batch_memory
from rlrun.envs.batch_memory import PACKED, PICKLED, Batch, Packer, Schema, Unpacker
from rlrun.spec.cores import blocks

EnvMaker = Callable[[], gym.Env[Any, Any]]
Transport = Literal["shared", "pipes"]

TIMEOUT = 600.0
"""Seconds a worker may take to answer a command (a step, a capture, a replay) before it is taken
for hung."""

# The first byte of each message. Session to worker:
STEP = b"s"  # step: the actions are in shared memory
STEP_WITH = b"a"  # step: the block's actions follow, pickled
COMMAND = b"c"  # a pickled (command, payload) follows
# Worker to session:
STEPPED = b"k"  # stepped; everything is in shared memory
STEPPED_WITH = b"x"  # stepped; pickled extras follow: ({copy: info parts}, {copy: new info schema})
FAILED = b"e"  # the step raised; the traceback follows, pickled
REPLY = b"r"  # a pickled (ok, payload) follows


class WorkerError(RuntimeError):
    """A worker's command raised (the worker's traceback is the message), or a worker ended or hung."""


class BlockVectorEnv(VectorEnv[Any, Any, Any]):
    def __init__(
        self,
        make_copy: EnvMaker,
        num_envs: int,
        workers: int,
        *,
        transport: Transport = "shared",
        timeout: float | None = TIMEOUT,
    ) -> None:
        self.num_envs = num_envs
        self.blocks = blocks(num_envs, workers)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.autoreset_mode = AutoresetMode.SAME_STEP
        self.timeout = timeout
        self.closed = False
        self._broken: str | None = None
        self._batch: Batch | None = None
        context = multiprocessing.get_context("spawn")  # no fork of a process that holds torch threads
        self._pipes: list[Connection] = []
        self._processes: list[Any] = []
        self._close_at_exit = _PipeCloser(self._pipes)
        for index, block in enumerate(self.blocks):
            parent, child = context.Pipe()
            process = context.Process(
                target=_work, args=(child, make_copy, block, index), name=f"rlrun-env-worker-{index}", daemon=True
            )
            process.start()
            child.close()
            self._pipes.append(parent)
            self._processes.append(process)
        # At exit, multiprocessing joins its daemonic processes after a SIGTERM, which workers
        # ignore: an env left open (an exception past its owner) would hang the exit. Closing the
        # session's ends of the pipes first ends them as a session killed with -9 does; atexit runs
        # this before multiprocessing's own hook, registered when the first process started.
        atexit.register(self._close_at_exit)
        self._fds = [pipe.fileno() for pipe in self._pipes]
        self._worker_of = {fd: index for index, fd in enumerate(self._fds)}
        self._poller = select.poll()
        for fd in self._fds:
            self._poller.register(fd, select.POLLIN)
        spaces = self._gather(REPLY)[0]
        self.single_observation_space, self.single_action_space = spaces
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        if transport == "shared":
            self._share()

    def _share(self) -> None:
        """Lay the batch out in shared memory and have every worker map it."""
        spaces = self.single_observation_space, self.single_action_space
        layout = batch_memory.layout(*spaces, self.num_envs, len(self.blocks))
        if layout is None:
            return
        batch = Batch(layout)
        try:
            self._send("attach", [(batch.name, layout)] * len(self.blocks))
        finally:
            batch.unlink()  # mapped by every worker (or failed): the name is no longer needed
        batch.progress[:] = -1
        self._batch = batch
        self._unpacker = Unpacker(batch.slots)

    @property
    def transport(self) -> Transport:
        return "pipes" if self._batch is None else "shared"

    # -- the protocol -------------------------------------------------------------------------------

    def _send(self, command: str, payloads: Sequence[Any]) -> list[Any]:
        """Send one command to every worker (each its payload), then wait for every reply, in order."""
        self._check_usable()
        for index, payload in enumerate(payloads):
            self._post(index, COMMAND, (command, payload), doing=command)
        return self._gather(REPLY, command)

    def _post(self, index: int, code: bytes, message: Any = None, *, doing: str) -> None:
        """Write `code` (and pickled `message`, unless None) to worker `index`. A worker already
        gone (killed between two commands: its end of the pipe is closed) fails the command as one
        that ends while answering it does, naming its copies, and breaks the env."""
        pipe = self._pipes[index]
        try:
            os.write(pipe.fileno(), code)
            if message is not None:
                pipe.send(message)
        except OSError:  # BrokenPipeError, ConnectionResetError
            raise WorkerError(self._lost(index, doing, f"ended (exit code {self._exit_code(index)})")) from None

    def _gather(self, expected: bytes, doing: str = "starting") -> list[Any]:
        """Every worker's reply, in order: its payload (`expected` REPLY), or a step's extras (None:
        none; `expected` STEPPED). Waits for all (a failed one's neighbours stay in step), then
        raises for the first failure."""
        replies: list[Any] = [None] * len(self._pipes)
        failures: list[str] = []
        for index, (code, message) in self._wait(doing):
            if code == b"":
                failures.append(self._lost(index, doing, f"ended (exit code {self._exit_code(index)})"))
            elif code == REPLY and expected == REPLY:
                ok, payload = message
                if ok:
                    replies[index] = payload
                else:
                    failures.append(payload)
            elif code == STEPPED and expected == STEPPED:
                pass
            elif code == STEPPED_WITH and expected == STEPPED:
                replies[index] = message
            elif code == FAILED and expected == STEPPED:
                failures.append(message)
            else:
                failures.append(self._lost(index, doing, f"answered {code!r}"))
        if failures:
            raise WorkerError(failures[0])
        return replies

    def _wait(self, doing: str) -> list[tuple[int, tuple[bytes, Any]]]:
        """(worker, (first byte of its reply, the pickled message that follows it or None)) for
        every worker, in order; b"" for one that ended. A worker that does not answer in time is
        ended, and the env broken."""
        codes: dict[int, bytes] = {}
        messages: dict[int, Any] = {}
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while len(codes) < len(self._fds):
            left = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000) + 1)
            events = self._poller.poll(left)
            if not events:
                self._hung(codes, doing)
            for fd, _ in events:
                index = self._worker_of[fd]
                if index in codes:  # answered this command already, then its pipe closed: it ended
                    self._poller.unregister(fd)
                    self._lost(index, "", "ended")
                    continue
                try:
                    codes[index] = os.read(fd, 1)
                except OSError:
                    codes[index] = b""
                if codes[index] == b"":
                    self._poller.unregister(fd)
                elif codes[index] in (REPLY, STEPPED_WITH, FAILED):
                    try:
                        messages[index] = self._pipes[index].recv()
                    except (EOFError, OSError):
                        codes[index] = b""
                        self._poller.unregister(fd)
        return [(index, (codes[index], messages.get(index))) for index in sorted(codes)]

    def _hung(self, codes: dict[int, bytes], doing: str) -> None:
        silent = [index for index in range(len(self._fds)) if index not in codes]
        messages = [self._lost(index, doing, f"did not answer within {self.timeout:g} s") for index in silent]
        for index in silent:
            self._processes[index].kill()  # it ignores SIGTERM
            self._processes[index].join(timeout=10)
        raise WorkerError(messages[0] + "; ended it")

    def _lost(self, index: int, doing: str, what: str) -> str:
        """Where worker `index` was when it ended or hung, for the error: its copies, the one it was at."""
        block = self.blocks[index]
        copies = f"copy {block.start}" if len(block) == 1 else f"copies {block.start}-{block.stop - 1}"
        at = -1 if self._batch is None else int(self._batch.progress[index])
        where = f" at copy {at}" if at >= 0 else ""
        message = f"env worker {index} ({copies}) {what}{where}"
        if doing:
            message += f" ({doing})"
        self._broken = self._broken or message
        return message

    def _exit_code(self, index: int) -> int | None:
        process = self._processes[index]
        process.join(timeout=5)
        code: int | None = process.exitcode
        return code

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise WorkerError(f"the env's workers failed earlier: {self._broken}")

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
        batch = self._batch
        if batch is None:
            return self._step_through_pipes(actions)
        self._check_usable()
        shared = batch.actions
        if (
            shared is not None
            and type(actions) is np.ndarray
            and actions.shape == shared.shape
            and actions.dtype == shared.dtype
        ):
            shared[...] = actions
            for index in range(len(self._pipes)):
                self._post(index, STEP, doing="stepping")
        else:  # not one array of the space's dtype: each copy is handed its own, as SyncVectorEnv does
            per_copy = self._per_copy(list(iterate(self.action_space, actions)))
            for index, block_actions in enumerate(per_copy):
                self._post(index, STEP_WITH, block_actions, doing="stepping")
        return self._stepped(batch, self._gather(STEPPED, "stepping"))

    def _stepped(self, batch: Batch, extras: list[Any]) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        parts: dict[int, list[dict[str, Any]]] = {}
        for worker_extras in extras:
            if worker_extras is not None:
                parts.update(worker_extras[0])
                self._unpacker.learn(worker_extras[1])
        infos: dict[str, Any] = {}
        for i in np.flatnonzero(batch.info_modes).tolist():  # in copy order, as SyncVectorEnv adds them
            if batch.info_modes[i] == PACKED:
                infos = self._add_info(infos, self._unpacker.unpack(i), i)
            else:
                for part in parts[i]:  # the final step's, then the reset's
                    infos = self._add_info(infos, part, i)
        return (
            batch.read_observations(),
            batch.rewards.copy(),
            batch.terminated.copy(),
            batch.truncated.copy(),
            infos,
        )

    def _step_through_pipes(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
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
        """Ask every worker to close its copies and end; end any that does not within 30 s."""
        for pipe, process in zip(self._pipes, self._processes, strict=True):
            if process.is_alive():
                with contextlib.suppress(OSError):  # a worker already gone (BrokenPipeError)
                    os.write(pipe.fileno(), COMMAND)
                    pipe.send(("close", None))
        deadline = time.monotonic() + 30
        for pipe, process in zip(self._pipes, self._processes, strict=True):
            with contextlib.suppress(EOFError, OSError):
                # the reply to "close", after any of a command interrupted before its reply was read
                while pipe.poll(max(0.0, deadline - time.monotonic())):
                    code = os.read(pipe.fileno(), 1)
                    if code in (REPLY, STEPPED_WITH, FAILED):
                        pipe.recv()
                    if code in (REPLY, b""):
                        break
            pipe.close()
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        atexit.unregister(self._close_at_exit)
        if self._batch is not None:
            self._batch.close()
            self._batch = None


class _PipeCloser:
    """Closes the session's ends of an env's pipes (at exit, for an env left open)."""

    def __init__(self, pipes: list[Connection]) -> None:
        self.pipes = pipes

    def __call__(self) -> None:
        for pipe in self.pipes:
            pipe.close()


# -- the worker process -----------------------------------------------------------------------------


def _work(pipe: Connection, make_copy: EnvMaker, block: range, index: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fd = pipe.fileno()
    envs: list[gym.Env[Any, Any]] = []
    try:
        envs = [make_copy() for _ in block]
        os.write(fd, REPLY)
        pipe.send((True, (envs[0].observation_space, envs[0].action_space)))
    except Exception:
        with contextlib.suppress(OSError):
            os.write(fd, REPLY)
            pipe.send((False, traceback.format_exc()))
        pipe.close()
        return
    worker = _Worker(envs, block, index)
    try:
        while True:
            code = os.read(fd, 1)
            if code in (STEP, STEP_WITH):
                actions = pipe.recv() if code == STEP_WITH else None
                try:
                    extras = worker.step(actions)
                except Exception:
                    os.write(fd, FAILED)
                    pipe.send(worker.failure())
                    continue
                if extras is None:
                    os.write(fd, STEPPED)
                else:
                    os.write(fd, STEPPED_WITH)
                    pipe.send(extras)
            elif code == COMMAND:
                command, payload = pipe.recv()
                if command == "close":
                    os.write(fd, REPLY)
                    pipe.send((True, None))
                    break
                try:
                    reply = (True, worker.command(command, payload))
                except Exception:
                    reply = (False, worker.failure())
                os.write(fd, REPLY)
                pipe.send(reply)
            else:  # b"": the session is gone
                break
    except (EOFError, KeyboardInterrupt, OSError):
        pass  # the session is gone
    finally:
        for env in envs:
            env.close()
        worker.detach()
        pipe.close()


class _Worker:
    """A block of copies, and the shared batch once the session has laid it out."""

    def __init__(self, envs: list[gym.Env[Any, Any]], block: range, index: int) -> None:
        self.envs = envs
        self.block = block
        self.index = index
        self.batch: Batch | None = None
        self.at = -1

    def _at(self, copy: int) -> None:
        self.at = copy
        if self.batch is not None:
            self.batch.progress[self.index] = copy

    def failure(self) -> str:
        where = f"copy {self.at}: " if self.at >= 0 else ""
        self._at(-1)
        return where + traceback.format_exc()

    def command(self, command: str, payload: Any) -> Any:
        if command == "attach":
            name, layout = payload
            self.batch = Batch(layout, name)
            self.packer = Packer(self.batch.slots)
            return None
        result = _COMMANDS[command](self, payload)
        self._at(-1)
        return result

    def copies(self) -> Any:
        """(index, copy) of the block in order, marking each as the one being worked on."""
        for index, env in zip(self.block, self.envs, strict=True):
            self._at(index)
            yield index, env

    def step(self, actions: list[Any] | None) -> Any:
        """Each copy's step, reset where its episode ended (same-step autoreset, as SyncVectorEnv),
        written into the shared batch; the extras to pickle, or None."""
        batch = self.batch
        assert batch is not None
        shared = batch.actions if actions is None else None
        parts: dict[int, list[dict[str, Any]]] = {}
        schemas: dict[int, Schema] = {}
        modes = batch.info_modes
        for position, (i, env) in enumerate(self.copies()):
            if actions is not None:
                action = actions[position]
            else:
                assert shared is not None
                action = shared[i]
                if isinstance(action, np.ndarray):  # a row: the copy's own, as a pickled one would be
                    action = action.copy()
            obs, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                final = {"final_obs": obs, "final_info": info}
                obs, reset_info = env.reset()
                parts[i] = [final, reset_info]
                modes[i] = PICKLED
            elif not info:
                modes[i] = 0
            elif self.packer.pack(i, info, schemas):
                modes[i] = PACKED
            else:
                parts[i] = [info]
                modes[i] = PICKLED
            batch.write_observation(i, obs)
            batch.rewards[i] = reward
            batch.terminated[i] = terminated
            batch.truncated[i] = truncated
        self._at(-1)
        return (parts, schemas) if parts or schemas else None

    def detach(self) -> None:
        if self.batch is not None:
            self.batch.close()
            self.batch = None


def _reset(worker: _Worker, payload: tuple[list[int | None], dict[str, Any] | None]) -> Any:
    seeds, options = payload
    results = [env.reset(seed=seed, options=options) for (_, env), seed in zip(worker.copies(), seeds, strict=True)]
    return [obs for obs, _ in results], [info for _, info in results]


def _step(worker: _Worker, actions: list[Any]) -> list[Any]:
    """Each copy's step, reset where its episode ended (same-step autoreset, as SyncVectorEnv),
    returned whole (`transport="pipes"`)."""
    results = []
    for (_, env), action in zip(worker.copies(), actions, strict=True):
        obs, reward, terminated, truncated, info = env.step(action)
        parts = [info]
        if terminated or truncated:
            final = {"final_obs": obs, "final_info": info}
            obs, reset_info = env.reset()
            parts = [final, reset_info]
        results.append((obs, reward, terminated, truncated, parts))
    return results


def _call(worker: _Worker, payload: tuple[str, tuple[Any, ...], dict[str, Any]]) -> list[Any]:
    name, args, kwargs = payload
    results = []
    for _, env in worker.copies():
        value = env.get_wrapper_attr(name)
        results.append(value(*args, **kwargs) if callable(value) else value)
    return results


def _set_attr(worker: _Worker, payload: tuple[str, list[Any]]) -> None:
    name, values = payload
    for (_, env), value in zip(worker.copies(), values, strict=True):
        env.set_wrapper_attr(name, value)


def _seed_spaces(worker: _Worker, seeds: list[tuple[int, int]]) -> None:
    seed_spaces(worker.envs, seeds)


def seed_spaces(envs: Sequence[gym.Env[Any, Any]], seeds: list[tuple[int, int]]) -> None:
    """Seed each copy's action and observation space, (action, observation) seeds per copy: in a
    worker, or in the session's process for the copies it steps itself."""
    for env, (action_seed, observation_seed) in zip(envs, seeds, strict=True):
        env.action_space.seed(action_seed)
        env.observation_space.seed(observation_seed)


_COMMANDS: dict[str, Callable[[_Worker, Any], Any]] = {
    "reset": _reset,
    "step": _step,
    "call": _call,
    "set_attr": _set_attr,
    "seed_spaces": _seed_spaces,
}
