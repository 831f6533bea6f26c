"""Many cores for one session (issue 26): `env.workers` steps the copies in blocks, one worker
process each, and `env.vectorization: async` one process each; both train the same bits as
stepping them in the session's process (every env family, a user's env and a recurrent agent among
them, issue 51); a resume is exact after SIGTERM or kill -9 of the session or of one worker, and
may switch among the three (and change the number of workers). `meta.torch_threads: "auto"`
is recorded as a number when the run is created, and "auto" for both splits the cores between
the learner's threads and the workers.

LunarLander (Box2D) copies are replayed inside their workers, so these runs go through the
protocol's every command: reset, step, call (capture, restore) and set_attr.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zygote
from helpers import cli_env, fast, invoke, rlrun, run_attempts
from same_run import (
    CADENCE,
    assert_same_run,
    assert_tensors_equal,
    final_state,
    killed_after_a_snapshot,
    preempted_mid_episode,
    reference_state,
    resume_ok,
    train,
    wait_for,
)

from rlrun.spec.cores import cores_per_session, usable_cores
from rlrun.testhooks import CORES_ENV, FREEZE_ENV, HEARTBEAT_ENV, HOLD_ENV

pytestmark = pytest.mark.slow

SPEC = "ppo_lunarlander"
BUDGET = 4000
SETTINGS = ["--set", "agent.network.hidden=[32, 32]", "--set", "env.num_envs=4", "--frames", str(BUDGET)]
WORKERS = ["--set", "env.workers=2"]
ASYNC = ["--set", "env.vectorization=async"]
NEEDS_PROC = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers through /proc")


def _args(*extra: str) -> list[str]:
    return [*fast(SPEC), *SETTINGS, *extra]


@pytest.fixture(scope="module")
def sync_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("Box2D")
    return reference_state(tmp_path_factory, SPEC, *_args())


@pytest.fixture(scope="module")
def workers_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("Box2D")
    return reference_state(tmp_path_factory, SPEC, *_args(*WORKERS))


def without_vector_buffers(state: dict[str, Any]) -> dict[str, Any]:
    """A run's final state without the buffers a SyncVectorEnv keeps of its last step (recorded
    with its snapshot's env, overwritten by every step, never restored into workers); the rest,
    each copy's state included, must be equal."""
    sessions = []
    for session in state["sessions"]:
        meta = session["saved"].meta
        env = {**meta.env, "own": {}}
        saved = dataclasses.replace(session["saved"], meta=dataclasses.replace(meta, env=env))
        sessions.append({**session, "saved": saved})
    return {**state, "sessions": sessions}


def assert_same_as_sync(sync: dict[str, Any], other: dict[str, Any]) -> None:
    assert_same_run(without_vector_buffers(sync), without_vector_buffers(other))


def _assert_replayed_exactly(home: Path) -> None:
    resumed = run_attempts(home)[-1]
    assert not resumed.approximate, resumed.note
    assert resumed.note is not None and resumed.note.startswith("env: replayed"), resumed.note


def test_workers_step_the_same_bits_as_the_session_process(
    sync_run: dict[str, Any], workers_run: dict[str, Any]
) -> None:
    assert_same_as_sync(sync_run, workers_run)


def test_auto_workers_train_the_same_bits(sync_run: dict[str, Any], home: Path) -> None:
    done = train(home, SPEC, *_args("--set", "env.workers=auto"))
    assert done.code == 0, done.stderr
    assert_same_as_sync(sync_run, final_state(home))


RECURRENT = [  # recurrent PPO, its minibatches whole sequences of one copy (tests/test_recurrent.py's kind)
    "--frames",
    "2000",
    "--set",
    'env.wrappers=[{"class": "rlrun.envs.pomdp:HideVelocities"}]',
    "--set",
    'agent.network.recurrent={"cell": "lstm", "size": 16}',
    "--set",
    "env.num_envs=4",
]


def test_a_recurrent_agent_trains_the_same_bits_with_workers(
    tmp_path_factory: pytest.TempPathFactory, home: Path
) -> None:
    """Recurrent PPO (an LSTM, CartPole with its velocities hidden) over copies stepped in 2 workers
    ends in the snapshot of the run that stepped them in the session's process: each copy's memory
    follows its own copy."""
    straight = reference_state(tmp_path_factory, "ppo_cartpole", *RECURRENT)
    done = train(home, "ppo_cartpole", *RECURRENT, *WORKERS)
    assert done.code == 0, done.stderr
    assert_same_as_sync(straight, final_state(home))


def test_sigterm_mid_episode_with_workers(workers_run: dict[str, Any], home: Path) -> None:
    preempted_mid_episode(home, SPEC, *_args(*WORKERS))
    resume_ok(home)
    _assert_replayed_exactly(home)
    assert_same_run(workers_run, final_state(home))


def test_kill_9_with_workers(workers_run: dict[str, Any], home: Path) -> None:
    killed_after_a_snapshot(home, SPEC, *_args(*WORKERS))
    resume_ok(home, "latest")
    _assert_replayed_exactly(home)
    assert_same_run(workers_run, final_state(home))


@NEEDS_PROC
def test_kill_9_of_one_worker_mid_rollout(workers_run: dict[str, Any], home: Path) -> None:
    """One env worker killed (-9) while its session is between two steps of a rollout: the session
    fails at its next step naming the worker and its copies, and a resume from its newest snapshot
    replays the copies and ends as the run trained straight through, recorded exact."""
    process, session = _frozen_at(home, 2345, 2, "train", SPEC, *CADENCE, *_args(*WORKERS))
    workers = _spawned_children(session)
    assert len(workers) == 2
    os.kill(workers[1], signal.SIGKILL)
    os.kill(session, signal.SIGCONT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr
    named = r"s0 failed at frame 2\.3\d+k: WorkerError: env worker \d \(copies \d-\d\) ended \(exit code -9\)"
    assert re.search(named, stderr), stderr
    resume_ok(home, "latest")
    _assert_replayed_exactly(home)
    assert_same_run(workers_run, final_state(home))


@NEEDS_PROC
def test_kill_9_of_the_session_alone_ends_its_workers(workers_run: dict[str, Any], home: Path) -> None:
    """The session's process killed (-9) mid-rollout, its workers not (an OOM killer picks one
    process): each worker ends as its pipe closes, none left stepping for nobody, and the run
    resumes exact."""
    process, session = _frozen_at(home, 2345, 2, "train", SPEC, *CADENCE, *_args(*WORKERS))
    workers = _spawned_children(session)
    assert len(workers) == 2
    os.kill(session, signal.SIGKILL)
    process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in workers):
        assert time.monotonic() < deadline, "a worker outlived its session"
        time.sleep(0.05)
    resume_ok(home, "latest")
    _assert_replayed_exactly(home)
    assert_same_run(workers_run, final_state(home))


def _running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (ended, waiting for a parent to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_sigterm_to_the_whole_process_group(workers_run: dict[str, Any], home: Path) -> None:
    """A scheduler that signals every process of the job (SLURM's scancel) reaches the workers
    too: they leave the stopping to the session, which captures their copies into its snapshot."""
    # The session holds after its snapshot at 2,000 until the signal has been sent: started fast, the
    # run could otherwise end before the test sees that snapshot.
    held = home.parent / "held"
    process = zygote.start(
        ["train", SPEC, *CADENCE, *_args(*WORKERS)],
        env={**cli_env(home), HOLD_ENV: f"2000@{held}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for(held.exists, process)
    os.killpg(process.pid, signal.SIGTERM)
    held.unlink()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    resume_ok(home)
    resumed = run_attempts(home)[-1]
    assert not resumed.approximate, resumed.note
    assert_same_run(workers_run, final_state(home))


def test_async_copies_train_the_same_bits(sync_run: dict[str, Any], home: Path) -> None:
    done = train(home, SPEC, *_args(*ASYNC))
    assert done.code == 0, done.stderr
    assert_same_as_sync(sync_run, final_state(home))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (WORKERS, ["env.workers=1"]),
        ([], ["env.workers=3"]),
        (ASYNC, ["env.vectorization=sync", "env.workers=2"]),
        ([], ["env.vectorization=async"]),
    ],
    ids=["workers-to-in-process", "in-process-to-workers", "async-to-workers", "in-process-to-async"],
)
def test_a_resume_may_change_how_the_copies_are_stepped(
    sync_run: dict[str, Any], home: Path, before: list[str], after: list[str]
) -> None:
    preempted_mid_episode(home, SPEC, *_args(*before))
    resume_ok(home, "latest", *(arg for edit in after for arg in ("--set", edit)))
    _assert_replayed_exactly(home)
    assert_same_as_sync(sync_run, final_state(home))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (ASYNC, ["env.vectorization=sync"]),
        (WORKERS, ["env.vectorization=async", "env.workers=1"]),
    ],
    ids=["async-to-in-process", "workers-to-async"],
)
def test_kill_9_then_resume_stepping_the_copies_another_way(
    sync_run: dict[str, Any], home: Path, before: list[str], after: list[str]
) -> None:
    killed_after_a_snapshot(home, SPEC, *_args(*before))
    resume_ok(home, "latest", *(arg for edit in after for arg in ("--set", edit)))
    _assert_replayed_exactly(home)
    assert_same_as_sync(sync_run, final_state(home))


@pytest.mark.parametrize(
    ("other", "resumed_in"),
    [
        ({"workers": 3}, {"workers": 2}),
        ({"vectorization": "async"}, {"vectorization": "async"}),
    ],
    ids=["blocks", "async"],
)
def test_blocks_and_async_copies_give_what_a_sync_env_gives(other: dict[str, Any], resumed_in: dict[str, Any]) -> None:
    """Observations, rewards, flags and infos (the final observations of ended episodes
    included) of every step, and each copy's captured state (its spaces' generators included),
    against SyncVectorEnv's; each one's state restored into the other steps on the same."""
    from rlrun.envs import make_vector_env, seed_spaces
    from rlrun.envs.state import capture_vector_env, restore_vector_env
    from rlrun.spec import EnvSpec

    actions = np.random.default_rng(0).integers(0, 2, (200, 5))

    def play(choice: dict[str, Any], restore: dict[str, Any] | None = None) -> tuple[list[Any], dict[str, Any]]:
        env = make_vector_env(EnvSpec(id="CartPole-v1", num_envs=5, **choice))
        seen: list[Any] = [env.reset(seed=3)]
        seed_spaces(env, 7)
        state: dict[str, Any] = {}
        if restore is not None:
            restore_vector_env(env, restore)
        for step in range(101 if restore else 0, len(actions)):
            seen.append(env.step(actions[step]))
            if step == 100:
                state = {**capture_vector_env(env), "own": {}}  # the sync env's last-step buffers aside
        env.close()
        return seen, state

    sync, sync_state = play({})
    theirs, their_state = play(other)
    assert_tensors_equal(sync, theirs, "steps", same_types=True)
    assert sync_state == their_state
    resumed, _ = play(resumed_in, restore=sync_state)
    assert_tensors_equal(sync[102:], resumed[1:], "steps", same_types=True)
    back, _ = play({}, restore=their_state)
    assert_tensors_equal(sync[102:], back[1:], "steps", same_types=True)


FAMILIES = {  # an env of each family, the copies and the steps that end some episode of each
    "classic": ("CartPole-v1", 150),
    "box2d": ("LunarLander-v3", 120),
    "mujoco": ("Hopper-v5", 120),
    "atari": ("ppo_breakout", 120),
    "user-replayed": ("my_robot.envs:Reach-v0", 160),
    "user-protocol": ("my_robot.envs:Push-v0", 160),
}
NEEDS = {"box2d": "Box2D", "mujoco": "mujoco", "atari": "ale_py"}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_stepping_mode_gives_what_a_sync_env_gives(family: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every env family (classic control, Box2D, MuJoCo, Atari, a user's env replayed and one with
    the state protocol) stepped for the same actions in every mode (`BlockVectorEnv`'s shared memory,
    the default; "async", a process per copy; and, for classic control, `BlockVectorEnv`'s pipes,
    the transport of observations that are not arrays) against SyncVectorEnv in this process:
    the observations, rewards, flags and infos of every step (Atari's and MuJoCo's infos of plain
    numbers packed, the ends of episodes pickled) and each copy's captured state, bit for bit; the
    state a worker captured, restored into a sync env, steps on the same."""
    from functools import partial

    from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

    from rlrun.envs import make_recorded_env, seed_spaces
    from rlrun.envs.state import capture_vector_env, restore_vector_env
    from rlrun.envs.workers import BlockVectorEnv
    from rlrun.spec import EnvSpec, load_spec

    if family in NEEDS:
        pytest.importorskip(NEEDS[family])
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "userenvs"))  # spawned workers inherit sys.path
    name, steps = FAMILIES[family]
    spec = load_spec(name, ["env.num_envs=3"]).env if family == "atari" else EnvSpec(id=name, num_envs=3)
    make = partial(make_recorded_env, spec)
    probe = make()
    space = probe.action_space
    probe.close()
    rng = np.random.default_rng(0)
    if hasattr(space, "n"):
        actions: Any = rng.integers(0, space.n, (steps, spec.num_envs))
    else:
        actions = rng.uniform(-1, 1, (steps, spec.num_envs, *space.shape)).astype(space.dtype)
    middle = steps // 2

    def play(env: Any, restore: dict[str, Any] | None = None) -> tuple[list[Any], dict[str, Any]]:
        seen: list[Any] = [env.reset(seed=3)]
        seed_spaces(env, 7)
        state: dict[str, Any] = {}
        if restore is not None:
            restore_vector_env(env, restore)
        for step in range(middle + 1 if restore else 0, steps):
            seen.append(env.step(actions[step]))
            if step == middle:
                state = {**capture_vector_env(env), "own": {}}  # the sync env's last-step buffers aside
        env.close()
        return seen, state

    def sync_env() -> SyncVectorEnv:
        return SyncVectorEnv([make] * spec.num_envs, autoreset_mode=AutoresetMode.SAME_STEP)

    sync, sync_state = play(sync_env())
    assert any(step[2].any() or step[3].any() for step in sync[1:]), "no episode ended: autoreset untested"
    modes = {
        "shared": lambda: BlockVectorEnv(make, spec.num_envs, 2),
        "async": lambda: AsyncVectorEnv(
            [make] * spec.num_envs, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn"
        ),
    }
    if family == "classic":  # the pipes carry what every family's steps carry, pickled: one suffices
        modes["pipes"] = lambda: BlockVectorEnv(make, spec.num_envs, 2, transport="pipes")
    for mode, build in modes.items():
        env = build()
        assert getattr(env, "transport", mode) == mode
        theirs, their_state = play(env)
        assert_tensors_equal(sync, theirs, f"{mode} steps", same_types=True)
        if family.startswith("user"):
            # Known gap: Reach's spaces are class attributes, one object that SyncVectorEnv's copies
            # share (each copy's seeding overwrites the last's), which copies in other processes
            # cannot share; their spaces' generators differ, nothing else (no step draws from them).
            assert _spaces_aside(sync_state) == _spaces_aside(their_state), mode
        else:
            assert sync_state == their_state, mode
    back, _ = play(sync_env(), restore=their_state)
    assert_tensors_equal(sync[middle + 2 :], back[1:], "steps", same_types=True)


def _spaces_aside(state: dict[str, Any]) -> dict[str, Any]:
    """A vector env's captured state without its copies' spaces (their generators)."""
    envs = [{k: v for k, v in copy.items() if k not in ("action_space", "observation_space")} for copy in state["envs"]]
    return {**state, "envs": envs}


def test_a_worker_killed_or_hung_fails_naming_its_copies() -> None:
    """kill -9 of a worker between two steps (the session's write to it fails) or while it steps
    (its reply never comes): the step raises a WorkerError naming the worker, its copies and its
    exit code, and the env is broken (every later command says so) but closes. A worker that does
    not answer in time is ended, named with the copy it was stepping."""
    from functools import partial

    from misbehaving_env import Misbehaving

    from rlrun.envs import make_recorded_env
    from rlrun.envs.workers import BlockVectorEnv, WorkerError
    from rlrun.spec import EnvSpec

    # the workers import the wrapper's small module, not this one (torch's import, at every start)
    make = partial(Misbehaving, partial(make_recorded_env, EnvSpec(id="CartPole-v1", num_envs=4)))
    actions = np.zeros(4, dtype=np.int64)
    env = BlockVectorEnv(make, 4, 2)
    env.reset(seed=0)
    env.step(actions)
    env._processes[1].kill()
    env._processes[1].join()
    with pytest.raises(WorkerError, match=r"env worker 1 \(copies 2-3\) ended \(exit code -9\) \(stepping\)"):
        env.step(actions)
    with pytest.raises(WorkerError, match="failed earlier: env worker 1"):
        env.call("rlrun_capture")
    env.close()

    dying = BlockVectorEnv(make, 4, 2)
    dying.reset(seed=0)
    dying.set_attr("die_at_step", [None, None, None, 2])
    dying.step(actions)
    with pytest.raises(WorkerError, match=r"env worker 1 \(copies 2-3\) ended \(exit code -9\) at copy 3"):
        dying.step(actions)
    dying.close()

    hung = BlockVectorEnv(make, 4, 2)
    hung.timeout = 2.0  # after the start-up (the workers' imports)
    hung.reset(seed=0)
    hung.set_attr("sleep_at_step", [None, None, None, 2])
    hung.step(actions)
    with pytest.raises(WorkerError, match=r"env worker 1 \(copies 2-3\) did not answer within 2 s at copy 3"):
        hung.step(actions)
    assert not hung._processes[1].is_alive()
    hung.close()


def test_auto_torch_threads_are_recorded_as_a_number(home: Path) -> None:
    """Beside the session's own process (`env.workers` 1), "auto" threads are the run's share of the cores."""
    done = invoke(
        home,
        "train",
        "reinforce_cartpole",
        *fast("reinforce_cartpole"),
        "--frames",
        "600",
        "--set",
        "meta.torch_threads=auto",
        "--set",
        "meta.sessions=2",
    )
    assert done.code == 0, done.stderr
    shown = invoke(home, "show", "latest", "--spec-json")
    assert json.loads(shown.stdout)["meta"]["torch_threads"] == cores_per_session(usable_cores(), 2)
    # "auto" in a resume's edit is the number the run recorded: nothing changes
    more = invoke(home, "resume", "latest", "--more", "200", "--set", "meta.torch_threads=auto")
    assert more.code == 0, more.stderr
    revisions = json.loads(invoke(home, "show", "latest", "--spec-json").stdout)
    assert revisions["meta"]["torch_threads"] == cores_per_session(usable_cores(), 2)


def test_auto_counts_the_sessions_of_other_runs_running_on_this_machine(home: Path) -> None:
    """A run training here now (a live session of this host in the registry) takes its share of the
    cores: a new run's "auto" divides them by its own sessions and that one."""
    from rlrun.registry import Registry

    if usable_cores() < 2:
        pytest.skip("one usable core: every share is 1, with or without another run")
    other = zygote.start(
        ["train", "reinforce_cartpole", *fast("reinforce_cartpole"), "--frames", "1M"],
        env={**cli_env(home), HEARTBEAT_ENV: "0.2"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def sharing(besides: str | None = None) -> int:
            with Registry.open(home, create=False) as registry:
                return registry.sessions_sharing_this_host(1, besides_run=besides)

        wait_for(lambda: sharing() == 2, other)
        with Registry.open(home, create=False) as registry:
            other_id = registry.resolve("latest").id
        assert sharing(besides=other_id) == 1  # a run's own sessions are counted by meta.sessions
        done = invoke(
            home,
            "train",
            "reinforce_cartpole",
            *fast("reinforce_cartpole"),
            "--frames",
            "600",
            "--set",
            "meta.torch_threads=auto",
        )
        assert done.code == 0, done.stderr
        shown = invoke(home, "show", "latest", "--spec-json")
        assert json.loads(shown.stdout)["meta"]["torch_threads"] == cores_per_session(usable_cores(), 2)
    finally:
        os.killpg(other.pid, signal.SIGKILL)
        other.wait(timeout=30)
    # once it is gone (its pid dead on this host), it no longer counts
    assert sharing() == 1
    done = invoke(
        home,
        "train",
        "reinforce_cartpole",
        *fast("reinforce_cartpole"),
        "--frames",
        "600",
        "--set",
        "meta.torch_threads=auto",
    )
    assert done.code == 0, done.stderr
    shown = invoke(home, "show", "latest", "--spec-json")
    assert json.loads(shown.stdout)["meta"]["torch_threads"] == cores_per_session(usable_cores(), 1)


@NEEDS_PROC
def test_auto_for_both_splits_the_cores_and_a_resume_resolves_the_workers_anew(home: Path, tmp_path: Path) -> None:
    """Threads and workers both "auto" on a machine of 4 cores (as the test hook makes the run see
    it): the run records 2 threads and its session steps the 4 copies in 2 workers, not 4 threads
    beside 3 workers. Killed (-9) and resumed on 16 cores, it keeps its 2 threads and takes the
    workers they leave (4: one per copy), and ends as the run trained straight through with 2
    threads in the session's process, bit for bit."""
    pytest.importorskip("Box2D")
    auto = _args("--set", "env.workers=auto", "--set", "meta.torch_threads=auto")
    trained, pid = _frozen_at(home, 2000, 4, "train", SPEC, *CADENCE, *auto)
    try:
        assert len(_spawned_children(pid)) == 2
        assert json.loads(rlrun(home, "show", "latest", "--spec-json").stdout)["meta"]["torch_threads"] == 2
    finally:
        os.killpg(trained.pid, signal.SIGKILL)
        trained.wait(timeout=30)
    resumed, pid = _frozen_at(home, 3000, 16, "resume", "latest")
    try:
        assert len(_spawned_children(pid)) == 4
    finally:
        os.kill(pid, signal.SIGCONT)
    _, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    straight = tmp_path / "straight"
    done = train(straight, SPEC, *_args("--set", "meta.torch_threads=2"))
    assert done.code == 0, done.stderr
    assert_same_as_sync(final_state(straight), final_state(home))


def _frozen_at(home: Path, frame: int, cores: int, *args: str) -> tuple[subprocess.Popen[str], int]:
    """`rlrun ARGS` on a machine of `cores` cores, its session frozen (SIGSTOP) at `frame`: the
    process and the session's pid."""
    flag = home.parent / f"frozen-at-{frame}"
    process = zygote.start(
        [*args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**cli_env(home), CORES_ENV: str(cores), FREEZE_ENV: f"{frame}@{flag}"},
    )
    wait_for(lambda: flag.exists() and flag.read_text() != "", process)
    return process, int(flag.read_text())


def _spawned_children(pid: int) -> list[int]:
    """The processes that `pid` started through multiprocessing's spawn (its env workers, in the
    order they started; its resource tracker is not one)."""
    children = []
    for entry in Path("/proc").iterdir():
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid and b"spawn_main" in command:
            children.append(int(entry.name))
    return sorted(children)


def test_a_training_command_lets_idle_openmp_threads_sleep(home: Path) -> None:
    """`rlrun train` sets OMP_WAIT_POLICY=PASSIVE before torch loads (its session processes inherit
    it) unless the environment names a policy; libgomp's own report (OMP_DISPLAY_ENV) is the proof:
    an idle thread spins 0 turns, not the default 300,000."""
    args = [*fast("reinforce_cartpole"), "--frames", "300"]
    done = train(home, "reinforce_cartpole", *args, "--set", "meta.sessions=2", env={"OMP_DISPLAY_ENV": "VERBOSE"})
    assert done.code == 0, done.stderr
    spins = re.findall(r"GOMP_SPINCOUNT = '(\d+)'", done.stderr)
    if not spins:
        pytest.skip("torch's OpenMP here is not libgomp")
    assert set(spins) == {"0"} and len(spins) >= 2  # the two sessions' processes (and the command's)
    # A policy the environment names is kept (the command's own process is where rlrun would set
    # one; its session processes inherit the environment, as the first run showed): one session.
    told = train(home, "reinforce_cartpole", *args, env={"OMP_DISPLAY_ENV": "VERBOSE", "OMP_WAIT_POLICY": "ACTIVE"})
    assert told.code == 0, told.stderr
    assert set(re.findall(r"GOMP_SPINCOUNT = '(\d+)'", told.stderr)) == {"30000000000"}
