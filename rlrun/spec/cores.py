"""How many cores a session uses: the rule that turns `meta.torch_threads: "auto"` and
`env.workers: "auto"` into numbers (`split_cores`), and the OpenMP wait policy of a training
command (`let_idle_threads_sleep`). Pure functions of the machine's usable cores (the CPU affinity, which containers and
`taskset` narrow), the sessions sharing them and the spec's settings. Torch-free."""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Literal, NamedTuple

from rlrun import testhooks
from rlrun.spec.sections import AUTO, EnvSpec, Spec

Auto = Literal["auto"]


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the OS has one, else every core."""
    pretended = testhooks.usable_cores()
    if pretended is not None:
        return pretended
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows: no affinity call
        return os.cpu_count() or 1


def cores_per_session(cores: int, sessions: int) -> int:
    """A session's share of the machine: the usable cores over the sessions run at once, at least 1."""
    return max(1, cores // max(1, sessions))


class Split(NamedTuple):
    threads: int
    """The learner's torch threads (the session's own thread among them)."""
    workers: int
    """The processes that step the copies; 1: the session's own process steps them."""


def split_cores(share: int, num_envs: int, threads: int | str, workers: int | str) -> Split:
    """A session's share of the cores, split between the learner's torch threads and the env
    workers, each "auto" or a number (`workers` = `num_envs` for "async": a process per copy).

    In a session the two take turns, never at once: the learner acts (a forward pass on every
    copy's observation), then the workers step the copies while the session's thread waits on
    their pipes, then it acts again; every rollout (or every few steps) the learner updates while
    the workers wait on theirs. So the cores could in principle serve both in turn, but torch's
    OpenMP threads do not give theirs back at once: after each parallel region they spin (libgomp:
    300,000 turns by default) through the workers' step, and threads plus workers beyond the share
    is oversubscription (on 16 cores, 16 threads and 15 workers trained below 8 threads alone).
    Hence a split, the threads and the worker processes at most the share together:

    - both "auto": the workers take half the share, rounded down and at most one per copy, the
      threads the rest. Which phase costs more depends on the env and the network (Breakout's
      learner, a MuJoCo env's physics), and half each bounds the loss either way: each phase runs
      on at least half the cores it could have had.
    - one fixed: "auto" takes what the fixed number leaves (threads at least 1).
    - fewer than 2 workers: the session's own process steps the copies, and the threads take the
      whole share (one worker process gains nothing over the session's, which would wait for it).

    Threads are resolved once, when the run is created, and recorded (they can change how torch
    splits a sum); workers are resolved when each session starts, from the recorded threads
    ("auto" against a number): on the same machine, the workers the "auto"-for-both split chose.
    """
    if threads == AUTO and workers == AUTO:
        half = _processes(min(num_envs, share // 2))
        return Split(share - half if half > 1 else share, half)
    if threads == AUTO:
        assert isinstance(workers, int)
        return Split(max(1, share - workers) if workers > 1 else share, workers)
    assert isinstance(threads, int)
    return Split(threads, _processes(min(num_envs, share - threads)) if workers == AUTO else int(workers))


def _processes(workers: int) -> int:
    """Fewer than 2 worker processes: none, the copies stepped in the session's own process (1)."""
    return workers if workers > 1 else 1


CHEAP_FAMILIES = ("gymnasium.envs.classic_control.", "gymnasium.envs.toy_text.")
"""Where Gymnasium keeps the envs whose step costs a few microseconds (CartPole's: 7 µs a copy): a
worker process's wake-up each step (40-60 µs of CPU, docs/benchmarks/speed.md) costs more than
stepping them, and gains no wall time."""


def steps_cheaply(env: EnvSpec) -> bool:
    """Whether `env`'s copies are cheaper stepped in the session's process whatever the cores:
    Gymnasium's classic-control and toy-text envs (wrapped or not). Atari, Box2D, MuJoCo and users'
    envs are not (a user's env unknown to Gymnasium's registry until its module registers it: not)."""
    if env.atari is not None:
        return False
    import gymnasium  # here, not at import: the registry's commands never load it

    entry = getattr(gymnasium.envs.registry.get(env.id), "entry_point", None)
    return isinstance(entry, str) and entry.startswith(CHEAP_FAMILIES)


def env_processes(env: EnvSpec) -> int | str:
    """The processes `env` steps its copies in, as `split_cores` takes them: one each for "async";
    the session's own for "auto" where the env steps cheaply (`steps_cheaply`)."""
    if env.vectorization == "async":
        return env.num_envs
    return 1 if env.workers == AUTO and steps_cheaply(env) else env.workers


def torch_threads(spec: Spec, sessions: int, cores: int | None = None) -> int:
    """`meta.torch_threads` as a number: "auto" resolved for `sessions` sharing this machine's
    usable cores (or `cores`). A run resolves it when it is created and records the number
    (`rlrun.training.api.as_recorded`); a session resolves only a spec that never was recorded."""
    share = cores_per_session(usable_cores() if cores is None else cores, sessions)
    return split_cores(share, spec.env.num_envs, spec.meta.torch_threads, env_processes(spec.env)).threads


def worker_count(env: EnvSpec, sessions: int, threads: int, cores: int | None = None) -> int:
    """`env.workers` as a number, for a session with `threads` torch threads: "auto" resolved for
    `sessions` sharing this machine's usable cores (or `cores`) now; a resume may resolve it anew."""
    share = cores_per_session(usable_cores() if cores is None else cores, sessions)
    return split_cores(share, env.num_envs, threads, env_processes(env)).workers


OPENMP_WAIT_POLICY = "OMP_WAIT_POLICY"


def let_idle_threads_sleep(environ: MutableMapping[str, str]) -> None:
    """Ask OpenMP (torch's threads, and MKL's and oneDNN's through it) to put a thread to sleep as
    soon as its part of a parallel region is done ("PASSIVE"), unless `environ` already names a
    policy. OpenMP reads it once, when torch loads: a training command sets it first thing in its
    own environment, which its session processes and env workers inherit.

    Why: by default libgomp (torch's OpenMP on Linux) spins each idle thread for 300,000 turns
    before it sleeps, through the workers' step and whatever else the machine runs; a spinning
    thread waits on one that is not running, and the cores it burns are the workers'. On 2 busy
    cores, 2 threads trained `ppo_breakout` 3.3-3.7x faster with it, per wall and per CPU-second.
    The bits stay: the policy decides only how an idle thread waits, never which thread computes
    which part of a sum (the thread count decides that); `ppo_breakout` with 2 threads ends in the
    same snapshot under the default, "PASSIVE" and "ACTIVE". With 1 thread there is no team to wait."""
    environ.setdefault(OPENMP_WAIT_POLICY, "PASSIVE")


def blocks(num_envs: int, workers: int) -> list[range]:
    """The copies each worker steps: contiguous, in order, sizes differing by at most one (the
    first `num_envs % workers` workers take one more)."""
    size, extra = divmod(num_envs, workers)
    starts = [w * size + min(w, extra) for w in range(workers + 1)]
    return [range(starts[w], starts[w + 1]) for w in range(workers)]
