"""What "the same run" means, and the trainings and resumes the exactness tests compare (tests/
test_resume.py and the tests built on it): the newest snapshot of each session with its metrics log
and evaluations (`final_state`), equal bit for bit (`assert_same_run`)."""

from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import zygote
from helpers import Result, builtin_for, cli_env, environment, fast, invoke, run_cli

from rlrun import paths, snapshot, storage
from rlrun.algorithms import algorithm_names
from rlrun.registry import Registry
from rlrun.session import metrics_log
from rlrun.snapshot import remote
from rlrun.snapshot.layout import is_temporary
from rlrun.testhooks import HOLD_ENV, SIGNAL_AT_ENV

BUDGET = 6_000
CADENCE = [
    "--set",
    "meta.eval_frequency=1000",
    "--set",
    "meta.checkpoint_frequency=1000",
    "--set",
    "meta.log_frequency=500",
    "--set",
    "meta.num_eval_episodes=2",
]


OFFLINE_TO_ONLINE = ("td3bc", "iql", "cql")
"""Tested in tests/test_offline_continuous.py and tests/test_offline_cql.py (exactness across the
switch, metrics columns) on tiny runs: each per-algorithm test here would first record a dataset,
then train a BUDGET-frame run."""
ALGORITHMS = [name for name in algorithm_names() if name not in OFFLINE_TO_ONLINE]

# DQN whose replay memory (1,800 rows) wraps during a WRAPPING_TARGET run, a snapshot every 1k
# frames (each writing only the rows added since the one before), retention keeping 2: the replay-
# memory snapshot tests, on a disk (test_replay_snapshots.py) and in object storage (test_object_store.py).
WRAPPING_DQN = builtin_for("dqn")
WRAPPING_SETTINGS = [
    "agent.learning_starts=500",
    "agent.train_frequency=32",
    "agent.gradient_steps=2",
    "agent.batch_size=32",
    "agent.network.hidden=[32, 32]",
    "agent.memory.capacity=1800",
    "meta.keep_checkpoints=2",
]
WRAPPING_TARGET = 6000


def train_wrapping_dqn(home: Path, frames: int, env: dict[str, str] | None = None) -> Result:
    """The wrapping DQN run, trained to `frames` (its own settings, not `fast`'s: a memory that wraps)."""
    settings = [arg for edit in WRAPPING_SETTINGS for arg in ("--set", edit)]
    return run_cli(home, "train", WRAPPING_DQN, "--frames", str(frames), *CADENCE, *settings, env=env)


# ---------------------------------------------------------------------------------------------
# What "the same run" means


def final_state(home: Path, reference: str = "latest") -> dict[str, Any]:
    """The newest snapshot of each session, with the run's recorded evaluations."""
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve(reference).id)
    sessions = []
    for session in detail.sessions:
        newest = max((c for c in detail.checkpoints if c.session_index == session.index), key=lambda c: c.frame)
        saved = snapshot.read(home / newest.path, newest.sha256)
        evaluations = [
            (e.frame, e.mean, e.std, e.min, e.max) for e in detail.evaluations if e.session_index == session.index
        ]
        log = metrics_log.path(paths.session_dir(home, detail.run.id, session.index))
        metrics_log.download(log)  # a home in object storage: the log the store holds
        sessions.append(
            {"saved": saved, "recorded": evaluations, "status": session.status, "metrics": training_cells(log)}
        )
    return {"run": detail.run, "sessions": sessions}


def training_cells(log: Path) -> list[list[str]]:
    """The metrics log as written, header first, without the columns that measure the machine."""
    with open(log, newline="", encoding="utf-8") as file:
        lines = list(csv.reader(file))
    keep = [i for i, name in enumerate(lines[0]) if name not in metrics_log.WALL_CLOCK]
    return [[line[i] for i in keep] for line in lines]


def assert_tensors_equal(a: Any, b: Any, where: str = "state", *, same_types: bool = False) -> None:
    """`a` and `b` equal bit for bit, through dicts, lists and tuples: tensors and NumPy arrays by
    dtype, shape and value (object arrays element by element); other values by `==`, and by type
    too with `same_types`."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_tensors_equal(a[key], b[key], f"{where}.{key}", same_types=same_types)
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_tensors_equal(x, y, f"{where}[{i}]", same_types=same_types)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, where
        if a.dtype == object:
            assert_tensors_equal(list(a), list(b), where, same_types=same_types)
        else:
            assert np.array_equal(a, b), where
    else:
        assert (type(a) is type(b) or not same_types) and a == b, where


def assert_same_run(straight: dict[str, Any], interrupted: dict[str, Any], *, evaluated_after: int = 0) -> None:
    """Equal training state, and equal evaluations at every frame A scheduled one (after
    `evaluated_after`, when the runs evaluated on different cadences before it)."""
    assert_same_training(straight, interrupted)
    for a, b in zip(straight["sessions"], interrupted["sessions"], strict=True):
        meta_a, meta_b = a["saved"].meta.to_json(), b["saved"].meta.to_json()
        scheduled = {e["frame"] for e in meta_a["evaluations"] if e["frame"] > evaluated_after}
        assert scheduled, "no evaluation to compare"
        assert [e for e in meta_a["evaluations"] if e["frame"] in scheduled] == [
            e for e in meta_b["evaluations"] if e["frame"] in scheduled
        ]
        assert [e for e in a["recorded"] if e[0] in scheduled] == [e for e in b["recorded"] if e[0] in scheduled]


def assert_same_training(a_run: dict[str, Any], b_run: dict[str, Any]) -> None:
    """Equal training state, whatever each run evaluated: clock, tensors, metrics log, the agent's
    and env's state and every random stream, the replay memory."""
    assert len(a_run["sessions"]) == len(b_run["sessions"])
    for a, b in zip(a_run["sessions"], b_run["sessions"], strict=True):
        assert a["status"] == b["status"] == "finished"
        meta_a, meta_b = a["saved"].meta.to_json(), b["saved"].meta.to_json()
        assert {k: v for k, v in meta_a["clock"].items() if k != "wall_time"} == {
            k: v for k, v in meta_b["clock"].items() if k != "wall_time"
        }
        assert_tensors_equal(a["saved"].tensors, b["saved"].tensors)
        assert "metrics" not in meta_a and "metrics" not in meta_b, "snapshots no longer carry the history"
        assert len(a["metrics"]) > 1, "nothing logged"
        assert a["metrics"] == b["metrics"], "metrics logs differ in their training columns"
        for key in ("obs", "episode_return", "episode_length", "recent_returns", "env", "random"):
            assert meta_a[key] == meta_b[key], key
        assert a["saved"].logs.keys() == b["saved"].logs.keys()
        for name, log in a["saved"].logs.items():  # the replay memory, however its segments were cut
            assert np.array_equal(log_items(log), log_items(b["saved"].logs[name])), f"log {name}"


def log_items(log: snapshot.StoredLog) -> np.ndarray:
    """The items a snapshot's log holds in its window, oldest first."""
    start = max(0, log.end - log.capacity)
    parts = [np.load(s.path, allow_pickle=False)[max(start - s.start, 0) :] for s in log.segments]
    return np.concatenate(parts) if parts else np.empty(0)


# ---------------------------------------------------------------------------------------------
# Runs


def train(home: Path, spec: str, *args: str, env: dict[str, str] | None = None) -> Result:
    """`rlrun train SPEC` with CADENCE, the spec's fast settings and `args`: in this process through
    the Python API (`rlrun.train`) where `args` are spec edits (`--frames`, `--set`, `--sessions`,
    `--name`), or as a process of its own with other options or with `env` (test hooks: a signal, a
    crash point, a hang)."""
    argv = [*CADENCE, *fast(spec), *args]
    if env is None and set(argv[::2]) <= {"--set", "--name", *OPTIONS}:
        return train_here(home, spec, argv)
    done = zygote.run(["train", spec, *argv], {**cli_env(home), **(env or {})}, timeout=600)
    return Result(done.returncode, done.stdout, done.stderr)


OPTIONS = {"--frames": "meta.max_frame", "--sessions": "meta.sessions", "--seed": "meta.seed"}
"""The command line's options that are spec edits, by the edit they make (as `rlrun train` makes them)."""


def train_here(home: Path, spec: str, argv: list[str], **options: Any) -> Result:
    """`rlrun train SPEC ARGV` through the Python API, in this process: `rlrun.train(load_spec(...),
    home=..., **options)`, the call a notebook makes. Its exit code is the command line's for the
    same outcome (0 finished, 1 failed, 143 preempted); stdout is the result as JSON. No signal is
    under test here, so the process's own handlers are left alone."""
    import rlrun
    from rlrun.sizes import parse_size

    edits, name = [], None
    for option, value in zip(argv[::2], argv[1::2], strict=True):
        if option == "--set":
            edits.append(value)
        elif option == "--name":
            name = value
        else:
            edits.append(f"{OPTIONS[option]}={parse_size(value) if option == '--frames' else value}")
    with environment(home):
        result = rlrun.train(
            rlrun.load_spec(spec, edits), home=os.environ["RLRUN_HOME"], name=name, handle_signals=False, **options
        )
    code = {"finished": 0, "failed": 1, "preempted": 143}[result.outcome]
    return Result(code, json.dumps(result.to_json()), result.error or "")


def built_once(factory: pytest.TempPathFactory, key: list[Any], build: Callable[[Path], None]) -> Path:
    """A folder that `build(folder)` fills once per test run, shared by every test (and every
    pytest-xdist worker) that names the same `key`: the first to ask builds it, under a file lock
    the others wait on. Never changed after: tests only read it."""
    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the run's, above each worker's
    digest = hashlib.sha256(json.dumps(key, default=str).encode()).hexdigest()[:16]
    folder = shared / "references" / digest
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "done").exists():
            made = folder / "built"
            shutil.rmtree(made, ignore_errors=True)  # a failed try's leftovers
            made.mkdir()
            build(made)
            (folder / "key.json").write_text(json.dumps(key, default=str))
            (folder / "done").touch()
    return folder / "built"


def reference(factory: pytest.TempPathFactory, spec: str, *args: str) -> Path:
    """The home of `train(home, spec, *args)` on a local disk, trained once per test run and shared
    by every test (and every pytest-xdist worker) that compares against it (`built_once`)."""

    def trained(folder: Path) -> None:
        done = train(folder / "runs", spec, *args)
        assert done.code == 0, done.stderr

    return built_once(factory, ["train", spec, *args], trained) / "runs"


def reference_state(factory: pytest.TempPathFactory, spec: str, *args: str) -> dict[str, Any]:
    """`final_state` of `reference(factory, spec, *args)`, read from its own registry."""
    home = reference(factory, spec, *args)
    with environment(home):
        return final_state(home)


def resume_ok(home: Path, *args: str) -> Result:
    """`rlrun resume ARGS`, in this process (the command line's own handler: `invoke`), exit 0."""
    done = invoke(home, "resume", *args)
    assert done.code == 0, done.stderr
    return done


def preempted_mid_episode(home: Path, spec: str, *args: str) -> Result:
    """Train `spec` (with CADENCE and its fast settings) until a SIGTERM at frame 2345: it exits
    128+15, its newest snapshot a preemption taken mid-episode."""
    stopped = train(home, spec, *args, env={SIGNAL_AT_ENV: "2345"})
    assert stopped.code == 128 + signal.SIGTERM, stopped.stderr
    with Registry.open(home, create=False) as registry:
        newest = max(registry.get_run(registry.resolve("latest").id).checkpoints, key=lambda c: c.frame)
    assert newest.kind == "preempt"
    assert any(length > 0 for length in snapshot.read_meta(home / newest.path).episode_length), "not mid-episode"
    return stopped


def killed_after_a_snapshot(home: Path, spec: str, *args: str, frame: int = 2000, hold: bool = True) -> None:
    """Train `spec` (with CADENCE and its fast settings) and kill -9 its whole process group once a
    snapshot at `frame` or later is in the registry. The session holds at `frame` (HOLD_ENV; the
    hold's file is never removed), so a run that starts and trains fast cannot end before the test
    sees that snapshot. `hold=False` for a run kept going by slow evaluations whose kill is to land
    while one is in flight: a hold awaits every evaluation before it holds."""
    env = cli_env(home)
    if hold:
        env[HOLD_ENV] = f"{frame}@{home.with_name(home.name + '.held')}"
    process = zygote.start(
        ["train", spec, *CADENCE, *fast(spec), *args],
        env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for(lambda: newest_checkpoint_frame(home) >= frame, process)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL


def newest_checkpoint_frame(home: Path) -> int:
    database = home / "registry.sqlite"
    if not database.exists():
        return -1
    with sqlite3.connect(database) as db:
        try:
            (frame,) = db.execute("select coalesce(max(frame), -1) from checkpoints").fetchone()
        except sqlite3.OperationalError:  # the schema is still being created
            return -1
    return int(frame)


def wait_for(condition: Any, process: subprocess.Popen[Any], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, "the run ended before the test could interrupt it"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def assert_snapshots_sound(home: Path) -> None:
    """Every checkpoint listed verifies against its recorded hash; none is a temporary folder, and
    none is left on disk."""
    with Registry.open(home, create=False) as registry:
        checkpoints = registry.all_checkpoints()
    assert checkpoints
    for checkpoint in checkpoints:
        assert not is_temporary(home / checkpoint.path), checkpoint.path
        snapshot.verify(home / checkpoint.path, checkpoint.sha256, deep=True)
    assert not [p for p in home.glob("*/s*/checkpoints/.*") if is_temporary(p)]
    assert_store_sound(home, checkpoints)


def assert_store_sound(home: Path, checkpoints: list[Any]) -> None:
    """For a home in object storage: the store holds exactly the listed snapshots, each complete,
    and exactly the segments their manifests name (nothing torn, orphaned or left behind)."""
    mirror = storage.mirror_of(home)
    if mirror is None:
        return
    listed = {home / c.path for c in checkpoints}
    stored: dict[Path, bool] = {}
    for run_id in {c.run_id for c in checkpoints}:
        stored.update(remote.run_snapshots(home / run_id))
    assert stored.keys() == listed and all(stored.values()), "the store holds other snapshots than the listed"
    named = {
        key
        for path in listed
        for key in remote.object_keys(
            mirror, path, json.loads(mirror.get_bytes(mirror.key(path / snapshot.layout.MANIFEST)) or b"{}")
        ).values()
    }
    segments = {key for key in mirror.keys(mirror.root) if f"/{remote.SEGMENTS}/" in key}
    assert segments == {key for key in named if f"/{remote.SEGMENTS}/" in key}, "segments no snapshot names"


def assert_plays_with_its_memory(home: Path, frames: int) -> None:
    """A run whose agent has a memory, trained to `frames`: its own evaluation at its final
    checkpoint, replayed from the checkpoint alone (each episode from a fresh memory), gives the
    recorded returns; enjoy's episodes, replayed step by step by `load_policy`, the state passed
    from one step to the next, give enjoy's."""
    import rlrun
    from rlrun import seeding
    from rlrun.enjoy import enjoy
    from rlrun.registry import Registry
    from rlrun.session.evaluation import evaluate

    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    recorded = {e.frame: (e.mean, e.min, e.max) for e in detail.evaluations if e.kind == "train"}
    policy = rlrun.load_policy("latest", home=home, checkpoint="latest")
    assert policy.recurrent and policy.checkpoint_frame == frames
    env = policy.make_env()
    again = evaluate(
        policy.agent, env, seed=detail.sessions[0].seed, frame=frames, episodes=2, normalizer=policy.normalizer
    )
    assert (again.mean, min(again.returns), max(again.returns)) == recorded[frames]

    result = enjoy("latest", home=home, episodes=2)
    policy = rlrun.load_policy("latest", home=home)
    assert policy.checkpoint_frame == result.checkpoint_frame
    for k, episode in enumerate(result.episodes):
        obs, _ = env.reset(seed=seeding.derive(result.seed, seeding.ENJOY, k))
        total, length, done, state = 0.0, 0, False, None
        while not done:
            action, state = policy.act(obs, state)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, length, done = total + float(reward), length + 1, terminated or truncated
        assert (total, length) == (episode.episode_return, episode.length)
    env.close()
