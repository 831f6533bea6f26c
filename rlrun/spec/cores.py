"""How many cores a session uses: the rules that turn `env.workers: "auto"` and
`meta.torch_threads: "auto"` into numbers. Pure functions of the machine's usable cores (the CPU
affinity, which containers and `taskset` narrow) and the sessions sharing them. Torch-free."""

from __future__ import annotations

import os
from typing import Literal

AUTO = "auto"
Auto = Literal["auto"]


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the OS has one, else every core."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows: no affinity call
        return os.cpu_count() or 1


def cores_per_session(cores: int, sessions: int) -> int:
    """A session's share of the machine: the usable cores over the sessions run at once, at least 1."""
    return max(1, cores // max(1, sessions))


def auto_workers(num_envs: int, cores: int, sessions: int) -> int:
    """Worker processes for `env.workers: "auto"`: one core of the session's share is left to the
    learner (acting and learning), the rest step the copies, never more workers than copies. 1
    steps them in the session's own process (a share of one or two cores gains nothing from a
    process that the session would wait for anyway)."""
    return max(1, min(num_envs, cores_per_session(cores, sessions) - 1))


def auto_threads(cores: int, sessions: int) -> int:
    """Torch threads for `meta.torch_threads: "auto"`: the session's share of the usable cores."""
    return cores_per_session(cores, sessions)


def blocks(num_envs: int, workers: int) -> list[range]:
    """The copies each worker steps: contiguous, in order, sizes differing by at most one (the
    first `num_envs % workers` workers take one more)."""
    size, extra = divmod(num_envs, workers)
    starts = [w * size + min(w, extra) for w in range(workers + 1)]
    return [range(starts[w], starts[w + 1]) for w in range(workers)]


def torch_threads(setting: int | str, sessions: int) -> int:
    """`meta.torch_threads` as a number: "auto" resolved on this machine now (a run records the
    number when it is created, `rlrun.training.api`; this resolves a spec that never was)."""
    if setting == AUTO:
        return auto_threads(usable_cores(), sessions)
    assert isinstance(setting, int)
    return setting
