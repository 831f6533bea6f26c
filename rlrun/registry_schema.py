"""The SQLAlchemy half of the registry: table declarations, engines and Alembic migrations.

`rlrun.registry` owns the database and speaks plain SQL to it; it imports this module only when
it needs SQLAlchemy: to create or upgrade a schema, or to reach a server database (PostgreSQL),
so that registry-only commands on the local SQLite file never pay for importing SQLAlchemy. The
Alembic environment in `migrations/` and the migration tests use the declarations here as the
schema the migrations must build.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    false,
    text,
)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.pool import StaticPool

from rlrun.errors import RegistryError

if TYPE_CHECKING:
    from alembic.config import Config

VERSION_TABLE = "rlrun_alembic_version"
# Set on a connection before it begins, read by the SQLite "begin" hook (see _on_sqlite_begin).
_WRITE_FLAG = "rlrun_write"


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



# --------------------------------------------------------------------------------------------
# Server databases (PostgreSQL): the schema is created in an empty database on first use and
# upgraded only when asked (`rlrun db upgrade`), so code of another version sharing the server
# never changes it behind its users' backs. An advisory lock serialises concurrent first users.

_ADVISORY_LOCK = 0x726C72756E  # "rlrun"


@contextmanager
def server_schema_lock(engine: Engine) -> Iterator[Connection]:
    """A write transaction that holds the registry's advisory lock until it ends (PostgreSQL);
    on other servers, just a transaction."""
    with migration_connection(engine) as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK})
        yield conn


def revision_on(conn: Connection) -> str | None:
    """The schema revision seen through an open connection (None: no schema yet)."""
    if not conn.dialect.has_table(conn, VERSION_TABLE):
        return None
    return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def upgrade_on(conn: Connection, target: str = "head") -> None:
    """Run the migrations on an open connection, inside its transaction."""
    from alembic import command

    command.upgrade(alembic_config(conn), target)


class ServerTransaction:
    """One transaction on a server database, with the small interface `rlrun.registry` uses:
    plain SQL with `:name` parameters."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.dialect = conn.dialect.name

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self.conn.execute(text(sql), params or {})]

    def execute(self, sql: str, params: dict[str, Any] | None = None) -> int:
        return int(self.conn.execute(text(sql), params or {}).rowcount)

    def insert(self, sql: str, params: dict[str, Any]) -> int:
        """Run an INSERT and return the new row's id."""
        return int(self.conn.execute(text(sql + " RETURNING id"), params).scalar_one())


class ServerDatabase:
    """A pooled engine on a server database; `transaction` yields a ServerTransaction."""

    def __init__(self, url: str) -> None:
        self.engine = create_registry_engine(url)

    @property
    def integrity_errors(self) -> tuple[type[Exception], ...]:
        """What a broken unique or foreign-key constraint raises here."""
        from sqlalchemy import exc

        return (exc.IntegrityError,)

    @property
    def unusable_errors(self) -> tuple[type[Exception], ...]:
        """What an unreachable or broken database raises here."""
        from sqlalchemy import exc

        return (exc.OperationalError, exc.DatabaseError, exc.InterfaceError)

    @contextmanager
    def transaction(self, write: bool) -> Iterator[ServerTransaction]:
        with self.engine.connect() as conn, conn.begin():
            yield ServerTransaction(conn)

    def close(self) -> None:
        self.engine.dispose()


def sqlite_ddl() -> list[str]:
    """CREATE statements for the head schema on SQLite: an empty in-memory registry answers
    reads when there is no registry file yet."""
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    dialect = sqlite.dialect()
    statements = []
    for table in Base.metadata.sorted_tables:
        statements.append(str(CreateTable(table).compile(dialect=dialect)))
        statements += [str(CreateIndex(index).compile(dialect=dialect)) for index in table.indexes]
    return statements
