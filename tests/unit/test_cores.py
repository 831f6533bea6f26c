"""The rules that turn `env.workers: "auto"` and `meta.torch_threads: "auto"` into numbers, the
blocks of copies the workers step, and how the spec takes and refuses these settings."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from rlrun.spec import EnvSpec, Spec, validate_spec
from rlrun.spec.consistency import check_edit
from rlrun.spec.cores import (
    AUTO,
    OPENMP_WAIT_POLICY,
    Split,
    blocks,
    cores_per_session,
    let_idle_threads_sleep,
    split_cores,
    steps_cheaply,
    torch_threads,
    usable_cores,
    worker_count,
)

A = AUTO
MACHINES = [1, 2, 4, 16, 64]
SESSIONS = [1, 2, 3, 4]
COPIES = [1, 2, 3, 8, 16, 64]


@pytest.mark.parametrize(
    ("cores", "sessions", "copies", "threads", "workers", "split"),
    [
        # both "auto": half the share to the workers (rounded down, at most one per copy), the rest to threads
        (1, 1, 8, A, A, (1, 1)),
        (2, 1, 8, A, A, (2, 1)),  # one worker would gain nothing: the session's process steps, 2 threads
        (4, 1, 8, A, A, (2, 2)),
        (16, 1, 16, A, A, (8, 8)),  # not 16 threads and 15 workers on 16 cores
        (16, 1, 3, A, A, (13, 3)),  # a worker per copy at most; the threads take the rest
        (16, 2, 16, A, A, (4, 4)),  # two sessions share the machine: 8 cores each
        (16, 3, 16, A, A, (3, 2)),
        (16, 4, 64, A, A, (2, 2)),
        (64, 1, 64, A, A, (32, 32)),
        (64, 4, 1, A, A, (16, 1)),  # one copy: stepped in the session's process
        (64, 64, 64, A, A, (1, 1)),
        (4, 8, 64, A, A, (1, 1)),  # more sessions than cores
        # workers "auto", threads a number: what the threads leave
        (16, 1, 16, 8, A, (8, 8)),  # not 15 workers beside 8 threads
        (16, 1, 64, 1, A, (1, 15)),  # the default 1 thread: a core for the learner, as before
        (16, 4, 64, 1, A, (1, 3)),
        (16, 1, 8, 1, A, (1, 8)),
        (16, 1, 64, 15, A, (15, 1)),  # one core left: the session's process steps
        (4, 1, 8, 8, A, (8, 1)),  # more threads than cores: no workers
        (2, 1, 8, 1, A, (1, 1)),
        (64, 2, 64, 4, A, (4, 28)),
        # threads "auto", workers a number (or "async": a process per copy): what the workers leave
        (16, 1, 16, A, 12, (4, 12)),  # not 16 threads beside 12 workers
        (16, 1, 16, A, 1, (16, 1)),
        (16, 1, 16, A, 16, (1, 16)),  # at least 1
        (64, 4, 8, A, 8, (8, 8)),
        (2, 1, 4, A, 2, (1, 2)),
        # both numbers: kept
        (16, 1, 16, 3, 5, (3, 5)),
    ],
)
def test_split_cores(
    cores: int, sessions: int, copies: int, threads: int | str, workers: int | str, split: tuple[int, int]
) -> None:
    assert split_cores(cores_per_session(cores, sessions), copies, threads, workers) == Split(*split)


@pytest.mark.parametrize("cores", MACHINES)
def test_auto_never_oversubscribes_and_a_session_finds_the_workers_the_run_planned(cores: int) -> None:
    for sessions, copies in itertools.product(SESSIONS, COPIES):
        _check_split(cores_per_session(cores, sessions), copies)


def _check_split(share: int, copies: int) -> None:
    both = split_cores(share, copies, AUTO, AUTO)
    processes = both.workers if both.workers > 1 else 0  # 1: stepped in the session's own process
    assert both.threads >= 1 and 1 <= both.workers <= copies
    assert both.threads + processes == share  # every core of the share, none twice
    # the run records the threads; a session on the same machine resolves the workers from them
    assert split_cores(share, copies, both.threads, AUTO) == both
    for threads in (1, 2, 8, 64):
        workers = split_cores(share, copies, threads, AUTO).workers
        assert workers <= copies and (workers == 1 or threads + workers <= share)
    for workers in (1, 2, 8, 64):
        threads = split_cores(share, copies, AUTO, workers).threads
        assert threads >= 1 and (threads + (workers if workers > 1 else 0) <= share or threads == 1)


def _spec(cores_settings: dict[str, object], **env: object) -> Spec:
    return validate_spec(
        {
            "name": "t",
            "agent": {"algorithm": "reinforce"},
            "env": {"id": "CartPole-v1", **env},
            "meta": {"max_frame": 1000, **cores_settings},
        }
    )


def test_the_spec_helpers_read_the_rule() -> None:
    pytest.importorskip("Box2D", reason="LunarLander, an env stepped by workers, needs the box2d extra")
    both = _spec({"torch_threads": "auto"}, id="LunarLander-v3", num_envs=16, workers="auto")
    assert torch_threads(both, sessions=1, cores=16) == 8
    assert worker_count(both.env, sessions=1, threads=8, cores=16) == 8
    assert worker_count(both.env, sessions=1, threads=8, cores=32) == 16  # a resume on a larger machine
    assert worker_count(both.env, sessions=2, threads=8, cores=16) == 1  # or beside another run
    on_async = _spec({"torch_threads": "auto"}, id="LunarLander-v3", num_envs=4, vectorization="async")
    assert torch_threads(on_async, sessions=1, cores=16) == 12  # a process per copy
    assert torch_threads(_spec({"torch_threads": 3}), sessions=1, cores=16) == 3
    assert torch_threads(_spec({"torch_threads": "auto"}, workers=1), sessions=1) == usable_cores() >= 1


def test_auto_steps_cheap_envs_in_the_sessions_process() -> None:
    """`env.workers` "auto" (the default) keeps Gymnasium's classic-control and toy-text copies in
    the session's process, whatever the cores, and the threads take the whole share; Box2D, MuJoCo
    and Atari get workers where the cores allow."""
    cheap = _spec({"torch_threads": "auto"}, id="CartPole-v1", num_envs=16)
    assert cheap.env.workers == "auto" and steps_cheaply(cheap.env)
    assert torch_threads(cheap, sessions=1, cores=16) == 16
    assert worker_count(cheap.env, sessions=1, threads=16, cores=16) == 1
    assert worker_count(_spec({}, id="FrozenLake-v1", num_envs=8).env, sessions=1, threads=1, cores=16) == 1
    assert worker_count(_spec({}, id="CartPole-v1", num_envs=8, workers=4).env, sessions=1, threads=1, cores=16) == 4
    pytest.importorskip("Box2D", reason="LunarLander, an env stepped by workers, needs the box2d extra")
    pytest.importorskip("mujoco", reason="Hopper, an env stepped by workers, needs the mujoco extra")
    for env_id in ("LunarLander-v3", "Hopper-v5"):
        costly = _spec({}, id=env_id, num_envs=8)
        assert not steps_cheaply(costly.env)
        assert worker_count(costly.env, sessions=1, threads=1, cores=16) == 8
        assert worker_count(costly.env, sessions=1, threads=1, cores=2) == 1  # this machine: one learner, one worker


def test_training_commands_let_idle_openmp_threads_sleep_unless_told_otherwise() -> None:
    environ: dict[str, str] = {}
    let_idle_threads_sleep(environ)
    assert environ == {OPENMP_WAIT_POLICY: "PASSIVE"}
    chosen = {OPENMP_WAIT_POLICY: "ACTIVE"}
    let_idle_threads_sleep(chosen)
    assert chosen == {OPENMP_WAIT_POLICY: "ACTIVE"}


@pytest.mark.parametrize(("num_envs", "workers", "sizes"), [(8, 2, [4, 4]), (7, 3, [3, 2, 2]), (3, 3, [1, 1, 1])])
def test_blocks_are_contiguous_in_order_and_even(num_envs: int, workers: int, sizes: list[int]) -> None:
    parts = blocks(num_envs, workers)
    assert [len(p) for p in parts] == sizes
    assert [i for p in parts for i in p] == list(range(num_envs))


def test_workers_take_a_number_or_auto() -> None:
    assert EnvSpec(id="CartPole-v1", num_envs=4, workers=2).workers == 2
    assert EnvSpec(id="CartPole-v1", num_envs=4, workers="auto").workers == "auto"
    assert EnvSpec(id="CartPole-v1").workers == "auto"  # the default (record-only: an old spec's 1, the same bits)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"num_envs": 2, "workers": 3}, "more worker processes than the 2 copies"),
        ({"num_envs": 2, "workers": 0}, 'use a whole number from 1 to 1024, or "auto"'),
        ({"num_envs": 2, "workers": "many"}, 'use a whole number from 1 to 1024, or "auto"'),
        ({"num_envs": 2, "workers": 2, "vectorization": "async"}, '"async" already gives each copy its own process'),
    ],
)
def test_workers_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        EnvSpec(id="CartPole-v1", **settings)


def test_a_resume_may_change_workers_but_not_threads() -> None:
    old = _spec({}, num_envs=4)
    [workers] = check_edit(old, _spec({}, num_envs=4, workers=2), 500)
    assert (workers.path, workers.kind, workers.allowed) == ("env.workers", "record-only", True)
    threads_old = validate_spec({**old.to_json(), "meta": {**old.to_json()["meta"], "torch_threads": 2}})
    [threads] = check_edit(old, threads_old, 500)
    assert (threads.path, threads.kind, threads.allowed) == ("meta.torch_threads", "structural", False)
