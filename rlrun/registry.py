"""The run registry: the one module that owns the database.

SQLAlchemy ORM over SQLite by default (a file in the runs home), any SQLAlchemy URL otherwise.
The schema is created and upgraded by the Alembic migrations in `migrations/`; opening a registry
checks the schema revision with one plain query and only imports Alembic when an upgrade is due,
so registry-only commands start fast. Nothing here imports torch, gymnasium, numpy or pydantic.

Every method runs one short transaction through `Registry._session` and returns frozen
dataclasses (never ORM rows), so callers can keep results after the session is closed.

Statuses are reported as they are, not only as stored: a run or session whose process died
without a word reads as "crashed", computed on read from heartbeats and pids (see _Liveness).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    and_,
    create_engine,
    delete,
    event,
    false,
    func,
    or_,
    orm,
    select,
    text,
    true,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.pool import StaticPool

from rlrun import paths
from rlrun.errors import BadInput, RegistryError, RunReferenceError
from rlrun.refs import RunRef, parse_ref

if TYPE_CHECKING:
    from alembic.config import Config

# The Alembic head this code was written against; a test keeps it equal to the migrations' head.
SCHEMA_HEAD = "0002"
VERSION_TABLE = "rlrun_alembic_version"

# Stored statuses. "crashed" is never stored: reads report a "running" (or "pending") row as
# crashed when its process is gone (see _Liveness), so a killed process needs nobody to record it.
RUN_STATUSES = ("running", "finished", "failed", "preempted")
SESSION_STATUSES = ("pending", "running", "finished", "failed", "preempted")
CRASHED = "crashed"
# What `list_runs(status=...)` and `count_runs(status)` accept, as reported on read.
LISTED_RUN_STATUSES = (*RUN_STATUSES, CRASHED)
_ENDED = ("finished", "failed", "preempted")

# Attempts: every process that works on a session (the first training, each resume or fork).
ATTEMPT_KINDS = ("train", "resume", "fork")
ATTEMPT_END_STATUSES = (*_ENDED, CRASHED)  # crashed: closed by a later attempt that found it open

# Sessions heartbeat every few seconds; one silent for longer than this is reported crashed.
STALE_AFTER_SECONDS = 30.0

# Set on a connection before it begins, read by the SQLite "begin" hook (see _on_sqlite_begin).
_WRITE_FLAG = "rlrun_write"
_MAX_CANDIDATES = 10
_IN_LIMIT = 500  # beyond this many ids, select by a condition rather than an IN list


# --------------------------------------------------------------------------------------------
# Schema. Constraint names are fixed by convention so migrations can refer to them by name
# (SQLite batch migrations need named constraints to drop or alter them).

_NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=_NAMING)


class RunRow(Base):
    __tablename__ = "runs"
    # (created_at, id) is the `rlrun ls` order, so the newest runs come straight off the index.
    __table_args__ = (Index("ix_runs_created_at", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200), unique=True)
    spec_name: Mapped[str] = mapped_column(String(200))
    algorithm: Mapped[str] = mapped_column(String(64))
    env_id: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16))
    max_frame: Mapped[int] = mapped_column(BigInteger)
    num_sessions: Mapped[int] = mapped_column(Integer)
    seed: Mapped[int] = mapped_column(BigInteger)
    # A fork outlives its parent: deleting the parent only unlinks it.
    parent_id: Mapped[str | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), index=True
    )
    host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class SessionRow(Base):
    __tablename__ = "sessions"
    # The unique (run_id, session_index) index also serves lookups by run_id alone.
    __table_args__ = (UniqueConstraint("run_id", "session_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column("session_index", Integer)
    seed: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16))
    frame: Mapped[int] = mapped_column(BigInteger)
    episode: Mapped[int] = mapped_column(BigInteger)
    opt_step: Mapped[int] = mapped_column(BigInteger)
    best_eval: Mapped[float | None] = mapped_column(Float)
    last_eval: Mapped[float | None] = mapped_column(Float)
    host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    heartbeat_at: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)


class CheckpointRow(Base):
    __tablename__ = "checkpoints"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[int] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    frame: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)  # relative to the runs home
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Float)


class EvaluationRow(Base):
    __tablename__ = "evaluations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[int] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    frame: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16), server_default="train")
    mean: Mapped[float] = mapped_column(Float)
    std: Mapped[float] = mapped_column(Float)
    min: Mapped[float] = mapped_column(Float)
    max: Mapped[float] = mapped_column(Float)
    episodes: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)


class AttemptRow(Base):
    """One process working on one session, from its start frame until it ends (or dies)."""

    __tablename__ = "attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    session_id: Mapped[int] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(16))  # train | resume | fork
    host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    start_frame: Mapped[int] = mapped_column(BigInteger)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    end_status: Mapped[str | None] = mapped_column(String(16))
    approximate: Mapped[bool] = mapped_column(Boolean, server_default=false())
    note: Mapped[str | None] = mapped_column(Text)  # why a resume was approximate


class SpecRevisionRow(Base):
    __tablename__ = "spec_revisions"
    # The unique (run_id, revision) index also serves lookups by run_id alone.
    __table_args__ = (UniqueConstraint("run_id", "revision"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    revision: Mapped[int] = mapped_column(Integer)  # 0 = the spec at train time
    frame: Mapped[int] = mapped_column(BigInteger)  # the frame the revision applies from
    spec_json: Mapped[str] = mapped_column(Text)
    diff_json: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


# --------------------------------------------------------------------------------------------
# Records returned to callers.


class _Record:
    def to_json(self) -> dict[str, Any]:
        """Plain JSON types, for `--json` output."""
        return asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True)
class RunRecord(_Record):
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


@dataclass(frozen=True)
class SessionRecord(_Record):
    id: int
    run_id: str
    index: int
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


@dataclass(frozen=True)
class CheckpointRecord(_Record):
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


@dataclass(frozen=True)
class EvaluationRecord(_Record):
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


@dataclass(frozen=True)
class SpecRevisionRecord(_Record):
    id: int
    run_id: str
    revision: int
    frame: int
    spec_json: str
    diff_json: str | None
    created_at: float

    def to_json(self) -> dict[str, Any]:
        """The spec and diff as JSON values rather than strings holding JSON."""
        data = asdict(self)
        data["spec"] = json.loads(data.pop("spec_json"))
        diff = data.pop("diff_json")
        data["diff"] = None if diff is None else json.loads(diff)
        return data


@dataclass(frozen=True)
class AttemptRecord(_Record):
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


@dataclass(frozen=True)
class RunSummary(_Record):
    row: int  # 1-based position in `rlrun ls` order under the same status filter
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


@dataclass(frozen=True)
class RunDetail(_Record):
    run: RunRecord
    sessions: list[SessionRecord]
    checkpoints: list[CheckpointRecord]
    evaluations: list[EvaluationRecord]
    spec_revisions: list[SpecRevisionRecord]
    attempts: list[AttemptRecord] = field(default_factory=list)  # oldest first
    forks: list[str] = field(default_factory=list)  # ids of the runs forked from this one

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


def _run_record(row: RunRow, status: str | None = None) -> RunRecord:
    return RunRecord(
        id=row.id, name=row.name, spec_name=row.spec_name, algorithm=row.algorithm,
        env_id=row.env_id, status=status or row.status, max_frame=row.max_frame,
        num_sessions=row.num_sessions, seed=row.seed, parent_id=row.parent_id, host=row.host,
        pid=row.pid, error=row.error, created_at=row.created_at, finished_at=row.finished_at,
    )  # fmt: skip


def _session_record(row: SessionRow, status: str | None = None) -> SessionRecord:
    return SessionRecord(
        id=row.id, run_id=row.run_id, index=row.index, seed=row.seed, status=status or row.status,
        frame=row.frame, episode=row.episode, opt_step=row.opt_step, best_eval=row.best_eval,
        last_eval=row.last_eval, host=row.host, pid=row.pid, heartbeat_at=row.heartbeat_at,
        started_at=row.started_at, finished_at=row.finished_at, error=row.error,
    )  # fmt: skip


def _checkpoint_record(row: CheckpointRow, owner: SessionRow) -> CheckpointRecord:
    return CheckpointRecord(
        id=row.id, session_id=row.session_id, run_id=owner.run_id, session_index=owner.index,
        frame=row.frame, kind=row.kind, path=row.path, sha256=row.sha256,
        size_bytes=row.size_bytes, created_at=row.created_at,
    )  # fmt: skip


def _evaluation_record(row: EvaluationRow, owner: SessionRow) -> EvaluationRecord:
    return EvaluationRecord(
        id=row.id, session_id=row.session_id, run_id=owner.run_id, session_index=owner.index,
        frame=row.frame, kind=row.kind, mean=row.mean, std=row.std, min=row.min, max=row.max,
        episodes=row.episodes, created_at=row.created_at,
    )  # fmt: skip


def _attempt_record(row: AttemptRow, session_index: int) -> AttemptRecord:
    return AttemptRecord(
        id=row.id, run_id=row.run_id, session_id=row.session_id, session_index=session_index,
        kind=row.kind, host=row.host, pid=row.pid, start_frame=row.start_frame,
        started_at=row.started_at, ended_at=row.ended_at, end_status=row.end_status,
        approximate=bool(row.approximate), note=row.note,
    )  # fmt: skip


def _spec_revision_record(row: SpecRevisionRow) -> SpecRevisionRecord:
    return SpecRevisionRecord(
        id=row.id, run_id=row.run_id, revision=row.revision, frame=row.frame,
        spec_json=row.spec_json, diff_json=row.diff_json, created_at=row.created_at,
    )  # fmt: skip


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
        self.here = socket.gethostname()
        self._alive: dict[int, bool] = {}

    def fresh(self, timestamp: float | None) -> bool:
        return timestamp is not None and timestamp >= self.cutoff

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

    def session_of(self, row: SessionRow, run: RunRow) -> str:
        return self.session_status(
            row.status, row.host, row.pid, row.heartbeat_at, run.host, run.pid, run.created_at
        )

    @staticmethod
    def run_status(stored: str, session_statuses: Sequence[str]) -> str:
        if stored == "running" and not any(s in ("running", "pending") for s in session_statuses):
            return CRASHED
        return stored

    def sql_maybe_alive(self) -> ColumnElement[bool]:
        """Sessions that pass the time test (the pid test needs Python): a pre-filter in SQL."""
        pending_since = func.coalesce(SessionRow.heartbeat_at, RunRow.created_at)
        return or_(
            and_(SessionRow.status == "running", SessionRow.heartbeat_at >= self.cutoff),
            and_(SessionRow.status == "pending", pending_since >= self.cutoff),
        )


# --------------------------------------------------------------------------------------------
# Engine. SQLite gets WAL and explicit transaction control so parallel sessions never fail with
# "database is locked": a transaction that starts as a reader and then writes cannot be helped
# by busy_timeout (SQLite returns SQLITE_BUSY at once to avoid a deadlock), so every write
# transaction takes the write lock up front with BEGIN IMMEDIATE and waits its turn instead.


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Stop pysqlite from issuing its own BEGIN; _on_sqlite_begin issues the right one.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    for pragma in (
        "PRAGMA busy_timeout=30000",  # before journal_mode, which may itself wait for a lock
        "PRAGMA journal_mode=WAL",  # readers never block the writer, nor the writer readers
        "PRAGMA synchronous=NORMAL",  # durable at checkpoints, safe in WAL mode
        "PRAGMA foreign_keys=ON",  # ON DELETE CASCADE; SQLite leaves it off by default
    ):
        cursor.execute(pragma)
    cursor.close()


def _on_sqlite_begin(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.info.get(_WRITE_FLAG) else "BEGIN")


def _sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL; None for other databases and in-memory SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def create_registry_engine(url: str) -> Engine:
    """An engine configured the way the registry needs it (pragmas and BEGIN control on SQLite)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url)
    if _sqlite_file(url) is None:
        # One shared connection, or every checkout would see a different empty database.
        engine = create_engine(url, poolclass=StaticPool, connect_args={"timeout": 30})
    else:
        engine = create_engine(url, connect_args={"timeout": 30})
    event.listen(engine, "connect", _on_sqlite_connect)
    event.listen(engine, "begin", _on_sqlite_begin)
    return engine


# --------------------------------------------------------------------------------------------
# Schema migrations.


def migrations_dir() -> Path:
    """The Alembic environment: inside the package in a wheel, at the repo top in a checkout."""
    package = Path(__file__).resolve().parent
    shipped = package / "migrations"
    return shipped if shipped.is_dir() else package.parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config without alembic.ini; env.py uses `connection` when given."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def known_revisions() -> set[str]:
    """Every revision in the migration scripts (imports Alembic)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return {rev.revision for rev in script.walk_revisions()}


def current_revision(engine: Engine) -> str | None:
    """The schema revision stored in the database, None when it has no schema yet."""
    with engine.connect() as conn:
        conn.info[_WRITE_FLAG] = False
        if not conn.dialect.has_table(conn, VERSION_TABLE):
            return None
        return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Connection]:
    """A connection inside one write transaction, with SQLite foreign keys off meanwhile.

    SQLite batch migrations copy a table, drop the original and rename the copy; with foreign
    keys on, the DROP would cascade-delete every child row. The pragma is a no-op inside a
    transaction, so it is switched on the raw connection before BEGIN and restored after, and
    the references are checked before committing.
    """
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        if sqlite:
            _raw_execute(raw, "PRAGMA foreign_keys=OFF")
        try:
            conn.info[_WRITE_FLAG] = True
            with conn.begin():
                yield conn
                if sqlite:
                    _check_foreign_keys(conn)
        finally:
            conn.info[_WRITE_FLAG] = False
            if sqlite:
                _raw_execute(raw, "PRAGMA foreign_keys=ON")


def _raw_execute(raw: Any, statement: str) -> None:
    # On the DBAPI connection directly: through SQLAlchemy, any statement would begin a
    # transaction first, and these pragmas do nothing inside one.
    raw.execute(statement)


def _check_foreign_keys(conn: Connection) -> None:
    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise RegistryError(f"migration left {len(broken)} dangling references, e.g. {broken[0]}")


def _run_alembic(engine: Engine, upgrade: bool, target: str) -> None:
    from alembic import command

    with migration_connection(engine) as conn:
        config = alembic_config(conn)
        if upgrade:
            command.upgrade(config, target)
        else:
            command.downgrade(config, target)


def upgrade_schema(engine: Engine, target: str = "head") -> None:
    _run_alembic(engine, True, target)


def downgrade_schema(engine: Engine, target: str) -> None:
    _run_alembic(engine, False, target)


@contextmanager
def _file_lock(path: Path | None) -> Iterator[None]:
    """An exclusive lock across processes; a no-op for servers (no file to lock)."""
    if path is None:
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ensure_schema(engine: Engine, label: str, lock: Path | None) -> None:
    """Bring the schema to SCHEMA_HEAD; the common case is one cheap query."""
    if current_revision(engine) == SCHEMA_HEAD:
        return
    with _file_lock(lock):
        # Another process may have created or upgraded the schema while we waited.
        revision = current_revision(engine)
        if revision == SCHEMA_HEAD:
            return
        if revision is not None and revision not in known_revisions():
            raise RegistryError(
                f"registry at {label} is at schema revision {revision}, newer than this rlrun "
                f"(head {SCHEMA_HEAD}); upgrade rlrun"
            )
        upgrade_schema(engine)


def _empty_engine() -> Engine:
    """An in-memory registry with the schema and no rows: reads on a missing file answer empty."""
    engine = create_registry_engine("sqlite://")
    Base.metadata.create_all(engine)
    return engine


def _format_time(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _check_status(status: str, allowed: Sequence[str], what: str = "status") -> None:
    if status not in allowed:
        raise ValueError(f"{what} {status!r} is not one of {', '.join(allowed)}")


# --------------------------------------------------------------------------------------------


class Registry:
    """The runs, sessions, checkpoints, evaluations and spec revisions of one runs home."""

    def __init__(self, home: Path, url: str, engine: Engine, *, missing: bool = False) -> None:
        self.home = home
        self.url = url
        self._engine = engine
        self._missing = missing  # opened with create=False on a file that does not exist

    @classmethod
    def open(cls, home: Path | str, url: str | None = None, *, create: bool = True) -> Registry:
        """Open the registry of `home`, creating or upgrading its schema when needed.

        With create=False and no database file, nothing is written: the registry answers every
        read as empty and refuses writes.
        """
        home = Path(home)
        url = url or paths.database_url(home)
        db_file = _sqlite_file(url)
        if db_file is not None and not db_file.exists() and not create:
            return cls(home, url, _empty_engine(), missing=True)
        if db_file is not None:
            db_file.parent.mkdir(parents=True, exist_ok=True)
        engine = create_registry_engine(url)
        lock = None if db_file is None else db_file.with_name(db_file.name + ".lock")
        try:
            _ensure_schema(engine, str(db_file or make_url(url).render_as_string()), lock)
        except BaseException:
            engine.dispose()
            raise
        return cls(home, url, engine)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _session(self, write: bool) -> Iterator[orm.Session]:
        """One transaction: BEGIN IMMEDIATE for writes on SQLite, committed on success."""
        if write and self._missing:
            raise RegistryError(f"no registry at {self.url}; it is created by `rlrun train`")
        with self._engine.connect() as conn:
            # conn.info lives as long as the pooled DBAPI connection, so always set it.
            conn.info[_WRITE_FLAG] = write
            try:
                with orm.Session(bind=conn, expire_on_commit=False) as session, session.begin():
                    yield session
            finally:
                conn.info[_WRITE_FLAG] = False

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
        run = RunRow(
            id=run_id, name=name, spec_name=spec_name, algorithm=algorithm, env_id=env_id,
            status="running", max_frame=max_frame, num_sessions=num_sessions, seed=seed,
            parent_id=parent_id, host=host, pid=pid, error=None, created_at=now, finished_at=None,
        )  # fmt: skip
        try:
            with self._session(write=True) as session:
                self._check_new_run(session, run_id, name, parent_id)
                session.add(run)
                session.flush()  # the run row first: the children reference it
                session.add_all(self._new_sessions(run_id, seed, num_sessions))
                session.add(SpecRevisionRow(
                    run_id=run_id, revision=0, frame=0, spec_json=spec_json, created_at=now
                ))  # fmt: skip
                record = _run_record(run)
        except sa_exc.IntegrityError as error:
            # Only reachable when another writer won a race the check above could not see
            # (servers, which have no BEGIN IMMEDIATE), so the culprit is not known here.
            raise BadInput(f"run id {run_id!r} or name {name!r} is already taken") from error
        return record

    @staticmethod
    def _check_new_run(
        session: orm.Session, run_id: str, name: str | None, parent_id: str | None
    ) -> None:
        if session.get(RunRow, run_id) is not None:
            raise RegistryError(f"a run with id {run_id} already exists")
        if parent_id is not None and session.get(RunRow, parent_id) is None:
            raise RegistryError(f"parent run {parent_id} is not in the registry")
        if name is None:
            return
        holder = session.scalar(select(RunRow.id).where(RunRow.name == name))
        if holder is not None:
            raise BadInput(
                f"a run named {name!r} already exists (id {holder}); choose another --name"
            )

    @staticmethod
    def _new_sessions(run_id: str, seed: int, count: int) -> list[SessionRow]:
        pending: dict[str, Any] = {"status": "pending", "frame": 0, "episode": 0, "opt_step": 0}
        return [SessionRow(run_id=run_id, index=i, seed=seed + i, **pending) for i in range(count)]

    def _update_session(self, session_id: int, **values: Any) -> None:
        with self._session(write=True) as session:
            result = session.execute(
                update(SessionRow).where(SessionRow.id == session_id).values(**values)
            )
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise RegistryError(f"no session with id {session_id} in the registry")

    def start_session(self, session_id: int, *, host: str | None, pid: int | None) -> None:
        """Mark a session running; started_at keeps the first start across resumes."""
        now = time.time()
        self._update_session(
            session_id, status="running", host=host, pid=pid, heartbeat_at=now,
            started_at=func.coalesce(SessionRow.started_at, now), finished_at=None, error=None,
        )  # fmt: skip

    def heartbeat(self, session_id: int, *, frame: int, episode: int, opt_step: int) -> None:
        """Record progress: one UPDATE by primary key."""
        self._update_session(
            session_id, frame=frame, episode=episode, opt_step=opt_step, heartbeat_at=time.time()
        )

    def finish_session(
        self, session_id: int, *, status: str, frame: int, episode: int, opt_step: int,
        error: str | None = None,
    ) -> None:  # fmt: skip
        _check_status(status, _ENDED)
        now = time.time()
        self._update_session(
            session_id, status=status, frame=frame, episode=episode, opt_step=opt_step,
            error=error, heartbeat_at=now, finished_at=now,
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
        with self._session(write=True) as session:
            result = session.execute(update(RunRow).where(RunRow.id == run_id).values(**values))
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise RegistryError(f"no run with id {run_id} in the registry")

    def delete_run(self, run_id: str) -> None:
        """Delete a run and, by cascade, its sessions, checkpoints, evaluations and revisions."""
        with self._session(write=True) as session:
            result = session.execute(delete(RunRow).where(RunRow.id == run_id))
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise RegistryError(f"no run with id {run_id} in the registry")

    def add_spec_revision(
        self, run_id: str, *, frame: int, spec_json: str, diff_json: str | None
    ) -> SpecRevisionRecord:
        """Record a spec edited at resume time; the revision number is the next free one."""
        with self._session(write=True) as session:
            last = session.scalar(
                select(func.max(SpecRevisionRow.revision)).where(SpecRevisionRow.run_id == run_id)
            )
            if last is None:
                raise RegistryError(f"no run with id {run_id} in the registry")
            row = SpecRevisionRow(
                run_id=run_id, revision=last + 1, frame=frame, spec_json=spec_json,
                diff_json=diff_json, created_at=time.time(),
            )  # fmt: skip
            session.add(row)
            session.flush()
            return _spec_revision_record(row)

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
        with self._session(write=True) as session:
            owner = self._session_row(session, session_id)
            later = (CheckpointRow.session_id == session_id, CheckpointRow.frame > frame)
            doomed = session.scalars(
                select(CheckpointRow).where(*later).order_by(CheckpointRow.frame, CheckpointRow.id)
            ).all()
            records = [_checkpoint_record(row, owner) for row in doomed]
            session.execute(delete(CheckpointRow).where(*later))
            train = (EvaluationRow.session_id == session_id, EvaluationRow.kind == "train")
            session.execute(delete(EvaluationRow).where(*train, EvaluationRow.frame > frame))
            owner.best_eval = session.scalar(select(func.max(EvaluationRow.mean)).where(*train))
            owner.last_eval = session.scalar(
                select(EvaluationRow.mean)
                .where(*train)
                .order_by(EvaluationRow.frame.desc(), EvaluationRow.id.desc())
                .limit(1)
            )
            owner.frame, owner.episode, owner.opt_step = frame, episode, opt_step
            owner.error, owner.finished_at = None, None
        return records

    def add_attempt(
        self, session_id: int, *, kind: str, host: str | None, pid: int | None, start_frame: int,
        approximate: bool = False, note: str | None = None,
    ) -> AttemptRecord:  # fmt: skip
        """Record a process starting work on a session at `start_frame`.

        kind: "train" (the first process), "resume", or "fork" (the first process of a forked
        run). `approximate` with a `note` says why a resume could not be exact.
        """
        _check_status(kind, ATTEMPT_KINDS, what="attempt kind")
        with self._session(write=True) as session:
            owner = self._session_row(session, session_id)
            row = AttemptRow(
                run_id=owner.run_id, session_id=session_id, kind=kind, host=host, pid=pid,
                start_frame=start_frame, started_at=time.time(), ended_at=None, end_status=None,
                approximate=approximate, note=note,
            )  # fmt: skip
            session.add(row)
            session.flush()
            return _attempt_record(row, owner.index)

    def end_attempt(self, attempt_id: int, *, status: str) -> None:
        """Close an attempt: finished, failed, preempted, or crashed (found open by a later one)."""
        _check_status(status, ATTEMPT_END_STATUSES)
        with self._session(write=True) as session:
            result = session.execute(
                update(AttemptRow)
                .where(AttemptRow.id == attempt_id)
                .values(ended_at=time.time(), end_status=status)
            )
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise RegistryError(f"no attempt with id {attempt_id} in the registry")

    def add_checkpoint(
        self, session_id: int, *, frame: int, kind: str, path: str, sha256: str, size_bytes: int
    ) -> CheckpointRecord:
        with self._session(write=True) as session:
            owner = self._session_row(session, session_id)
            row = CheckpointRow(
                session_id=session_id, frame=frame, kind=kind, path=path, sha256=sha256,
                size_bytes=size_bytes, created_at=time.time(),
            )  # fmt: skip
            session.add(row)
            session.flush()
            return _checkpoint_record(row, owner)

    def remove_checkpoint(self, checkpoint_id: int) -> None:
        with self._session(write=True) as session:
            result = session.execute(delete(CheckpointRow).where(CheckpointRow.id == checkpoint_id))
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise RegistryError(f"no checkpoint with id {checkpoint_id} in the registry")

    def add_evaluation(
        self, session_id: int, *, frame: int, mean: float, std: float, min: float, max: float,
        episodes: int, kind: str = "train",
    ) -> EvaluationRecord:  # fmt: skip
        """Record an evaluation; a "train" one also updates the session's last and best score."""
        if not all(math.isfinite(v) for v in (mean, std, min, max)):
            # SQLite stores NaN as NULL, which would silently lose the row's meaning.
            raise ValueError(f"evaluation scores must be finite: {mean=} {std=} {min=} {max=}")
        with self._session(write=True) as session:
            owner = self._session_row(session, session_id)
            row = EvaluationRow(
                session_id=session_id, frame=frame, kind=kind, mean=mean, std=std, min=min,
                max=max, episodes=episodes, created_at=time.time(),
            )  # fmt: skip
            session.add(row)
            if kind == "train":
                self._track_best(owner, mean)
            session.flush()
            return _evaluation_record(row, owner)

    @staticmethod
    def _track_best(owner: SessionRow, mean: float) -> None:
        owner.last_eval = mean
        if owner.best_eval is None or mean > owner.best_eval:
            owner.best_eval = mean

    @staticmethod
    def _session_row(session: orm.Session, session_id: int) -> SessionRow:
        row = session.get(SessionRow, session_id)
        if row is None:
            raise RegistryError(f"no session with id {session_id} in the registry")
        return row

    # ---- reads -------------------------------------------------------------------------------

    def name_exists(self, name: str) -> str | None:
        """The id of the run holding `name`, or None."""
        with self._session(write=False) as session:
            return session.scalar(select(RunRow.id).where(RunRow.name == name))

    def count_runs(self, status: str | None = None) -> int:
        """How many runs `list_runs(status=status, limit=None)` would list."""
        with self._session(write=False) as session:
            if status not in ("running", CRASHED):
                query = select(func.count()).select_from(RunRow)
                if status is not None:
                    query = query.where(RunRow.status == status)
                return session.scalar(query) or 0
            alive = len(self._live_runs(session, _Liveness()))
            if status == "running":
                return alive
            stored = session.scalar(
                select(func.count()).select_from(RunRow).where(RunRow.status == "running")
            )
            return (stored or 0) - alive

    def list_runs(self, *, status: str | None = None, limit: int | None = 20) -> list[RunSummary]:
        """Runs newest first with session aggregates, in one query, plus one small liveness query
        when the page holds stored-running runs (see _Liveness).

        The limit applies to the runs before the join, so the cost follows the page size, not
        the size of the registry. `status` filters on the status as reported: "running" and
        "crashed" are told apart by first finding which stored-running runs are still alive.
        """
        live = _Liveness()
        page = select(RunRow).order_by(RunRow.created_at.desc(), RunRow.id.desc())
        with self._session(write=False) as session:
            alive: set[str] = set()
            if status in ("running", CRASHED):
                alive = self._live_runs(session, live)
                chosen = RunRow.id.in_(alive) if status == "running" else RunRow.id.not_in(alive)
                page = page.where(RunRow.status == "running", chosen)
            elif status is not None:
                page = page.where(RunRow.status == status)
            if limit is not None:
                page = page.limit(limit)
            rows = session.execute(self._aggregate(page)).all()
            if status is None:
                running = [run.id for run, _, _ in rows if run.status == "running"]
                if running:
                    # A long IN list would hit SQLite's variable limit; all running runs are few.
                    among = RunRow.id.in_(running) if len(running) <= _IN_LIMIT else true()
                    alive = self._live_runs(session, live, among)
        return [
            self._summary(i + 1, run, frames, best, _reported(run.status, run.id in alive))
            for i, (run, frames, best) in enumerate(rows)
        ]

    @staticmethod
    def _aggregate(page: Any) -> Any:
        runs = orm.aliased(RunRow, page.subquery("page"))
        columns = [getattr(runs, c.key) for c in RunRow.__mapper__.column_attrs]
        return (
            select(
                runs,
                func.coalesce(func.sum(SessionRow.frame), 0),
                func.max(SessionRow.best_eval),
            )
            .outerjoin(SessionRow, SessionRow.run_id == runs.id)
            .group_by(*columns)  # every column, as PostgreSQL cannot infer them from a subquery
            .order_by(runs.created_at.desc(), runs.id.desc())
        )

    @staticmethod
    def _live_runs(
        session: orm.Session, live: _Liveness, among: ColumnElement[bool] | None = None
    ) -> set[str]:
        """The ids of the stored-running runs (of `among`) with a session running or pending.

        SQL keeps only the sessions that pass the time test; Python checks their pids.
        """
        columns = (
            SessionRow.run_id, SessionRow.status, SessionRow.host, SessionRow.pid,
            SessionRow.heartbeat_at, RunRow.host, RunRow.pid, RunRow.created_at,
        )  # fmt: skip
        query = (
            select(*columns)
            .join(RunRow, SessionRow.run_id == RunRow.id)
            .where(RunRow.status == "running", live.sql_maybe_alive())
        )
        if among is not None:
            query = query.where(among)
        alive: set[str] = set()
        for run_id, status, host, pid, beat, run_host, run_pid, created in session.execute(query):
            if run_id in alive:
                continue
            if live.session_status(status, host, pid, beat, run_host, run_pid, created) != CRASHED:
                alive.add(run_id)
        return alive

    @staticmethod
    def _summary(
        row_number: int, run: RunRow, frames: int, best: float | None, status: str
    ) -> RunSummary:
        return RunSummary(
            row=row_number, id=run.id, name=run.name, spec_name=run.spec_name,
            algorithm=run.algorithm, env_id=run.env_id, status=status,
            num_sessions=run.num_sessions, frames_done=int(frames),
            frames_target=run.max_frame * run.num_sessions, best_eval=best,
            created_at=run.created_at, finished_at=run.finished_at,
        )  # fmt: skip

    def get_run(self, run_id: str) -> RunDetail:
        """A run with everything recorded about it; statuses as reported (see _Liveness)."""
        live = _Liveness()
        with self._session(write=False) as session:
            run = self._run_row(session, run_id)
            rows = session.scalars(
                select(SessionRow).where(SessionRow.run_id == run_id).order_by(SessionRow.index)
            ).all()
            statuses = [live.session_of(row, run) for row in rows]
            return RunDetail(
                run=_run_record(run, live.run_status(run.status, statuses)),
                sessions=[_session_record(r, s) for r, s in zip(rows, statuses, strict=True)],
                checkpoints=self._checkpoints_where(session, SessionRow.run_id == run_id),
                evaluations=self._evaluations_of(session, run_id),
                spec_revisions=self._revisions_of(session, run_id),
                attempts=self._attempts_of(session, run_id),
                forks=list(
                    session.scalars(
                        select(RunRow.id)
                        .where(RunRow.parent_id == run_id)
                        .order_by(RunRow.created_at, RunRow.id)
                    )
                ),
            )

    @staticmethod
    def _run_row(session: orm.Session, run_id: str) -> RunRow:
        run = session.get(RunRow, run_id)
        if run is None:
            raise RunReferenceError(f"no run with id {run_id!r}; see `rlrun ls`")
        return run

    @staticmethod
    def _checkpoints_where(session: orm.Session, condition: Any) -> list[CheckpointRecord]:
        query = (
            select(CheckpointRow, SessionRow)
            .join(SessionRow, CheckpointRow.session_id == SessionRow.id)
            .where(condition)
            .order_by(SessionRow.index, CheckpointRow.frame, CheckpointRow.id)
        )
        return [_checkpoint_record(c, s) for c, s in session.execute(query)]

    @staticmethod
    def _evaluations_of(session: orm.Session, run_id: str) -> list[EvaluationRecord]:
        query = (
            select(EvaluationRow, SessionRow)
            .join(SessionRow, EvaluationRow.session_id == SessionRow.id)
            .where(SessionRow.run_id == run_id)
            .order_by(SessionRow.index, EvaluationRow.frame, EvaluationRow.id)
        )
        return [_evaluation_record(e, s) for e, s in session.execute(query)]

    @staticmethod
    def _revisions_of(session: orm.Session, run_id: str) -> list[SpecRevisionRecord]:
        rows = session.scalars(
            select(SpecRevisionRow)
            .where(SpecRevisionRow.run_id == run_id)
            .order_by(SpecRevisionRow.revision)
        )
        return [_spec_revision_record(row) for row in rows]

    @staticmethod
    def _attempts_of(session: orm.Session, run_id: str) -> list[AttemptRecord]:
        query = (
            select(AttemptRow, SessionRow.index)
            .join(SessionRow, AttemptRow.session_id == SessionRow.id)
            .where(AttemptRow.run_id == run_id)
            .order_by(AttemptRow.started_at, AttemptRow.id)
        )
        return [_attempt_record(a, index) for a, index in session.execute(query)]

    def latest_spec(self, run_id: str) -> SpecRevisionRecord:
        """The run's newest spec revision (the one training continues under)."""
        with self._session(write=False) as session:
            row = session.scalar(
                select(SpecRevisionRow)
                .where(SpecRevisionRow.run_id == run_id)
                .order_by(SpecRevisionRow.revision.desc())
                .limit(1)
            )
            if row is None:
                raise RunReferenceError(f"no run with id {run_id!r}; see `rlrun ls`")
            return _spec_revision_record(row)

    def get_session(self, run_id: str, index: int) -> SessionRecord:
        """One session; its status as reported (see _Liveness)."""
        with self._session(write=False) as session:
            found = session.execute(
                select(SessionRow, RunRow)
                .join(RunRow, SessionRow.run_id == RunRow.id)
                .where(SessionRow.run_id == run_id, SessionRow.index == index)
            ).one_or_none()
            if found is None:
                raise RunReferenceError(f"run {run_id} has no session s{index}; see `rlrun show`")
            row, run = found
            return _session_record(row, _Liveness().session_of(row, run))

    def live_session(self, run_id: str) -> SessionRecord | None:
        """A session of the run that is still running (fresh heartbeat and, on this host, a live
        pid), or None. `rlrun resume` refuses a run that has one."""
        live = _Liveness()
        with self._session(write=False) as session:
            run = self._run_row(session, run_id)
            rows = session.scalars(
                select(SessionRow)
                .where(SessionRow.run_id == run_id, SessionRow.status == "running")
                .order_by(SessionRow.index)
            )
            for row in rows:
                if live.session_of(row, run) == "running":
                    return _session_record(row)
        return None

    def checkpoints(self, session_id: int) -> list[CheckpointRecord]:
        """The checkpoints of one session, oldest frame first."""
        with self._session(write=False) as session:
            return self._checkpoints_where(session, SessionRow.id == session_id)

    # ---- run references ----------------------------------------------------------------------

    def resolve(self, ref: str | RunRef) -> RunRecord:
        """The run a reference names; the caller handles its /sK and @checkpoint parts."""
        parsed = parse_ref(ref) if isinstance(ref, str) else ref
        with self._session(write=False) as session:
            row = self._find(session, parsed)
            alive = row.status == "running" and bool(
                self._live_runs(session, _Liveness(), RunRow.id == row.id)
            )
            run = _run_record(row, _reported(row.status, alive))
        if parsed.session is not None and parsed.session >= run.num_sessions:
            raise RunReferenceError(
                f"{parsed}: run {run.id} has {_sessions_phrase(run.num_sessions)}"
            )
        return run

    def _find(self, session: orm.Session, ref: RunRef) -> RunRow:
        total = session.scalar(select(func.count()).select_from(RunRow)) or 0
        if total == 0:
            raise RunReferenceError(
                f"no runs in {self.home} yet; start one with `rlrun train reinforce_cartpole`"
            )
        if ref.kind == "token":
            return self._find_token(session, ref.token)
        position = ref.offset if ref.kind == "latest" else ref.row - 1
        if position >= total:
            plural = "run" if total == 1 else "runs"
            raise RunReferenceError(f"{ref.base}: only {total} {plural}; see `rlrun ls`")
        return session.scalars(
            select(RunRow)
            .order_by(RunRow.created_at.desc(), RunRow.id.desc())
            .offset(position)
            .limit(1)
        ).one()

    @staticmethod
    def _find_token(session: orm.Session, token: str) -> RunRow:
        # Ids are lowercase; a name is matched exactly as typed.
        exact = session.get(RunRow, token.lower()) or session.scalar(
            select(RunRow).where(RunRow.name == token)
        )
        if exact is not None:
            return exact
        candidates = session.scalars(
            select(RunRow)
            .where(RunRow.id.startswith(token.lower(), autoescape=True))
            .order_by(RunRow.created_at.desc(), RunRow.id.desc())
            .limit(_MAX_CANDIDATES + 1)
        ).all()
        if not candidates:
            raise RunReferenceError(f"no run matches {token!r}; see `rlrun ls`")
        if len(candidates) > 1:
            raise RunReferenceError(_ambiguous(token, candidates))
        return candidates[0]


def _reported(stored: str, alive: bool) -> str:
    """A run's status as reported: a stored-running run with no live session is crashed."""
    return CRASHED if stored == "running" and not alive else stored


def _sessions_phrase(count: int) -> str:
    if count == 1:
        return "1 session (s0)"
    return f"{count} sessions (s0..s{count - 1})"


def _ambiguous(token: str, candidates: Sequence[RunRow]) -> str:
    shown = [
        f"{run.id} ({run.name + ', ' if run.name else ''}{_format_time(run.created_at)})"
        for run in candidates[:_MAX_CANDIDATES]
    ]
    more = ", and more" if len(candidates) > _MAX_CANDIDATES else ""
    return f"{token!r} is ambiguous: {', '.join(shown)}{more}; type more of the id"
