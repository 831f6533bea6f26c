"""The run registry: the one module that owns the database.

It indexes runs, sessions, checkpoints, evaluations, spec revisions and attempts, in a SQLite file
inside the runs home by default, or in any database SQLAlchemy reaches through `RLRUN_DB`
(PostgreSQL is tested). Every method runs one short transaction of plain, portable SQL and returns
immutable records, so callers can keep results after the transaction is over.

Fast to open: on SQLite the registry talks to the file through the standard library's sqlite3 and
checks the schema revision with one query, so `rlrun ls` and `rlrun show` never import SQLAlchemy,
Alembic, torch or gymnasium. SQLAlchemy and Alembic (`rlrun.registry_schema`) load only to create
or upgrade the schema, or to reach a server. A local file at an older schema revision is upgraded
on open, under a lock, after a backup copy; a server database only by `rlrun db upgrade`; a
database newer than this code is refused.

Statuses are reported as they are, not only as stored: a run or session whose process died
without a word reads as "crashed", computed on read from heartbeats and pids (see _Liveness).

Each run folder carries a manifest (`run.json`): the run's row, its sessions, spec revisions,
attempts and non-training evaluations. Every write that changes one of those rewrites it inside
the same transaction, so the manifest never lags the registry and `rlrun db rebuild` can restore
the registry from the folders (checkpoints and training evaluations come from the snapshots).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from rlrun import paths
from rlrun.errors import BadInput, RegistryError, RunReferenceError
from rlrun.refs import STATUSES, RunFilter, RunRef, like_pattern, parse_ref

if TYPE_CHECKING:
    from rlrun.registry_schema import ServerDatabase

# The Alembic head this code was written against; a test keeps it equal to the migrations' head.
SCHEMA_HEAD = "0002"
VERSION_TABLE = "rlrun_alembic_version"
MANIFEST = "run.json"
MANIFEST_FORMAT = 2

# Stored statuses. "crashed" is never stored: reads report a "running" (or "pending") row as
# crashed when its process is gone (see _Liveness), so a killed process needs nobody to record it.
CRASHED = "crashed"
RUN_STATUSES = tuple(s for s in STATUSES if s != CRASHED)
SESSION_STATUSES = ("pending", "running", "finished", "failed", "preempted")
# What `list_runs(status=...)` and `count_runs(status)` accept, as reported on read.
LISTED_RUN_STATUSES = STATUSES
_ENDED = ("finished", "failed", "preempted")

# Attempts: every process that works on a session (the first training, each resume or fork).
ATTEMPT_KINDS = ("train", "resume", "fork")
ATTEMPT_END_STATUSES = (*_ENDED, CRASHED)  # crashed: closed by a later attempt that found it open

# Sessions heartbeat every few seconds; one silent for longer than this is reported crashed.
STALE_AFTER_SECONDS = 30.0

_MAX_CANDIDATES = 10
_IN_LIMIT = 500  # beyond this many ids, select by a condition rather than an IN list


# --------------------------------------------------------------------------------------------
# Records returned to callers: immutable named tuples whose fields are the tables' columns in the
# tables' order, so a row selected with the matching column list below becomes a record as it is.
# (Named tuples rather than dataclasses: a dozen dataclasses take longer to create than a whole
# `rlrun ls` may spend on the registry.) `to_json()` gives plain JSON types, for `--json`.


class RunRecord(NamedTuple):
    id: str
    name: str | None
    spec_name: str
    algorithm: str
    env_id: str
    status: str
    max_frame: int
    num_sessions: int
    seed: int
    parent_id: str | None
    host: str | None
    pid: int | None
    error: str | None
    created_at: float
    finished_at: float | None

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class SessionRecord(NamedTuple):
    id: int
    run_id: str
    index: int  # type: ignore[assignment]  # the session's number, shadowing tuple.index on purpose
    seed: int
    status: str
    frame: int
    episode: int
    opt_step: int
    best_eval: float | None
    last_eval: float | None
    host: str | None
    pid: int | None
    heartbeat_at: float | None
    started_at: float | None
    finished_at: float | None
    error: str | None

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class CheckpointRecord(NamedTuple):
    id: int
    session_id: int
    run_id: str
    session_index: int
    frame: int
    kind: str
    path: str
    sha256: str
    size_bytes: int
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class EvaluationRecord(NamedTuple):
    id: int
    session_id: int
    run_id: str
    session_index: int
    frame: int
    kind: str
    mean: float
    std: float
    min: float
    max: float
    episodes: int
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class SpecRevisionRecord(NamedTuple):
    id: int
    run_id: str
    revision: int
    frame: int
    spec_json: str
    diff_json: str | None
    created_at: float

    def to_json(self) -> dict[str, Any]:
        """The spec and diff as JSON values rather than strings holding JSON."""
        data = self._asdict()
        data["spec"] = json.loads(data.pop("spec_json"))
        diff = data.pop("diff_json")
        data["diff"] = None if diff is None else json.loads(diff)
        return data


class AttemptRecord(NamedTuple):
    id: int
    run_id: str
    session_id: int
    session_index: int
    kind: str
    host: str | None
    pid: int | None
    start_frame: int
    started_at: float
    ended_at: float | None
    end_status: str | None
    approximate: bool
    note: str | None

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class RunSummary(NamedTuple):
    row: int  # 1-based position in `rlrun ls` order under the same filters
    id: str
    name: str | None
    spec_name: str
    algorithm: str
    env_id: str
    status: str
    num_sessions: int
    frames_done: int
    frames_target: int
    best_eval: float | None
    created_at: float
    finished_at: float | None

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class RunDetail(NamedTuple):
    run: RunRecord
    sessions: list[SessionRecord]
    checkpoints: list[CheckpointRecord]
    evaluations: list[EvaluationRecord]
    spec_revisions: list[SpecRevisionRecord]
    attempts: list[AttemptRecord]  # oldest first
    forks: list[str]  # ids of the runs forked from this one

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run.to_json(),
            "sessions": [s.to_json() for s in self.sessions],
            "checkpoints": [c.to_json() for c in self.checkpoints],
            "evaluations": [e.to_json() for e in self.evaluations],
            "spec_revisions": [r.to_json() for r in self.spec_revisions],
            "attempts": [a.to_json() for a in self.attempts],
            "forks": list(self.forks),
        }




# Column lists in record order. Sessions call their index column session_index.
RUN_COLUMNS = (
    "id", "name", "spec_name", "algorithm", "env_id", "status", "max_frame", "num_sessions", "seed",
    "parent_id", "host", "pid", "error", "created_at", "finished_at",
)  # fmt: skip
SESSION_COLUMNS = (
    "id", "run_id", "session_index", "seed", "status", "frame", "episode", "opt_step", "best_eval",
    "last_eval", "host", "pid", "heartbeat_at", "started_at", "finished_at", "error",
)  # fmt: skip
_RUN = ", ".join(f"r.{c}" for c in RUN_COLUMNS)
_SESSION = ", ".join(f"s.{c}" for c in SESSION_COLUMNS)
_CHECKPOINT = (
    "c.id, c.session_id, s.run_id, s.session_index, c.frame, c.kind, c.path, c.sha256, c.size_bytes, c.created_at"
)
_EVALUATION = (
    "e.id, e.session_id, s.run_id, s.session_index, e.frame, e.kind, e.mean, e.std, e.min, e.max, e.episodes,"
    " e.created_at"
)
_REVISION = "v.id, v.run_id, v.revision, v.frame, v.spec_json, v.diff_json, v.created_at"
_ATTEMPT = (
    "a.id, a.run_id, a.session_id, s.session_index, a.kind, a.host, a.pid, a.start_frame, a.started_at,"
    " a.ended_at, a.end_status, a.approximate, a.note"
)
_NEWEST_FIRST = "r.created_at DESC, r.id DESC"


def _attempt_record(row: tuple[Any, ...]) -> AttemptRecord:
    record = AttemptRecord(*row)
    return record._replace(approximate=bool(record.approximate))  # SQLite keeps booleans as 0 and 1


def _insert_sql(table: str, columns: Iterable[str]) -> str:
    names = list(columns)
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(':' + n for n in names)})"


def _in_list(prefix: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """`:p0, :p1, ...` and their values, for an IN (...) list."""
    params = {f"{prefix}{i}": value for i, value in enumerate(values)}
    return ", ".join(f":{name}" for name in params), params


# --------------------------------------------------------------------------------------------
# Liveness. A process that is killed (SIGKILL, OOM, a lost node) records nothing, so "crashed" is
# computed on read, never written: a stored "running" session whose heartbeat is older than
# STALE_AFTER_SECONDS, or that ran on this host under a pid that no longer exists, is crashed; so
# is a "pending" session whose launcher (runs.host/pid) is gone from this host, or that has shown
# no sign of life (its heartbeat, else the run's creation) for as long. A stored "running" run is
# crashed when none of its sessions is still running or pending. Reads need no lock and no write.


def _pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (a zombie counts as dead)."""
    if pid <= 0:
        return True  # not a process id (0 and -1 would signal groups): cannot tell, so not dead
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    except OverflowError:
        return False  # beyond any pid
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """A killed child that its parent has not reaped yet still answers kill(pid, 0) (Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # "pid (comm) state ...": comm may hold spaces and parentheses, so split after the last ")".
    fields = stat.rpartition(")")[2].split()
    return bool(fields) and fields[0] == "Z"


class _Liveness:
    """One reading of the clock and the host name, shared by every status computed in one call."""

    def __init__(self) -> None:
        self.now = time.time()
        self.cutoff = self.now - STALE_AFTER_SECONDS
        self._here: str | None = None
        self._alive: dict[int, bool] = {}

    def fresh(self, timestamp: float | None) -> bool:
        return timestamp is not None and timestamp >= self.cutoff

    @property
    def here(self) -> str:
        if self._here is None:
            # The host name socket.gethostname() records (both read the kernel's node name),
            # without importing socket for it.
            self._here = os.uname().nodename
        return self._here

    def dead_here(self, host: str | None, pid: int | None) -> bool:
        """Known dead: it ran on this host and its pid is gone. Other hosts cannot be checked."""
        if pid is None or host != self.here:
            return False
        if pid not in self._alive:
            self._alive[pid] = _pid_alive(pid)
        return not self._alive[pid]

    def session_status(
        self, status: str, host: str | None, pid: int | None, heartbeat_at: float | None,
        run_host: str | None, run_pid: int | None, run_created_at: float,
    ) -> str:  # fmt: skip
        if status == "running":
            alive = self.fresh(heartbeat_at) and not self.dead_here(host, pid)
            return status if alive else CRASHED
        if status == "pending":
            since = heartbeat_at if heartbeat_at is not None else run_created_at
            alive = self.fresh(since) and not self.dead_here(run_host, run_pid)
            return status if alive else CRASHED
        return status

    def session_of(self, session: SessionRecord, run: RunRecord) -> str:
        return self.session_status(
            session.status, session.host, session.pid, session.heartbeat_at, run.host, run.pid, run.created_at
        )

    @staticmethod
    def run_status(stored: str, session_statuses: Sequence[str]) -> str:
        if stored == "running" and not any(s in ("running", "pending") for s in session_statuses):
            return CRASHED
        return stored

    # Sessions that pass the time test (the pid test needs Python): a pre-filter in SQL.
    SQL_MAYBE_ALIVE = (
        "((s.status = 'running' AND s.heartbeat_at >= :cutoff)"
        " OR (s.status = 'pending' AND COALESCE(s.heartbeat_at, r.created_at) >= :cutoff))"
    )


def _reported(stored: str, alive: bool) -> str:
    """A run's status as reported: a stored-running run with no live session is crashed."""
    return CRASHED if stored == "running" and not alive else stored


# --------------------------------------------------------------------------------------------
# SQLite through the standard library. WAL lets readers and the writer work side by side, and
# every write transaction takes the write lock up front (BEGIN IMMEDIATE) and waits its turn:
# a transaction that starts as a reader and then writes cannot be helped by busy_timeout
# (SQLite answers SQLITE_BUSY at once to avoid a deadlock), which is where "database is locked"
# comes from under parallel writers.


class _Transaction(Protocol):
    dialect: str

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]: ...
    def execute(self, sql: str, params: dict[str, Any] | None = None) -> int: ...
    def insert(self, sql: str, params: dict[str, Any]) -> int: ...


class _Database(Protocol):
    @property
    def integrity_errors(self) -> tuple[type[Exception], ...]: ...
    @property
    def unusable_errors(self) -> tuple[type[Exception], ...]: ...
    def transaction(self, write: bool) -> Any: ...
    def close(self) -> None: ...


class _SqliteTransaction:
    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params or {}).fetchall()

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> int:
        return self.conn.execute(sql, params or {}).rowcount

    def insert(self, sql: str, params: dict[str, Any]) -> int:
        row_id = self.conn.execute(sql, params).lastrowid
        assert row_id is not None
        return row_id


_PRAGMAS = (
    "PRAGMA busy_timeout=30000",  # wait for the lock (up to 30 s) rather than fail at once
    "PRAGMA synchronous=NORMAL",  # durable at checkpoints, safe in WAL mode
    "PRAGMA foreign_keys=ON",  # ON DELETE CASCADE; SQLite leaves it off by default
)


class _SqliteDatabase:
    """One connection to a SQLite file (or memory), opened on first use, one transaction at a time."""

    integrity_errors: tuple[type[Exception], ...] = (sqlite3.IntegrityError,)
    unusable_errors: tuple[type[Exception], ...] = (sqlite3.DatabaseError,)

    def __init__(self, target: str, *, schema: Sequence[str] = ()) -> None:
        self.target = target
        self._schema = schema  # statements to run on a new in-memory database
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._wal = False

    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.target, timeout=30, isolation_level=None, check_same_thread=False)
            for pragma in _PRAGMAS:
                conn.execute(pragma)
            for statement in self._schema:
                conn.execute(statement)
            self._conn = conn
        return self._conn

    @contextmanager
    def transaction(self, write: bool) -> Iterator[_SqliteTransaction]:
        with self._lock:
            conn = self.connection()
            if write and not self._wal:
                self._use_wal(conn)
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield _SqliteTransaction(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # the body failed, or COMMIT did (a full disk, say)
                    conn.execute("ROLLBACK")
                raise

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Write-ahead logging, so readers never block the writer nor the writer readers. The mode
        is kept in the file; it is set before the first write, never by a reader (a refused or
        merely listed registry is left byte for byte as it was)."""
        if self.target != ":memory:" and conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
        self._wal = True

    def revision(self) -> str | None:
        """The schema revision in the file, None when it has no schema yet."""
        with self.transaction(write=False) as tx:
            if not tx.rows("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name",
                           {"name": VERSION_TABLE}):  # fmt: skip
                return None
            found = tx.rows(f"SELECT version_num FROM {VERSION_TABLE}")
        return found[0][0] if found else None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (`sqlite:///relative.db`, `sqlite:////abs/path.db`); None for
    in-memory SQLite and other databases. Parsed by hand: no SQLAlchemy on the fast path."""
    scheme, _, rest = url.partition("://")
    if scheme.split("+")[0] != "sqlite":
        return None
    database = rest.partition("?")[0].removeprefix("/")
    return None if database in ("", ":memory:") else Path(database)


def _is_sqlite(url: str) -> bool:
    return url.partition("://")[0].split("+")[0] == "sqlite"


def _label(url: str) -> str:
    """A URL fit to print: the password hidden."""
    file = sqlite_file(url)
    if file is not None:
        return str(file)
    scheme, _, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if at and ":" in credentials:
        credentials = credentials.split(":")[0] + ":***"
    return f"{scheme}://{credentials}{at}{host}"


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock across processes, held while a schema is created or upgraded."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lock_file(db_file: Path) -> Path:
    return db_file.with_name(db_file.name + ".lock")


def _newer_message(label: str, revision: str) -> str:
    return (f"registry at {label} is at schema revision {revision}, newer than this rlrun (head {SCHEMA_HEAD});"
            " upgrade rlrun")


class SchemaState(NamedTuple):
    """Where a registry's schema stands (`rlrun db current`)."""

    label: str
    revision: str | None  # None: no schema yet (or no database file)
    head: str
    exists: bool

    @property
    def up_to_date(self) -> bool:
        return self.revision == self.head


class Upgrade(NamedTuple):
    """What an upgrade did: from and to which revision, and where the copy made first is."""

    label: str
    before: str | None
    after: str
    backup: Path | None


def _backup(db_file: Path, revision: str) -> Path:
    """A consistent copy of the file before its schema changes (sqlite3's online backup, which
    also takes what is still in the write-ahead log)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = db_file.with_name(f"{db_file.name}.{revision}.{stamp}.bak")
    source, copy = sqlite3.connect(db_file), sqlite3.connect(target)
    try:
        source.backup(copy)
    finally:
        copy.close()
        source.close()
    with open(target, "rb") as handle:
        os.fsync(handle.fileno())
    return target


def _upgrade_sqlite(db_file: Path) -> Upgrade | None:
    """Bring a SQLite file to SCHEMA_HEAD under the file lock, copying it first when it holds a
    schema already. None when another process got there first."""
    with _file_lock(_lock_file(db_file)):
        probe = _SqliteDatabase(str(db_file))
        try:
            revision = probe.revision()
        finally:
            probe.close()
        if revision == SCHEMA_HEAD:
            return None
        from rlrun import registry_schema

        if revision is not None and revision not in registry_schema.known_revisions():
            raise RegistryError(_newer_message(str(db_file), revision))
        backup = None if revision is None else _backup(db_file, revision)
        engine = registry_schema.create_registry_engine(f"sqlite:///{db_file}")
        try:
            registry_schema.upgrade_schema(engine)
        finally:
            engine.dispose()
    if backup is not None:
        import logging

        message = "rlrun: upgraded the registry %s from schema %s to %s; the old file is kept at %s"
        logging.getLogger(__name__).warning(message, db_file, revision, SCHEMA_HEAD, backup)
    return Upgrade(str(db_file), revision, SCHEMA_HEAD, backup)


def _open_server(url: str, *, create: bool, upgrade: bool = False) -> tuple[ServerDatabase, Upgrade | None]:
    """A server database at SCHEMA_HEAD: an empty one gets the schema (if `create`), an older one
    is upgraded only when `upgrade` is asked for, a newer one is refused."""
    from rlrun import registry_schema

    database = registry_schema.ServerDatabase(url)
    try:
        with _explained(url, database.unusable_errors):
            with database.engine.connect() as conn:
                revision = registry_schema.revision_on(conn)
            if revision == SCHEMA_HEAD:
                return database, None
            if revision is None and not create:
                raise _NoSchema
            done = _migrate_server(database, url, upgrade=upgrade or revision is None)
        return database, done
    except BaseException:
        database.close()
        raise


class _NoSchema(Exception):
    """A server database without a schema, opened without create: read it as empty."""


def _migrate_server(database: ServerDatabase, url: str, *, upgrade: bool) -> Upgrade | None:
    from rlrun import registry_schema

    with registry_schema.server_schema_lock(database.engine) as conn:
        revision = registry_schema.revision_on(conn)  # another process may have done it meanwhile
        if revision == SCHEMA_HEAD:
            return None
        if revision is not None and revision not in registry_schema.known_revisions():
            raise RegistryError(_newer_message(_label(url), revision))
        if not upgrade:
            raise RegistryError(
                f"registry at {_label(url)} is at schema revision {revision} and this rlrun needs {SCHEMA_HEAD};"
                " back the database up and run `rlrun db upgrade`"
            )
        registry_schema.upgrade_on(conn)
    return Upgrade(_label(url), revision, SCHEMA_HEAD, None)


def _empty_database() -> _SqliteDatabase:
    """An in-memory registry with the schema and no rows: reads where there is no registry yet
    answer empty. (Rare, so it may import SQLAlchemy to write the schema.)"""
    from rlrun.registry_schema import sqlite_ddl

    return _SqliteDatabase(":memory:", schema=sqlite_ddl())


def schema_state(home: Path | str, url: str | None = None) -> SchemaState:
    """The registry's schema revision, read without changing anything."""
    url = url or paths.database_url(Path(home))
    db_file = sqlite_file(url)
    if db_file is not None:
        if not db_file.exists():
            return SchemaState(str(db_file), None, SCHEMA_HEAD, exists=False)
        database = _SqliteDatabase(str(db_file))
        try:
            with _explained(url, database.unusable_errors):
                return SchemaState(str(db_file), database.revision(), SCHEMA_HEAD, exists=True)
        finally:
            database.close()
    from rlrun import registry_schema

    server = registry_schema.ServerDatabase(url)
    try:
        with _explained(url, server.unusable_errors), server.engine.connect() as conn:
            return SchemaState(_label(url), registry_schema.revision_on(conn), SCHEMA_HEAD, exists=True)
    finally:
        server.close()


def upgrade_registry(home: Path | str, url: str | None = None) -> Upgrade | None:
    """Bring the registry to SCHEMA_HEAD (`rlrun db upgrade`); None when it already was. A SQLite
    file is copied first; a server is upgraded in one transaction under an advisory lock."""
    url = url or paths.database_url(Path(home))
    db_file = sqlite_file(url)
    if db_file is not None:
        if not db_file.exists():
            raise RegistryError(f"no registry at {db_file} yet; it is created by `rlrun train`")
        return _upgrade_sqlite(db_file)
    if not _is_sqlite(url):
        database, done = _open_server(url, create=True, upgrade=True)
        database.close()
        return done
    return None


def _format_time(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _check_status(status: str, allowed: Sequence[str], what: str = "status") -> None:
    if status not in allowed:
        raise ValueError(f"{what} {status!r} is not one of {', '.join(allowed)}")


class _Conflict(RegistryError):
    """A write broke a unique or foreign-key constraint: another writer won a race."""


@contextmanager
def _explained(url: str, errors: tuple[type[Exception], ...]) -> Iterator[None]:
    """A database that cannot be used (not a database, unreachable, locked for too long) is one
    line saying so and what to do, not a traceback."""
    try:
        yield
    except RegistryError:
        raise
    except errors as error:
        detail = (str(getattr(error, "orig", None) or error).strip().splitlines() or [type(error).__name__])[0]
        if "locked" in detail:
            advice = "another process held it for more than 30 s; try again"
        elif sqlite_file(url) is not None:
            advice = "if the file is damaged, move it aside and run `rlrun db rebuild` (or restore a .bak copy)"
        else:
            advice = f"check {paths.DB_ENV} and that the server is up"
        raise RegistryError(f"registry at {_label(url)} cannot be used: {detail}; {advice}") from error



def _window(dialect: str, limit: int | None, offset: int) -> tuple[str, dict[str, Any]]:
    """LIMIT / OFFSET clauses (SQLite needs a LIMIT before an OFFSET, PostgreSQL takes none)."""
    if limit is None and not offset:
        return "", {}
    if limit is None:
        return (" LIMIT -1 OFFSET :offset" if dialect == "sqlite" else " OFFSET :offset"), {"offset": offset}
    return " LIMIT :limit OFFSET :offset", {"limit": limit, "offset": offset}


def _as_filter(value: RunFilter | str | None) -> RunFilter:
    """A filter from a filter, a status (the older calling convention) or nothing."""
    if isinstance(value, RunFilter):
        return value
    if value is not None and value not in LISTED_RUN_STATUSES:
        raise ValueError(f"status {value!r} is not one of {', '.join(LISTED_RUN_STATUSES)}")
    return RunFilter(status=value)


def _drop(document: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k not in keys}

# --------------------------------------------------------------------------------------------


class Registry:
    """The runs, sessions, checkpoints, evaluations and spec revisions of one runs home."""

    def __init__(self, home: Path, url: str, database: _Database, *, missing: bool = False,
                 upgrade: Upgrade | None = None) -> None:  # fmt: skip
        self.home = home
        self.url = url
        self._db = database
        self._missing = missing  # opened with create=False where there is no registry yet
        self.upgrade = upgrade  # what opening it did to the schema, if anything

    @classmethod
    def open(cls, home: Path | str, url: str | None = None, *, create: bool = True) -> Registry:
        """Open the registry of `home`, creating or upgrading its schema when needed.

        With create=False and no database file, nothing is written: the registry answers every
        read as empty and refuses writes.
        """
        home = Path(home)
        url = url or paths.database_url(home)
        db_file = sqlite_file(url)
        if db_file is None:
            return cls._open_elsewhere(home, url, create)
        if not db_file.exists() and not create:
            return cls(home, url, _empty_database(), missing=True)
        db_file.parent.mkdir(parents=True, exist_ok=True)
        database = _SqliteDatabase(str(db_file))
        try:
            with _explained(url, database.unusable_errors):
                done = _upgrade_sqlite(db_file) if database.revision() != SCHEMA_HEAD else None
        except BaseException:
            database.close()
            raise
        return cls(home, url, database, upgrade=done)

    @classmethod
    def _open_elsewhere(cls, home: Path, url: str, create: bool) -> Registry:
        if _is_sqlite(url):  # in memory: a registry that lives as long as this object
            return cls(home, url, _empty_database())
        try:
            database, done = _open_server(url, create=create)
        except _NoSchema:
            return cls(home, url, _empty_database(), missing=True)
        return cls(home, url, database, upgrade=done)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[_Transaction]:
        """One transaction (BEGIN IMMEDIATE for writes on SQLite), committed on success."""
        if write and self._missing:
            raise RegistryError(f"no registry at {_label(self.url)}; it is created by `rlrun train`")
        try:
            with _explained(self.url, self._db.unusable_errors), self._db.transaction(write) as tx:
                yield tx
        except self._db.integrity_errors as error:
            raise _Conflict(str(error)) from error

    # ---- writes ------------------------------------------------------------------------------

    def create_run(
        self, *, run_id: str, name: str | None, spec_name: str, algorithm: str, env_id: str,
        max_frame: int, seed: int, num_sessions: int, spec_json: str, host: str | None,
        pid: int | None, parent_id: str | None = None,
    ) -> RunRecord:  # fmt: skip
        """Insert a running run, its pending sessions (seed + i) and spec revision 0.

        `parent_id` links a fork (`rlrun resume --fork`) to the run it started from.
        """
        if num_sessions < 1:
            raise BadInput(f"a run needs at least one session, not {num_sessions}")
        now = time.time()
        run = RunRecord(
            id=run_id, name=name, spec_name=spec_name, algorithm=algorithm, env_id=env_id,
            status="running", max_frame=max_frame, num_sessions=num_sessions, seed=seed,
            parent_id=parent_id, host=host, pid=pid, error=None, created_at=now, finished_at=None,
        )  # fmt: skip
        try:
            with self._transaction(write=True) as tx:
                self._check_new_run(tx, run_id, name, parent_id)
                tx.execute(_insert_sql("runs", RUN_COLUMNS), run._asdict())
                for i in range(num_sessions):
                    tx.insert(
                        "INSERT INTO sessions (run_id, session_index, seed, status, frame, episode, opt_step)"
                        " VALUES (:run_id, :index, :seed, 'pending', 0, 0, 0)",
                        {"run_id": run_id, "index": i, "seed": seed + i},
                    )
                tx.insert(_insert_sql("spec_revisions", ("run_id", "revision", "frame", "spec_json", "created_at")),
                          {"run_id": run_id, "revision": 0, "frame": 0, "spec_json": spec_json, "created_at": now})
                self._sync_manifest(tx, run_id)
        except _Conflict as error:
            # Only reachable when another writer won a race the check above could not see
            # (servers, which have no BEGIN IMMEDIATE), so the culprit is not known here.
            raise BadInput(f"run id {run_id!r} or name {name!r} is already taken") from error
        return run

    @staticmethod
    def _check_new_run(tx: _Transaction, run_id: str, name: str | None, parent_id: str | None) -> None:
        if tx.rows("SELECT 1 FROM runs WHERE id = :id", {"id": run_id}):
            raise RegistryError(f"a run with id {run_id} already exists")
        if parent_id is not None and not tx.rows("SELECT 1 FROM runs WHERE id = :id", {"id": parent_id}):
            raise RegistryError(f"parent run {parent_id} is not in the registry")
        if name is None:
            return
        holder = tx.rows("SELECT id FROM runs WHERE name = :name", {"name": name})
        if holder:
            raise BadInput(
                f"a run named {name!r} already exists (id {holder[0][0]}); choose another --name"
            )

    def _update_session(self, session_id: int, assignments: str, values: dict[str, Any], *,
                        manifest: bool = True) -> None:  # fmt: skip
        with self._transaction(write=True) as tx:
            count = tx.execute(f"UPDATE sessions SET {assignments} WHERE id = :session_id",
                               {**values, "session_id": session_id})  # fmt: skip
            if count == 0:
                raise RegistryError(f"no session with id {session_id} in the registry")
            if manifest:
                self._sync_manifest(tx, self._owner(tx, session_id)[0])

    def start_session(self, session_id: int, *, host: str | None, pid: int | None) -> None:
        """Mark a session running; started_at keeps the first start across resumes."""
        self._update_session(
            session_id,
            "status = 'running', host = :host, pid = :pid, heartbeat_at = :now,"
            " started_at = COALESCE(started_at, :now), finished_at = NULL, error = NULL",
            {"host": host, "pid": pid, "now": time.time()},
        )

    def heartbeat(self, session_id: int, *, frame: int, episode: int, opt_step: int) -> None:
        """Record progress: one UPDATE by primary key (the manifest is left alone: the newest
        snapshot says as much, and the work since would be redone on resume)."""
        self._update_session(
            session_id, "frame = :frame, episode = :episode, opt_step = :opt_step, heartbeat_at = :now",
            {"frame": frame, "episode": episode, "opt_step": opt_step, "now": time.time()}, manifest=False,
        )

    def finish_session(
        self, session_id: int, *, status: str, frame: int, episode: int, opt_step: int,
        error: str | None = None,
    ) -> None:  # fmt: skip
        _check_status(status, _ENDED)
        self._update_session(
            session_id,
            "status = :status, frame = :frame, episode = :episode, opt_step = :opt_step, error = :error,"
            " heartbeat_at = :now, finished_at = :now",
            {"status": status, "frame": frame, "episode": episode, "opt_step": opt_step, "error": error,
             "now": time.time()},
        )  # fmt: skip

    def finish_run(self, run_id: str, *, status: str, error: str | None = None) -> None:
        """End a run: finished, failed, or preempted (stopped by a signal after saving)."""
        _check_status(status, _ENDED)
        self._update_run(run_id, status=status, error=error, finished_at=time.time())

    def reopen_run(
        self, run_id: str, *, host: str | None, pid: int | None, max_frame: int | None = None
    ) -> None:
        """Mark a run running again for `rlrun resume`, optionally with a new frame budget.

        host/pid become those of the resuming process (the launcher that liveness checks).
        """
        values: dict[str, Any] = {"status": "running", "host": host, "pid": pid}
        if max_frame is not None:
            values["max_frame"] = max_frame
        self._update_run(run_id, error=None, finished_at=None, **values)

    def _update_run(self, run_id: str, **values: Any) -> None:
        assignments = ", ".join(f"{column} = :{column}" for column in values)
        with self._transaction(write=True) as tx:
            if tx.execute(f"UPDATE runs SET {assignments} WHERE id = :run_id", {**values, "run_id": run_id}) == 0:
                raise RegistryError(f"no run with id {run_id} in the registry")
            self._sync_manifest(tx, run_id)

    def delete_run(self, run_id: str) -> None:
        """Delete a run and, by cascade, its sessions, checkpoints, evaluations and revisions.
        Its forks stay, unlinked (their manifests are rewritten to say so). Files are the
        caller's: see `rlrun.maintenance.remove_runs`."""
        with self._transaction(write=True) as tx:
            forks = [fork for (fork,) in tx.rows("SELECT id FROM runs WHERE parent_id = :id", {"id": run_id})]
            if tx.execute("DELETE FROM runs WHERE id = :id", {"id": run_id}) == 0:
                raise RegistryError(f"no run with id {run_id} in the registry")
            for fork in forks:
                self._sync_manifest(tx, fork)

    def add_spec_revision(
        self, run_id: str, *, frame: int, spec_json: str, diff_json: str | None
    ) -> SpecRevisionRecord:
        """Record a spec edited at resume time; the revision number is the next free one."""
        with self._transaction(write=True) as tx:
            self._lock_run(tx, run_id)
            (last,) = tx.rows("SELECT MAX(revision) FROM spec_revisions WHERE run_id = :id", {"id": run_id})[0]
            if last is None:
                raise RegistryError(f"no run with id {run_id} in the registry")
            values: dict[str, Any] = {"run_id": run_id, "revision": last + 1, "frame": frame, "spec_json": spec_json,
                      "diff_json": diff_json, "created_at": time.time()}  # fmt: skip
            row_id = tx.insert(_insert_sql("spec_revisions", values), values)
            self._sync_manifest(tx, run_id)
        return SpecRevisionRecord(id=row_id, **values)

    def rewind_session(
        self, session_id: int, *, frame: int, episode: int, opt_step: int
    ) -> list[CheckpointRecord]:
        """Continue a session from its snapshot at `frame`: forget what it recorded after it.

        Deletes the session's "train" evaluations and its checkpoints with a frame above `frame`
        (they will be recomputed), sets its clock, recomputes best_eval / last_eval from the
        evaluations that remain, and clears error and finished_at; the status is left to
        `start_session`. Returns the deleted checkpoints so the caller can remove their files
        once this has committed.
        """
        later = {"session_id": session_id, "frame": frame}
        with self._transaction(write=True) as tx:
            run_id, _ = self._owner(tx, session_id)
            doomed = self._checkpoints_where(tx, "c.session_id = :session_id AND c.frame > :frame", later)
            tx.execute("DELETE FROM checkpoints WHERE session_id = :session_id AND frame > :frame", later)
            train = "session_id = :session_id AND kind = 'train'"
            tx.execute(f"DELETE FROM evaluations WHERE {train} AND frame > :frame", later)
            (best,) = tx.rows(f"SELECT MAX(mean) FROM evaluations WHERE {train}", later)[0]
            last = tx.rows(f"SELECT mean FROM evaluations WHERE {train} ORDER BY frame DESC, id DESC LIMIT 1", later)
            tx.execute(
                "UPDATE sessions SET frame = :frame, episode = :episode, opt_step = :opt_step, best_eval = :best,"
                " last_eval = :last, error = NULL, finished_at = NULL WHERE id = :session_id",
                {**later, "episode": episode, "opt_step": opt_step, "best": best, "last": last[0][0] if last else None},
            )
            self._sync_manifest(tx, run_id)
        return doomed

    def add_attempt(
        self, session_id: int, *, kind: str, host: str | None, pid: int | None, start_frame: int,
        approximate: bool = False, note: str | None = None,
    ) -> AttemptRecord:  # fmt: skip
        """Record a process starting work on a session at `start_frame`.

        kind: "train" (the first process), "resume", or "fork" (the first process of a forked
        run). `approximate` with a `note` says why a resume could not be exact.
        """
        _check_status(kind, ATTEMPT_KINDS, what="attempt kind")
        with self._transaction(write=True) as tx:
            run_id, index = self._owner(tx, session_id)
            values: dict[str, Any] = dict(
                run_id=run_id, session_id=session_id, kind=kind, host=host, pid=pid, start_frame=start_frame,
                started_at=time.time(), ended_at=None, end_status=None, approximate=approximate, note=note,
            )
            row_id = tx.insert(_insert_sql("attempts", values), values)
            self._sync_manifest(tx, run_id)
        return AttemptRecord(id=row_id, session_index=index, **values)

    def end_attempt(self, attempt_id: int, *, status: str) -> None:
        """Close an attempt: finished, failed, preempted, or crashed (found open by a later one)."""
        _check_status(status, ATTEMPT_END_STATUSES)
        with self._transaction(write=True) as tx:
            count = tx.execute("UPDATE attempts SET ended_at = :now, end_status = :status WHERE id = :id",
                               {"now": time.time(), "status": status, "id": attempt_id})  # fmt: skip
            if count == 0:
                raise RegistryError(f"no attempt with id {attempt_id} in the registry")
            (run_id,) = tx.rows("SELECT run_id FROM attempts WHERE id = :id", {"id": attempt_id})[0]
            self._sync_manifest(tx, run_id)

    def add_checkpoint(
        self, session_id: int, *, frame: int, kind: str, path: str, sha256: str, size_bytes: int
    ) -> CheckpointRecord:
        with self._transaction(write=True) as tx:
            run_id, index = self._owner(tx, session_id)
            values: dict[str, Any] = dict(session_id=session_id, frame=frame, kind=kind, path=path, sha256=sha256,
                                          size_bytes=size_bytes, created_at=time.time())
            row_id = tx.insert(_insert_sql("checkpoints", values), values)
        return CheckpointRecord(id=row_id, run_id=run_id, session_index=index, **values)

    def remove_checkpoint(self, checkpoint_id: int) -> None:
        with self._transaction(write=True) as tx:
            if tx.execute("DELETE FROM checkpoints WHERE id = :id", {"id": checkpoint_id}) == 0:
                raise RegistryError(f"no checkpoint with id {checkpoint_id} in the registry")

    def remove_checkpoints(self, checkpoint_ids: Sequence[int]) -> int:
        """Delete many checkpoint rows at once (`rlrun gc`); returns how many were there."""
        removed = 0
        with self._transaction(write=True) as tx:
            for start in range(0, len(checkpoint_ids), _IN_LIMIT):
                listed, params = _in_list("c", list(checkpoint_ids[start:start + _IN_LIMIT]))
                removed += tx.execute(f"DELETE FROM checkpoints WHERE id IN ({listed})", params)
        return removed

    def add_evaluation(
        self, session_id: int, *, frame: int, mean: float, std: float, min: float, max: float,
        episodes: int, kind: str = "train",
    ) -> EvaluationRecord:  # fmt: skip
        """Record an evaluation; a "train" one also updates the session's last and best score.
        Other kinds (`rlrun enjoy`) go into the run's manifest too: no snapshot holds them."""
        if not all(math.isfinite(v) for v in (mean, std, min, max)):
            # SQLite stores NaN as NULL, which would silently lose the row's meaning.
            raise ValueError(f"evaluation scores must be finite: {mean=} {std=} {min=} {max=}")
        values: dict[str, Any] = dict(session_id=session_id, frame=frame, kind=kind, mean=mean, std=std, min=min,
                                      max=max, episodes=episodes, created_at=time.time())
        with self._transaction(write=True) as tx:
            run_id, index = self._owner(tx, session_id)
            row_id = tx.insert(_insert_sql("evaluations", values), values)
            if kind == "train":
                tx.execute(
                    "UPDATE sessions SET last_eval = :mean,"
                    " best_eval = CASE WHEN best_eval IS NULL OR best_eval < :mean THEN :mean ELSE best_eval END"
                    " WHERE id = :session_id", values,
                )  # fmt: skip
            else:
                self._sync_manifest(tx, run_id)
        return EvaluationRecord(id=row_id, run_id=run_id, session_index=index, **values)

    @staticmethod
    def _owner(tx: _Transaction, session_id: int) -> tuple[str, int]:
        """The run id and index of a session."""
        found = tx.rows("SELECT run_id, session_index FROM sessions WHERE id = :id", {"id": session_id})
        if not found:
            raise RegistryError(f"no session with id {session_id} in the registry")
        return found[0][0], found[0][1]

    @staticmethod
    def _lock_run(tx: _Transaction, run_id: str) -> None:
        """Serialise writers of one run on a server (SQLite's BEGIN IMMEDIATE already has)."""
        if tx.dialect != "sqlite":
            tx.rows("SELECT id FROM runs WHERE id = :id FOR UPDATE", {"id": run_id})

    # ---- the run folder's manifest -----------------------------------------------------------

    def write_manifest(self, run_id: str) -> None:
        """Write the run's `run.json` from its rows (the registry also does after every change)."""
        with self._transaction(write=True) as tx:
            self._sync_manifest(tx, run_id)

    def _sync_manifest(self, tx: _Transaction, run_id: str) -> None:
        """Rewrite the run's manifest from the rows, inside the writing transaction: writers of one
        run take turns, so the file always ends as the newest state."""
        self._lock_run(tx, run_id)
        found = tx.rows(f"SELECT {_RUN} FROM runs r WHERE r.id = :id", {"id": run_id})
        if not found:
            return
        where = {"run_id": run_id}
        document = {
            "format": MANIFEST_FORMAT,
            "run": RunRecord(*found[0]).to_json(),
            "sessions": [_drop(SessionRecord(*row).to_json(), "id", "run_id") for row in tx.rows(
                f"SELECT {_SESSION} FROM sessions s WHERE s.run_id = :run_id ORDER BY s.session_index", where)],
            "spec_revisions": [_drop(r.to_json(), "id", "run_id") for r in self._revisions_of(tx, run_id)],
            "attempts": [_drop(a.to_json(), "id", "run_id", "session_id") for a in self._attempts_of(tx, run_id)],
            "evaluations": [_drop(e.to_json(), "id", "run_id", "session_id") for e in self._evaluations_where(
                tx, "s.run_id = :run_id AND e.kind <> 'train'", where)],
        }  # fmt: skip
        from rlrun.fsutil import atomic_write  # writes only: reads need not load hashlib and uuid

        atomic_write(paths.run_dir(self.home, run_id) / MANIFEST, json.dumps(document, indent=1).encode())

    # ---- reads -------------------------------------------------------------------------------

    def name_exists(self, name: str) -> str | None:
        """The id of the run holding `name`, or None."""
        with self._transaction(write=False) as tx:
            found = tx.rows("SELECT id FROM runs WHERE name = :name", {"name": name})
        return found[0][0] if found else None

    def count_runs(self, filters: RunFilter | str | None = None) -> int:
        """How many runs `list_runs(filters=filters, limit=None)` would list (a string is a status)."""
        chosen = _as_filter(filters)
        with self._transaction(write=False) as tx:
            where, params = self._where(tx, chosen, _Liveness())
            return int(tx.rows(f"SELECT COUNT(*) FROM runs r WHERE {where}", params)[0][0])

    def list_runs(self, *, status: str | None = None, limit: int | None = 20, offset: int = 0,
                  filters: RunFilter | None = None) -> list[RunSummary]:  # fmt: skip
        """Runs newest first (or as `filters.sort` says) with session aggregates, in one query,
        plus one small liveness query when the page holds stored-running runs (see _Liveness).

        Sorted by start, the newest runs come straight off the (created_at, id) index and only
        they are aggregated, so the cost follows the page size, not the size of the registry. A
        status filter applies to the status as reported: "running" and "crashed" are told apart
        by first finding which stored-running runs are still alive.
        """
        chosen = _as_filter(filters or status)
        live = _Liveness()
        with self._transaction(write=False) as tx:
            rows = self._page(tx, chosen, live, limit, offset)
            alive = self._alive_on_page(tx, chosen, live, rows)
        return [
            RunSummary(
                row=offset + i + 1, id=run.id, name=run.name, spec_name=run.spec_name, algorithm=run.algorithm,
                env_id=run.env_id, status=_reported(run.status, run.id in alive), num_sessions=run.num_sessions,
                frames_done=frames, frames_target=run.max_frame * run.num_sessions, best_eval=best,
                created_at=run.created_at, finished_at=run.finished_at,
            )
            for i, (run, frames, best) in enumerate(rows)
        ]  # fmt: skip

    def _page(self, tx: _Transaction, filters: RunFilter, live: _Liveness, limit: int | None,
              offset: int) -> list[tuple[RunRecord, int, float | None]]:  # fmt: skip
        where, params = self._where(tx, filters, live)
        window, bounds = _window(tx.dialect, limit, offset)
        params.update(bounds)
        # Correlated sub-selects use the sessions' (run_id, session_index) index run by run, so the
        # cost follows the page when sorted by start, and stays linear for a whole listing.
        aggregates = ("(SELECT COALESCE(SUM(s.frame), 0) FROM sessions s WHERE s.run_id = r.id) AS frames,"
                      " (SELECT MAX(s.best_eval) FROM sessions s WHERE s.run_id = r.id) AS best")  # fmt: skip
        if filters.sort == "started":
            query = f"SELECT {_RUN}, {aggregates} FROM runs r WHERE {where} ORDER BY {_NEWEST_FIRST}{window}"
        else:
            # Sorting on aggregates needs them for every run that passes the filters.
            order = "(p.best IS NULL), p.best DESC" if filters.sort == "best" else "p.frames DESC"
            query = (f"SELECT * FROM (SELECT {_RUN}, {aggregates} FROM runs r WHERE {where}) p"
                     f" ORDER BY {order}, p.created_at DESC, p.id DESC{window}")  # fmt: skip
        n = len(RUN_COLUMNS)
        return [(RunRecord(*row[:n]), int(row[n]), row[n + 1]) for row in tx.rows(query, params)]

    def _alive_on_page(self, tx: _Transaction, filters: RunFilter, live: _Liveness,
                       rows: Sequence[tuple[RunRecord, int, float | None]]) -> set[str]:  # fmt: skip
        if filters.status == "running":
            return {run.id for run, _, _ in rows}
        running = [run.id for run, _, _ in rows if run.status == "running"]
        if filters.status == CRASHED or not running:
            return set()
        # A long IN list would hit SQLite's variable limit; all running runs are few.
        return self._live_runs(tx, live, running if len(running) <= _IN_LIMIT else None)

    def _where(self, tx: _Transaction, filters: RunFilter, live: _Liveness) -> tuple[str, dict[str, Any]]:
        """The filters as a condition on `runs r` and its parameters."""
        clauses: list[str] = []
        params: dict[str, Any] = {}
        if filters.status in ("running", CRASHED):
            alive = sorted(self._live_runs(tx, live))
            clauses.append("r.status = 'running'")
            if alive:
                listed, ids = _in_list("alive", alive)
                clauses.append(f"r.id {'IN' if filters.status == 'running' else 'NOT IN'} ({listed})")
                params.update(ids)
            elif filters.status == "running":
                clauses.append("1 = 0")
        elif filters.status is not None:
            clauses.append("r.status = :status")
            params["status"] = filters.status
        for column, value in (("algorithm", filters.algorithm), ("env_id", filters.env),
                              ("spec_name", filters.spec)):  # fmt: skip
            if value is not None:
                clauses.append(f"LOWER(r.{column}) = LOWER(:{column})")
                params[column] = value
        if filters.name is not None:
            operator = "LIKE" if tx.dialect == "sqlite" else "ILIKE"  # both ignore case
            clauses.append(f"r.name {operator} :name ESCAPE '\\'")
            params["name"] = like_pattern(filters.name)
        if filters.since is not None:
            clauses.append("r.created_at >= :since")
            params["since"] = filters.since
        return " AND ".join(clauses) or "1 = 1", params

    def _live_runs(self, tx: _Transaction, live: _Liveness, among: Sequence[str] | None = None) -> set[str]:
        """The ids of the stored-running runs (of `among`) with a session running or pending.

        SQL keeps only the sessions that pass the time test; Python checks their pids.
        """
        params: dict[str, Any] = {"cutoff": live.cutoff}
        query = (
            "SELECT s.run_id, s.status, s.host, s.pid, s.heartbeat_at, r.host, r.pid, r.created_at"
            f" FROM sessions s JOIN runs r ON s.run_id = r.id WHERE r.status = 'running' AND {live.SQL_MAYBE_ALIVE}"
        )
        if among is not None:
            listed, ids = _in_list("among", among)
            query += f" AND r.id IN ({listed})"
            params.update(ids)
        alive: set[str] = set()
        for run_id, status, host, pid, beat, run_host, run_pid, created in tx.rows(query, params):
            if run_id not in alive and live.session_status(status, host, pid, beat, run_host, run_pid,
                                                           created) != CRASHED:  # fmt: skip
                alive.add(run_id)
        return alive

    def live_run_ids(self) -> set[str]:
        """The runs that are running now (a live session): maintenance leaves their files alone."""
        with self._transaction(write=False) as tx:
            return self._live_runs(tx, _Liveness())

    def get_run(self, run_id: str) -> RunDetail:
        """A run with everything recorded about it; statuses as reported (see _Liveness)."""
        live = _Liveness()
        where = {"run_id": run_id}
        with self._transaction(write=False) as tx:
            run = self._run(tx, run_id)
            sessions = [SessionRecord(*row) for row in tx.rows(
                f"SELECT {_SESSION} FROM sessions s WHERE s.run_id = :run_id ORDER BY s.session_index", where)]
            statuses = [live.session_of(s, run) for s in sessions]
            return RunDetail(
                run=run._replace(status=live.run_status(run.status, statuses)),
                sessions=[s._replace(status=status) for s, status in zip(sessions, statuses, strict=True)],
                checkpoints=self._checkpoints_where(tx, "s.run_id = :run_id", where),
                evaluations=self._evaluations_where(tx, "s.run_id = :run_id", where),
                spec_revisions=self._revisions_of(tx, run_id),
                attempts=self._attempts_of(tx, run_id),
                forks=[fork for (fork,) in tx.rows(
                    "SELECT id FROM runs WHERE parent_id = :run_id ORDER BY created_at, id", where)],
            )  # fmt: skip

    @staticmethod
    def _run(tx: _Transaction, run_id: str) -> RunRecord:
        found = tx.rows(f"SELECT {_RUN} FROM runs r WHERE r.id = :id", {"id": run_id})
        if not found:
            raise RunReferenceError(f"no run with id {run_id!r}; see `rlrun ls`")
        return RunRecord(*found[0])

    @staticmethod
    def _checkpoints_where(tx: _Transaction, condition: str, params: dict[str, Any]) -> list[CheckpointRecord]:
        query = (f"SELECT {_CHECKPOINT} FROM checkpoints c JOIN sessions s ON c.session_id = s.id"
                 f" WHERE {condition} ORDER BY s.run_id, s.session_index, c.frame, c.id")  # fmt: skip
        return [CheckpointRecord(*row) for row in tx.rows(query, params)]

    @staticmethod
    def _evaluations_where(tx: _Transaction, condition: str, params: dict[str, Any]) -> list[EvaluationRecord]:
        query = (f"SELECT {_EVALUATION} FROM evaluations e JOIN sessions s ON e.session_id = s.id"
                 f" WHERE {condition} ORDER BY s.session_index, e.frame, e.id")  # fmt: skip
        return [EvaluationRecord(*row) for row in tx.rows(query, params)]

    @staticmethod
    def _revisions_of(tx: _Transaction, run_id: str) -> list[SpecRevisionRecord]:
        query = f"SELECT {_REVISION} FROM spec_revisions v WHERE v.run_id = :id ORDER BY v.revision"
        return [SpecRevisionRecord(*row) for row in tx.rows(query, {"id": run_id})]

    @staticmethod
    def _attempts_of(tx: _Transaction, run_id: str) -> list[AttemptRecord]:
        query = (f"SELECT {_ATTEMPT} FROM attempts a JOIN sessions s ON a.session_id = s.id"
                 " WHERE a.run_id = :id ORDER BY a.started_at, a.id")  # fmt: skip
        return [_attempt_record(row) for row in tx.rows(query, {"id": run_id})]

    def latest_spec(self, run_id: str) -> SpecRevisionRecord:
        """The run's newest spec revision (the one training continues under)."""
        with self._transaction(write=False) as tx:
            found = tx.rows(f"SELECT {_REVISION} FROM spec_revisions v WHERE v.run_id = :id"
                            " ORDER BY v.revision DESC LIMIT 1", {"id": run_id})  # fmt: skip
        if not found:
            raise RunReferenceError(f"no run with id {run_id!r}; see `rlrun ls`")
        return SpecRevisionRecord(*found[0])

    def latest_specs(self) -> dict[str, str]:
        """Every run's newest spec (JSON text) by run id, in one query (`rlrun gc`)."""
        with self._transaction(write=False) as tx:
            rows = tx.rows(
                "SELECT v.run_id, v.spec_json FROM spec_revisions v JOIN (SELECT run_id, MAX(revision) AS revision"
                " FROM spec_revisions GROUP BY run_id) m ON m.run_id = v.run_id AND m.revision = v.revision"
            )
        return dict(rows)

    def get_session(self, run_id: str, index: int) -> SessionRecord:
        """One session; its status as reported (see _Liveness)."""
        with self._transaction(write=False) as tx:
            found = tx.rows(f"SELECT {_SESSION} FROM sessions s WHERE s.run_id = :run_id AND s.session_index = :index",
                            {"run_id": run_id, "index": index})  # fmt: skip
            if not found:
                raise RunReferenceError(f"run {run_id} has no session s{index}; see `rlrun show`")
            session = SessionRecord(*found[0])
            run = self._run(tx, run_id)
        return session._replace(status=_Liveness().session_of(session, run))

    def live_session(self, run_id: str) -> SessionRecord | None:
        """A session of the run that is still running (fresh heartbeat and, on this host, a live
        pid), or None. `rlrun resume` refuses a run that has one."""
        live = _Liveness()
        with self._transaction(write=False) as tx:
            run = self._run(tx, run_id)
            rows = tx.rows(f"SELECT {_SESSION} FROM sessions s WHERE s.run_id = :run_id AND s.status = 'running'"
                           " ORDER BY s.session_index", {"run_id": run_id})  # fmt: skip
        for row in rows:
            session = SessionRecord(*row)
            if live.session_of(session, run) == "running":
                return session
        return None

    def checkpoints(self, session_id: int) -> list[CheckpointRecord]:
        """The checkpoints of one session, oldest frame first."""
        with self._transaction(write=False) as tx:
            return self._checkpoints_where(tx, "s.id = :session_id", {"session_id": session_id})

    def all_checkpoints(self) -> list[CheckpointRecord]:
        """Every checkpoint, by run, session and frame (`rlrun gc`)."""
        with self._transaction(write=False) as tx:
            return self._checkpoints_where(tx, "1 = 1", {})

    def run_ids(self) -> set[str]:
        """The id of every run (`rlrun db rebuild`)."""
        with self._transaction(write=False) as tx:
            return {run_id for (run_id,) in tx.rows("SELECT id FROM runs")}

    def distinct(self, column: str) -> list[str]:
        """The values of a run column (algorithm, env_id or spec_name), to suggest filters."""
        if column not in ("algorithm", "env_id", "spec_name"):
            raise ValueError(f"not a filterable column: {column}")
        with self._transaction(write=False) as tx:
            return [value for (value,) in tx.rows(f"SELECT DISTINCT {column} FROM runs ORDER BY {column}")]


    # ---- rebuilding from folders -------------------------------------------------------------

    def restore_run(self, restored: RestoredRun) -> None:
        """Insert a run read back from its folder (`rlrun db rebuild`) with all its rows, in one
        transaction. A parent that is not in the registry is dropped from the record."""
        run = restored.run
        with self._transaction(write=True) as tx:
            if run.parent_id is not None and not tx.rows("SELECT 1 FROM runs WHERE id = :id", {"id": run.parent_id}):
                run = run._replace(parent_id=None)
            tx.execute(_insert_sql("runs", RUN_COLUMNS), run._asdict())
            ids: dict[int, int] = {}
            for session in restored.sessions:
                values = {"run_id": run.id, **session}
                ids[session["session_index"]] = tx.insert(_insert_sql("sessions", values), values)
            for revision in restored.spec_revisions:
                values = {"run_id": run.id, **revision}
                tx.insert(_insert_sql("spec_revisions", values), values)
            for table, rows in (("attempts", restored.attempts), ("checkpoints", restored.checkpoints),
                                ("evaluations", restored.evaluations)):  # fmt: skip
                for row in rows:
                    values = {k: v for k, v in row.items() if k != "session_index"}
                    values["session_id"] = ids[row["session_index"]]
                    if table == "attempts":
                        values["run_id"] = run.id
                    tx.insert(_insert_sql(table, values), values)
            self._sync_manifest(tx, run.id)

    # ---- run references ----------------------------------------------------------------------

    def resolve(self, ref: str | RunRef, filters: RunFilter | None = None) -> RunRecord:
        """The run a reference names among the runs that pass `filters` (`latest` is the newest
        of them, a row number counts them in `filters.sort` order). The caller handles the
        reference's /sK and @checkpoint parts."""
        parsed = parse_ref(ref) if isinstance(ref, str) else ref
        chosen = filters or RunFilter()
        live = _Liveness()
        with self._transaction(write=False) as tx:
            run = self._find(tx, parsed, chosen, live)
            alive = run.status == "running" and bool(self._live_runs(tx, live, [run.id]))
        run = run._replace(status=_reported(run.status, alive))
        if parsed.session is not None and parsed.session >= run.num_sessions:
            raise RunReferenceError(
                f"{parsed}: run {run.id} has {_sessions_phrase(run.num_sessions)}"
            )
        return run

    def _find(self, tx: _Transaction, ref: RunRef, filters: RunFilter, live: _Liveness) -> RunRecord:
        if ref.kind == "token":
            found = self._find_token(tx, ref.token, filters, live)
        else:
            # `latest` is always the newest; rows follow the listing's order.
            order = filters if ref.kind == "row" else filters._replace(sort="started")
            position = ref.offset if ref.kind == "latest" else ref.row - 1
            page = self._page(tx, order, live, 1, position)
            found = page[0][0] if page else None
        if found is None:
            raise RunReferenceError(self._not_found(tx, ref, filters, live))
        return found

    def _find_token(self, tx: _Transaction, token: str, filters: RunFilter, live: _Liveness) -> RunRecord | None:
        # Ids are lowercase; a name is matched exactly as typed; then id prefixes.
        where, params = self._where(tx, filters, live)
        for condition, value in (("r.id = :token", token.lower()), ("r.name = :token", token)):
            exact = tx.rows(f"SELECT {_RUN} FROM runs r WHERE {condition} AND {where}", {**params, "token": value})
            if exact:
                return RunRecord(*exact[0])
        candidates = [RunRecord(*row) for row in tx.rows(
            f"SELECT {_RUN} FROM runs r WHERE r.id LIKE :prefix ESCAPE '\\' AND {where}"
            f" ORDER BY {_NEWEST_FIRST} LIMIT {_MAX_CANDIDATES + 1}",
            {**params, "prefix": like_pattern(token.lower()) + "%"},
        )]  # fmt: skip
        if len(candidates) > 1:
            raise RunReferenceError(_ambiguous(token, candidates))
        return candidates[0] if candidates else None

    def _not_found(self, tx: _Transaction, ref: RunRef, filters: RunFilter, live: _Liveness) -> str:
        if not tx.rows("SELECT 1 FROM runs LIMIT 1"):
            return f"no runs in {self.home} yet; start one with `rlrun train reinforce_cartpole`"
        narrowed = filters.describe() if filters.narrows else ""
        listing = f"`rlrun ls {narrowed}`" if narrowed else "`rlrun ls`"
        if ref.kind == "token":
            with_filters = f" with {narrowed}" if narrowed else ""
            return f"no run matches {ref.token!r}{with_filters}; see {listing}"
        where, params = self._where(tx, filters, live)
        total = int(tx.rows(f"SELECT COUNT(*) FROM runs r WHERE {where}", params)[0][0])
        if total == 0:
            return f"no runs match {narrowed}{self._hint(tx, filters)}; see `rlrun ls`"
        plural = "run" if total == 1 else "runs"
        matching = f" match {narrowed}" if narrowed else ""
        return f"{ref.base}: only {total} {plural}{matching}; see {listing}"

    @staticmethod
    def _hint(tx: _Transaction, filters: RunFilter) -> str:
        """Name the values that exist when a filter asks for one that does not."""
        for flag, column, value in (("--algo", "algorithm", filters.algorithm), ("--env", "env_id", filters.env),
                                    ("--spec", "spec_name", filters.spec)):  # fmt: skip
            if value is None:
                continue
            known = [v for (v,) in tx.rows(f"SELECT DISTINCT {column} FROM runs ORDER BY {column}")]
            if value.lower() not in {v.lower() for v in known}:
                return f" (no run has {flag} {value}; there are {', '.join(known[:_MAX_CANDIDATES])})"
        return ""


class RestoredRun(NamedTuple):
    """A run read back from its folder, ready for `Registry.restore_run`: the run's record (its
    stored status) and its rows as column values, children keyed by session_index."""

    run: RunRecord
    sessions: list[dict[str, Any]]
    spec_revisions: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    evaluations: list[dict[str, Any]]


def _sessions_phrase(count: int) -> str:
    if count == 1:
        return "1 session (s0)"
    return f"{count} sessions (s0..s{count - 1})"


def _ambiguous(token: str, candidates: Sequence[RunRecord]) -> str:
    shown = [
        f"{run.id} ({run.name + ', ' if run.name else ''}{_format_time(run.created_at)})"
        for run in candidates[:_MAX_CANDIDATES]
    ]
    more = ", and more" if len(candidates) > _MAX_CANDIDATES else ""
    return f"{token!r} is ambiguous: {', '.join(shown)}{more}; type more of the id"
