"""A session rides out a short registry outage: a write (or a session's read) that fails with a
transient error is run again (`Connected._retried`); anything else fails at once.

Real databases throughout: a SQLite file whose write lock another connection holds past the busy
timeout, and a PostgreSQL server whose connections the test kills, once inside a write's own
transaction and, in a real training run, several times while it trains.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zygote
from helpers import builtin_for, cli_env, fast
from same_run import BUDGET, CADENCE, assert_same_run, final_state, reference_state

from rlrun.errors import RegistryError
from rlrun.paths import REGISTRY_FILE
from rlrun.registry import Registry, SessionRecord
from rlrun.registry.database import Conflict, LeaseLost, Transaction
from rlrun.registry.sqlite import SqliteDatabase
from rlrun.testhooks import HEARTBEAT_ENV, SLOW_EVALUATION_ENV

pytest_plugins = ["postgres_server"]

# The test's own clients only: the server's autovacuum worker visits the test's database now and then,
# as the superuser, whom the test's role may not terminate.
KILL_OTHERS = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    " AND backend_type = 'client backend' AND usename = current_user"
)


def new_session(registry: Registry, run_id: str = "ka00000001") -> SessionRecord:
    registry.create_run(
        run_id=run_id,
        name=None,
        spec_name="reinforce_cartpole",
        algorithm="reinforce",
        env_id="CartPole-v1",
        max_frame=1000,
        seed=7,
        num_sessions=1,
        spec_json=json.dumps({"name": "reinforce_cartpole"}),
        host="box",
        pid=42,
    )
    return registry.get_session(run_id, 0)


# ---------------------------------------------------------------------------------------------
# SQLite: a lock held past busy_timeout


@pytest.fixture
def locked_home(tmp_path: Path) -> Iterator[tuple[Registry, sqlite3.Connection, SessionRecord]]:
    """A registry file whose busy timeout is 50 ms, and a second connection that holds its write
    lock (BEGIN IMMEDIATE) until the test lets go."""
    home = tmp_path / "home"
    with Registry.open(home) as setup:
        session = new_session(setup)
    file = home / REGISTRY_FILE
    registry = Registry(home, f"sqlite:///{file}", SqliteDatabase(str(file), busy_timeout=0.05))
    holder = sqlite3.connect(file, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    yield registry, holder, session
    if holder.in_transaction:
        holder.execute("ROLLBACK")
    holder.close()
    registry.close()


def test_a_write_locked_out_past_the_busy_timeout_waits_for_the_lock(
    locked_home: tuple[Registry, sqlite3.Connection, SessionRecord],
) -> None:
    registry, holder, session = locked_home
    released = threading.Event()

    def release() -> None:
        holder.execute("COMMIT")
        released.set()

    threading.Timer(0.5, release).start()  # ten busy timeouts later
    registry.heartbeat(session.id, frame=64, episode=3, opt_step=2)
    assert released.is_set(), "the heartbeat was written while the other connection held the lock"
    assert registry.get_session(session.run_id, 0).frame == 64


def test_without_retries_the_same_lock_fails_the_write(
    locked_home: tuple[Registry, sqlite3.Connection, SessionRecord],
) -> None:
    registry, _, session = locked_home
    registry.retry_seconds = 0
    with pytest.raises(RegistryError, match="locked"):
        registry.heartbeat(session.id, frame=64, episode=3, opt_step=2)


def test_a_non_transient_error_is_not_retried(tmp_path: Path) -> None:
    """A broken constraint, bad SQL and a lost lease each end the write on its first try (with
    the default retry budget of a minute, a retried one would loop)."""
    with Registry.open(tmp_path / "home") as registry:
        session = new_session(registry)
        tries: list[str] = []

        def once(sql: str) -> Callable[[Transaction], None]:
            def body(tx: Transaction) -> None:
                tries.append(sql)
                tx.execute(sql, {"run_id": session.run_id})

            return body

        duplicate = (
            "INSERT INTO sessions (run_id, session_index, seed, status, frame, episode, opt_step)"
            " VALUES (:run_id, 0, 1, 'pending', 0, 0, 0)"
        )
        with pytest.raises(Conflict):
            registry._write(once(duplicate))
        with pytest.raises(RegistryError, match="no such table"):
            registry._write(once("UPDATE no_such_table SET x = 1"))
        assert len(tries) == 2

        lease = registry.acquire_lease(session.id)
        registry.acquire_lease(session.id)  # a newer attempt takes the session over
        registry.fence(session.id, lease)
        flushed: list[int] = []
        with pytest.raises(LeaseLost):
            registry.heartbeat(session.id, frame=9, episode=1, opt_step=1, publish=lambda: flushed.append(1))
        assert flushed == [] and registry.get_session(session.run_id, 0).frame == 0


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_write_run_again_after_it_committed_is_recorded_once(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """What a retry does when the earlier try's COMMIT went through but its answer was lost: the
    same checkpoint and training evaluation, recorded again, find their rows."""
    url = request.getfixturevalue("postgres_url") if backend == "postgresql" else None
    with Registry.open(tmp_path / "home", url) as registry:
        session = new_session(registry)
        checkpoint: dict[str, Any] = dict(frame=64, kind="periodic", path="ka/s0/f64", sha256="ab", size_bytes=1)
        evaluation: dict[str, Any] = dict(frame=64, mean=9.5, std=0.5, min=9.0, max=10.0, episodes=2)
        first = registry.add_checkpoint(session.id, **checkpoint)
        assert registry.add_checkpoint(session.id, **checkpoint) == first
        scored = registry.add_evaluation(session.id, **evaluation)
        assert registry.add_evaluation(session.id, **evaluation) == scored
        detail = registry.get_run(session.run_id)
        assert len(detail.checkpoints) == 1 and len(detail.evaluations) == 1


# ---------------------------------------------------------------------------------------------
# PostgreSQL: connections killed


def kill_connections(url: str) -> int:
    """Terminate every other connection to the database; how many there were."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        return sum(1 for (done,) in conn.execute(KILL_OTHERS) if done)


def test_a_write_whose_connection_dies_inside_it_is_applied_once(postgres_url: str, tmp_path: Path) -> None:
    """The registry's connection is killed in the middle of a heartbeat and of a checkpoint's
    transaction (from their publish step): each is run again and lands once."""
    with Registry.open(tmp_path, postgres_url) as registry:
        session = new_session(registry)
        published: list[str] = []

        def publish(what: str) -> Callable[[], None]:
            def step() -> None:
                published.append(what)
                if published.count(what) == 1:
                    assert kill_connections(postgres_url) >= 1  # this transaction's connection among them

            return step

        registry.heartbeat(session.id, frame=64, episode=3, opt_step=2, publish=publish("flush"))
        registry.add_checkpoint(
            session.id,
            frame=64,
            kind="periodic",
            path="ka/s0/f64",
            sha256="ab",
            size_bytes=1,
            publish=publish("rename"),
        )
        assert published == ["flush", "flush", "rename", "rename"]
        assert registry.get_session(session.run_id, 0).frame == 64
        assert [c.path for c in registry.checkpoints(session.id)] == ["ka/s0/f64"]


def test_without_retries_a_killed_connection_fails_the_write(postgres_url: str, tmp_path: Path) -> None:
    with Registry.open(tmp_path, postgres_url) as registry:
        session = new_session(registry)
        registry.retry_seconds = 0

        def kill() -> None:
            assert kill_connections(postgres_url) >= 1

        with pytest.raises(RegistryError, match="cannot be used"):
            registry.heartbeat(session.id, frame=64, episode=3, opt_step=2, publish=kill)
        assert registry.get_session(session.run_id, 0).frame == 0


@pytest.mark.slow
def test_a_training_run_rides_out_killed_connections(
    postgres_url: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real training session whose server connections are killed again and again while it
    trains finishes, records each evaluation and checkpoint once, and ends bit for bit where a
    run on an undisturbed registry ends."""
    spec = builtin_for("ppo")
    straight = reference_state(tmp_path_factory, spec, "--frames", str(BUDGET))

    home = tmp_path / "killed"
    # Each evaluation 0.3 s longer (nothing trained changes): the run lasts some seconds however
    # idle the machine, where on a quiet one its 6,000 frames had ended after two kills.
    env = {**cli_env(home), "RLRUN_DB": postgres_url, HEARTBEAT_ENV: "0.05", SLOW_EVALUATION_ENV: "0.3"}
    process = zygote.start(
        ["train", spec, *CADENCE, *fast(spec), "--frames", str(BUDGET)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    killed = kills = 0
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        if training(postgres_url):  # the session's own writes at its start are not retried
            found = kill_connections(postgres_url)
            killed, kills = killed + found, kills + (found > 0)
        time.sleep(0.2)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert kills >= 3, f"the run ended after {kills} kills; give it a longer budget"

    monkeypatch.setenv("RLRUN_DB", postgres_url)
    assert_same_run(straight, final_state(home))
    with Registry.open(home, postgres_url, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    assert detail.run.status == "finished"
    evaluated = [(e.session_index, e.frame, e.kind) for e in detail.evaluations]
    checkpointed = [c.path for c in detail.checkpoints]
    assert len(evaluated) == len(set(evaluated)) and len(checkpointed) == len(set(checkpointed))
    assert [(a.kind, a.end_status) for a in detail.attempts] == [("train", "finished")]


def training(url: str) -> bool:
    """Whether the run's session is past its start (recorded running, its first frame reported)."""
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('sessions')").fetchone() == (None,):
            return False  # no schema yet
        return bool(conn.execute("SELECT 1 FROM sessions WHERE status = 'running' AND frame > 0").fetchall())
