"""The registry's rules, one by one, on real SQLite files and real dead processes: the status rule
(Python and its SQL rendering agree), runs whose sessions all ended are never crashed (issue 16),
attempts are closed however they end, liveness by the database's clock, the manifest round trip,
and one schema (records, ORM tables and migrations agree)."""

from __future__ import annotations

import itertools
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlrun import paths
from rlrun.errors import RegistryError
from rlrun.registry import (
    Registry,
    RunRecord,
    SessionRecord,
    read_manifest,
    records,
    run_status,
    stale_after_seconds,
)
from rlrun.registry.liveness import reported_run_status

HERE = socket.gethostname()
ENDED = ("finished", "failed", "preempted")


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with Registry.open(tmp_path / "home") as opened:
        yield opened


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def make_run(
    registry: Registry, run_id: str, *, sessions: int = 2, max_frame: int = 1000, pid: int | None = None
) -> RunRecord:
    return registry.create_run(
        run_id=run_id,
        name=None,
        spec_name="reinforce_cartpole",
        algorithm="reinforce",
        env_id="CartPole-v1",
        max_frame=max_frame,
        seed=7,
        num_sessions=sessions,
        spec_json=json.dumps({"name": "x"}),
        host=HERE,
        pid=os.getpid() if pid is None else pid,
    )


def sessions(registry: Registry, run_id: str) -> list[SessionRecord]:
    return registry.get_run(run_id).sessions


def set_columns(registry: Registry, table: str, row_id: int | str, **values: Any) -> None:
    """Write columns behind the registry's back (to age a heartbeat, or reopen a run as a launcher
    killed before the registry closed runs in finish_session would have left it)."""
    assignments = ", ".join(f"{column} = :{column}" for column in values)
    with registry._transaction(write=True) as tx:
        tx.execute(f"UPDATE {table} SET {assignments} WHERE id = :id", {**values, "id": row_id})


def reported(registry: Registry, run_id: str) -> dict[str, Any]:
    """Every way a reader sees the run's status: they must agree."""
    listed = {s.id: s.status for s in registry.list_runs(limit=None)}
    detail = registry.get_run(run_id)
    by_filter = [
        status
        for status in records.LISTED_RUN_STATUSES
        if run_id in {s.id for s in registry.list_runs(status=status, limit=None)}
    ]
    assert by_filter == [detail.run.status], by_filter
    assert registry.count_runs(detail.run.status) >= 1
    assert registry.resolve(run_id).status == detail.run.status
    assert listed[run_id] == detail.run.status
    return {"run": detail.run.status, "sessions": [s.status for s in detail.sessions]}


# ---- the status rule ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        (["finished"], "finished"),
        (["finished", "finished"], "finished"),
        (["finished", "failed"], "failed"),
        (["preempted", "failed"], "failed"),
        (["finished", "preempted"], "preempted"),
        (["finished", "running"], "running"),
        (["finished", "crashed"], "running"),  # crashed work waits for `rlrun resume`
        (["failed", "running"], "failed"),
        (["pending"], "running"),
    ],
)
def test_run_status_from_sessions(statuses: list[str], expected: str) -> None:
    assert run_status(statuses) == expected


@pytest.mark.parametrize(
    ("stored", "statuses", "expected"),
    [
        ("running", ["running", "finished"], "running"),
        ("running", ["pending", "crashed"], "running"),
        ("running", ["finished", "crashed"], "crashed"),
        ("running", ["finished", "finished"], "finished"),  # issue 16: never crashed
        ("running", ["finished", "preempted"], "preempted"),
        ("running", ["failed", "finished"], "failed"),
        ("finished", ["finished", "crashed"], "finished"),  # a stored end stands
        ("preempted", ["finished", "finished"], "preempted"),
    ],
)
def test_reported_run_status(stored: str, statuses: list[str], expected: str) -> None:
    assert reported_run_status(stored, statuses) == expected


def test_the_sql_rendering_of_the_rule_agrees_with_python(registry: Registry) -> None:
    """Listings and filters settle runs in SQL; `show` in Python. Every combination of two ended
    sessions, on a stored-running run whose launcher is gone, reads the same both ways."""
    gone = dead_pid()
    for n, combination in enumerate(itertools.product(ENDED, repeat=2)):
        run = make_run(registry, f"ka{n:08d}", pid=gone)
        for session, status in zip(sessions(registry, run.id), combination, strict=True):
            registry.finish_session(session.id, status=status, frame=1, episode=1, opt_step=1)
        set_columns(registry, "runs", run.id, status="running", finished_at=None)  # as if never closed
        assert reported(registry, run.id)["run"] == run_status(combination), combination


# ---- issue 16: a run whose sessions all ended is never crashed -------------------------------


def test_killed_between_finish_session_and_finish_run(registry: Registry) -> None:
    gone = dead_pid()
    run = make_run(registry, "ka00000001", pid=gone)
    for session in sessions(registry, run.id):
        registry.start_session(session.id, host=HERE, pid=gone)
        registry.finish_session(session.id, status="finished", frame=1000, episode=9, opt_step=9)
    # Closed by the last finish_session, in the same transaction: nothing left to call crashed.
    assert scalar(registry, f"SELECT status FROM runs WHERE id = '{run.id}'") == "finished"
    assert scalar(registry, f"SELECT finished_at FROM runs WHERE id = '{run.id}'") is not None
    assert reported(registry, run.id) == {"run": "finished", "sessions": ["finished", "finished"]}
    # A row left running by an older rlrun (or any writer that did not close it): decided on read.
    set_columns(registry, "runs", run.id, status="running", finished_at=None)
    assert reported(registry, run.id) == {"run": "finished", "sessions": ["finished", "finished"]}
    assert registry.count_runs("crashed") == 0


def test_a_healthy_run_that_is_closing_is_not_crashed(registry: Registry) -> None:
    """Its sessions are done and its launcher (alive) has not yet recorded the end."""
    run = make_run(registry, "ka00000001", pid=os.getpid())
    for session in sessions(registry, run.id):
        registry.start_session(session.id, host=HERE, pid=os.getpid())
        registry.finish_session(session.id, status="finished", frame=1000, episode=9, opt_step=9)
    set_columns(registry, "runs", run.id, status="running", finished_at=None)
    assert reported(registry, run.id)["run"] == "finished"


def _final_snapshot(registry: Registry, session: SessionRecord, frame: int, kind: str = "best+final") -> None:
    registry.add_checkpoint(session.id, frame=frame, kind=kind, path=f"p{session.id}-{frame}", sha256="0", size_bytes=1)


def test_killed_just_before_finish_session(registry: Registry) -> None:
    """The final snapshot is registered, then the process dies before recording its end: the
    session row still says running, its frame is the last heartbeat's (short of the target),
    and its heartbeat goes stale. The registered final snapshot is the proof the work is done."""
    gone = dead_pid()
    run = make_run(registry, "ka00000001", sessions=1, max_frame=1000, pid=gone)
    (session,) = sessions(registry, run.id)
    registry.start_session(session.id, host=HERE, pid=gone)
    registry.heartbeat(session.id, frame=960, episode=9, opt_step=9)
    _final_snapshot(registry, session, 1000)
    set_columns(registry, "sessions", session.id, heartbeat_at=time.time() - stale_after_seconds() - 60)
    assert reported(registry, run.id) == {"run": "finished", "sessions": ["finished"]}
    assert registry.get_session(run.id, 0).status == "finished"
    assert registry.live_session(run.id) is None


def test_the_heartbeat_frame_alone_proves_nothing(registry: Registry) -> None:
    """A heartbeat at the target, but no final snapshot (killed while writing it): crashed, so
    `rlrun resume` redoes the end from the newest snapshot."""
    gone = dead_pid()
    run = make_run(registry, "ka00000001", sessions=1, max_frame=1000, pid=gone)
    (session,) = sessions(registry, run.id)
    registry.start_session(session.id, host=HERE, pid=gone)
    registry.heartbeat(session.id, frame=1000, episode=9, opt_step=9)
    _final_snapshot(registry, session, 800, kind="periodic")
    assert reported(registry, run.id) == {"run": "crashed", "sessions": ["crashed"]}


def test_a_final_snapshot_short_of_a_new_target_is_not_the_end(registry: Registry) -> None:
    """Resumed with a larger budget: the old final snapshot no longer reaches the target."""
    gone = dead_pid()
    run = make_run(registry, "ka00000001", sessions=1, max_frame=1000, pid=gone)
    (session,) = sessions(registry, run.id)
    _final_snapshot(registry, session, 1000)
    registry.reopen_run(run.id, host=HERE, pid=gone, max_frame=2000)
    registry.start_session(session.id, host=HERE, pid=gone)
    assert reported(registry, run.id) == {"run": "crashed", "sessions": ["crashed"]}


def test_a_session_writing_its_end_still_counts_as_at_work_for_resume(registry: Registry) -> None:
    run = make_run(registry, "ka00000001", sessions=1, max_frame=1000)
    (session,) = sessions(registry, run.id)
    registry.start_session(session.id, host=HERE, pid=os.getpid())
    _final_snapshot(registry, session, 1000)
    assert registry.get_run(run.id).sessions[0].status == "finished"
    live = registry.live_session(run.id)
    assert live is not None and live.id == session.id  # `rlrun resume` must still wait for it


# ---- attempts are closed however they end ------------------------------------------------------


def test_attempts_are_closed_however_they_end(registry: Registry) -> None:
    run = make_run(registry, "ka00000001", sessions=1)
    (session,) = sessions(registry, run.id)
    first = registry.add_attempt(session.id, kind="train", host=HERE, pid=dead_pid(), start_frame=0)
    # The process died without a word; the next attempt closes the first as crashed.
    second = registry.add_attempt(session.id, kind="resume", host=HERE, pid=os.getpid(), start_frame=100)
    # The second ends by an exception: the session loop records failed, which closes it.
    registry.finish_session(session.id, status="failed", frame=150, episode=2, opt_step=2, error="boom")
    attempts = {a.id: a for a in registry.get_run(run.id).attempts}
    assert attempts[first.id].end_status == "crashed" and attempts[first.id].ended_at is not None
    assert attempts[second.id].end_status == "failed" and attempts[second.id].ended_at is not None
    assert attempts[first.id].ended_at <= attempts[second.id].started_at + 1
    # An attempt already closed keeps its end.
    registry.end_attempt(second.id, status="failed")
    third = registry.add_attempt(session.id, kind="resume", host=HERE, pid=os.getpid(), start_frame=150)
    registry.finish_session(session.id, status="finished", frame=1000, episode=9, opt_step=9)
    ends = [(a.id, a.end_status) for a in registry.get_run(run.id).attempts]
    assert ends == [(first.id, "crashed"), (second.id, "failed"), (third.id, "finished")]
    manifest = read_manifest(paths.run_dir(registry.home, run.id))
    assert [a["end_status"] for a in manifest.attempts] == ["crashed", "failed", "finished"]


def test_an_attempt_found_inexact_while_running_is_marked_approximate(registry: Registry) -> None:
    """A GPU op without a deterministic kernel is found mid-attempt: the open attempt becomes
    approximate, its reason joins whatever note the attempt began with, and the manifest follows."""
    run = make_run(registry, "ka00000002", sessions=2)
    s0, s1 = sessions(registry, run.id)
    exact = registry.add_attempt(s0.id, kind="train", host=HERE, pid=os.getpid(), start_frame=0)
    noted = registry.add_attempt(s1.id, kind="resume", host=HERE, pid=os.getpid(), start_frame=0, note="env: captured")
    registry.mark_attempt_approximate(exact.id, reason="op_a has no deterministic kernel")
    registry.mark_attempt_approximate(noted.id, reason="op_b has no deterministic kernel")
    attempts = {a.id: a for a in registry.get_run(run.id).attempts}
    assert (attempts[exact.id].approximate, attempts[exact.id].note) == (True, "op_a has no deterministic kernel")
    assert (attempts[noted.id].approximate, attempts[noted.id].note) == (
        True,
        "env: captured; op_b has no deterministic kernel",
    )
    manifest = read_manifest(paths.run_dir(registry.home, run.id))
    assert [(a["approximate"], a["note"]) for a in manifest.attempts] == [
        (True, "op_a has no deterministic kernel"),
        (True, "env: captured; op_b has no deterministic kernel"),
    ]
    with pytest.raises(RegistryError, match="no attempt with id 999"):
        registry.mark_attempt_approximate(999, reason="x")


# ---- the database's clock ----------------------------------------------------------------------


def test_liveness_uses_the_database_clock(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose clock runs an hour ahead neither stamps nor judges heartbeats by it."""
    run = make_run(registry, "ka00000001", sessions=1)
    (session,) = sessions(registry, run.id)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    registry.start_session(session.id, host=HERE, pid=os.getpid())
    registry.heartbeat(session.id, frame=10, episode=1, opt_step=1)
    assert reported(registry, run.id) == {"run": "running", "sessions": ["running"]}
    beat = registry.get_session(run.id, 0).heartbeat_at
    assert beat is not None and abs(beat - real()) < 5
    assert abs(registry.get_run(run.id).run.created_at - real()) < 5
    monkeypatch.setattr(time, "time", real)
    # And staleness is the database's judgement too: an old heartbeat is stale whatever the host says.
    set_columns(registry, "sessions", session.id, heartbeat_at=real() - stale_after_seconds() - 5)
    monkeypatch.setattr(time, "time", lambda: real() - 3600)
    assert reported(registry, run.id) == {"run": "crashed", "sessions": ["crashed"]}


# ---- the manifest ------------------------------------------------------------------------------


def test_manifest_round_trip(registry: Registry) -> None:
    run = make_run(registry, "ka00000001", sessions=2)
    s0, s1 = sessions(registry, run.id)
    registry.add_attempt(s0.id, kind="train", host=HERE, pid=1, start_frame=0, approximate=True, note="why")
    registry.add_spec_revision(run.id, frame=500, spec_json=json.dumps({"name": "y"}), diff_json='{"a": 1}')
    registry.add_evaluation(s1.id, frame=100, mean=1.5, std=0.0, min=1.5, max=1.5, episodes=1, kind="enjoy")
    registry.finish_session(s0.id, status="finished", frame=1000, episode=9, opt_step=9)
    manifest = read_manifest(paths.run_dir(registry.home, run.id))
    detail = registry.get_run(run.id)
    stored = detail.run._replace(status=scalar(registry, f"SELECT status FROM runs WHERE id = '{run.id}'"))
    # run.json names no home: a folder copied elsewhere would carry a stale one (the registry that
    # imports or rebuilds it records the home it was read in)
    assert detail.run.home is not None
    assert manifest.format == 2 and manifest.run == stored._replace(home=None)
    assert [s["index"] for s in manifest.sessions] == [0, 1]
    assert [s["status"] for s in manifest.sessions] == ["finished", "pending"]
    assert [(r["revision"], r["frame"], json.loads(r["spec_json"])) for r in manifest.spec_revisions] == [
        (r.revision, r.frame, json.loads(r.spec_json)) for r in detail.spec_revisions
    ]
    assert manifest.spec_revisions[1]["diff_json"] == detail.spec_revisions[1].diff_json
    assert [(e["kind"], e["mean"]) for e in manifest.evaluations] == [("enjoy", 1.5)]
    assert manifest.attempts[0]["note"] == "why" and manifest.attempts[0]["approximate"] is True


def scalar(registry: Registry, sql: str) -> Any:
    with registry._transaction(write=False) as tx:
        return tx.rows(sql)[0][0]


# ---- one schema --------------------------------------------------------------------------------

# Record fields that are not columns of the record's own table (joined in from sessions).
_JOINED = {"run_id", "session_index"}
_RECORD_OF_TABLE = {
    "runs": (records.RunRecord, records.RUN_COLUMNS),
    "sessions": (records.SessionRecord, records.SESSION_COLUMNS),
    "checkpoints": (records.CheckpointRecord, None),
    "evaluations": (records.EvaluationRecord, None),
    "spec_revisions": (records.SpecRevisionRecord, None),
    "attempts": (records.AttemptRecord, None),
    "searches": (records.SearchRecord, records.SEARCH_COLUMNS),
    "trials": (records.TrialRecord, records.TRIAL_COLUMNS),
}


def _migrated_columns(tmp_path: Path) -> dict[str, dict[str, bool]]:
    """Column -> nullable, per table, of a database built by running every migration from empty."""
    from rlrun.registry.schema import upgrade_schema
    from rlrun.registry.server import create_registry_engine

    db_file = tmp_path / "migrated.sqlite"
    engine = create_registry_engine(f"sqlite:///{db_file}")
    try:
        upgrade_schema(engine)
    finally:
        engine.dispose()
    conn = sqlite3.connect(db_file)
    try:
        return {
            table: {row[1]: not row[3] and not row[5] for row in conn.execute(f"PRAGMA table_info({table})")}
            for table in _RECORD_OF_TABLE
        }
    finally:
        conn.close()


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def test_records_tables_and_migrations_agree(tmp_path: Path) -> None:
    from rlrun.registry.tables import Base

    migrated = _migrated_columns(tmp_path)
    for table, (record, column_list) in _RECORD_OF_TABLE.items():
        declared = {c.name: bool(c.nullable) and not c.primary_key for c in Base.metadata.tables[table].columns}
        assert declared == migrated[table], table
        hints = typing.get_type_hints(record)
        fields = [("session_index" if f == "index" else f) for f in record._fields]
        own = [f for f in fields if f in declared or f not in _JOINED]
        assert set(own) <= set(declared), (table, set(own) - set(declared))
        missing = set(declared) - set(fields)
        assert not missing, (table, missing)
        for field, name in zip(record._fields, fields, strict=True):
            if name in declared:
                assert _optional(hints[field]) == declared[name], (table, name)
        if column_list is not None:
            assert list(column_list) == fields, table


def test_the_empty_registrys_schema_is_the_tables() -> None:
    """head.sql (what a registry that does not exist yet answers reads from, without SQLAlchemy) is
    generated from the tables; after a change to them, regenerate it as its first lines say."""
    from rlrun.registry.sqlite import HEAD_SQL, SqliteDatabase, empty_database
    from rlrun.registry.tables import sqlite_ddl, sqlite_script

    assert HEAD_SQL.read_text(encoding="utf-8") == sqlite_script(), f"{HEAD_SQL} is out of date: regenerate it"
    schemas = []
    for database in (empty_database(), SqliteDatabase(":memory:", schema=sqlite_ddl())):
        schemas.append(sorted(database.connection().execute("SELECT type, name, sql FROM sqlite_master")))
        database.close()
    assert schemas[0] == schemas[1] and len(schemas[0]) > 8


def test_a_full_server_says_what_to_configure() -> None:
    from rlrun.registry.database import explained

    url = "postgresql+psycopg://rlrun:secret@db.example/rlrun"
    for refusal in (
        "FATAL:  sorry, too many clients already",
        "FATAL:  remaining connection slots are reserved for non-replication superuser connections",
    ):
        with pytest.raises(RegistryError) as raised, explained(url, (OSError,)):
            raise OSError(f'connection failed: connection to server at "10.0.0.5", port 5432 failed: {refusal}')
        message = str(raised.value)
        assert "max_connections" in message and "PgBouncer" in message and "secret" not in message


def test_enjoy_prefers_the_checkpoint_labelled_best_when_scores_tie() -> None:
    """Issue 27.11: a periodic checkpoint scoring the same as the best one is not chosen over it."""
    from rlrun.refs import parse_ref
    from rlrun.registry import choose_checkpoint
    from rlrun.registry.records import CheckpointRecord, EvaluationRecord, RunDetail

    run = RunRecord(
        "r1",
        None,
        "reinforce_cartpole",
        "reinforce",
        "CartPole-v1",
        "finished",
        3000,
        1,
        0,
        None,
        None,
        None,
        None,
        0.0,
        1.0,
    )
    session = SessionRecord(1, "r1", 0, 0, "finished", 3000, 10, 10, 500.0, 500.0, None, None, None, 0.0, 1.0, None)
    labels = {1000: "periodic", 2000: "best+periodic", 3000: "periodic+final"}
    checkpoints = [
        CheckpointRecord(i, 1, "r1", 0, frame, kind, f"c{frame}", "0" * 64, 1, 0.0)
        for i, (frame, kind) in enumerate(labels.items())
    ]
    evaluations = [
        EvaluationRecord(i, 1, "r1", 0, frame, "train", mean, 0.0, mean, mean, 2, 0.0)
        for i, (frame, mean) in enumerate({1000: 20.0, 2000: 500.0, 3000: 500.0}.items())
    ]
    detail = RunDetail(run, [session], checkpoints, evaluations, [], [], [])
    chosen = choose_checkpoint(detail, parse_ref("r1"))
    assert (chosen.checkpoint.frame, chosen.checkpoint.kind) == (2000, "best+periodic")
