"""Schema versioning, one unit: the Alembic migrations' environment and how they are run, the
revision a database is at, and upgrading a registry (a SQLite file under a file lock after a
backup copy; a server under an advisory lock, only when asked).

Nothing here imports SQLAlchemy or Alembic at module level: `rlrun db current` on a SQLite file
reads its revision through the standard library. The tables live in `rlrun.registry.tables`.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rlrun import paths
from rlrun.errors import RegistryError
from rlrun.registry.database import (
    SCHEMA_HEAD,
    VERSION_TABLE,
    explained,
    is_sqlite,
    label,
    read_revision,
    sqlite_file,
)
from rlrun.registry.sqlite import SqliteDatabase

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection, Engine

    from rlrun.registry.server import ServerDatabase


# --------------------------------------------------------------------------------------------
# Migrations (Alembic).


def migrations_dir() -> Path:
    """The Alembic environment: inside the package in a wheel, at the repo top in a checkout."""
    package = Path(__file__).resolve().parent.parent  # rlrun/
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


@contextmanager
def migration_connection(engine: Engine) -> Iterator[Connection]:
    """A connection inside one write transaction, with SQLite foreign keys off meanwhile.

    SQLite batch migrations copy a table, drop the original and rename the copy; with foreign
    keys on, the DROP would cascade-delete every child row. The pragma is a no-op inside a
    transaction, so it is switched on the raw connection before BEGIN and restored after, and
    the references are checked before committing.
    """
    from rlrun.registry.server import WRITE_FLAG

    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        if sqlite:
            _raw_execute(raw, "PRAGMA foreign_keys=OFF")
        try:
            conn.info[WRITE_FLAG] = True
            with conn.begin():
                yield conn
                if sqlite:
                    _check_foreign_keys(conn)
        finally:
            conn.info[WRITE_FLAG] = False
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


def revision_on(conn: Connection) -> str | None:
    """The schema revision seen through an open connection (None: no schema yet)."""
    from rlrun.registry.server import ServerTransaction

    return read_revision(ServerTransaction(conn))


def current_revision(engine: Engine) -> str | None:
    """The schema revision stored in the database, None when it has no schema yet."""
    from rlrun.registry.server import WRITE_FLAG

    with engine.connect() as conn:
        conn.info[WRITE_FLAG] = False
        return revision_on(conn)


def upgrade_on(conn: Connection, target: str = "head") -> None:
    """Run the migrations on an open connection, inside its transaction."""
    from alembic import command

    command.upgrade(alembic_config(conn), target)


# --------------------------------------------------------------------------------------------
# Server databases (PostgreSQL): the schema is created in an empty database on first use and
# upgraded only when asked (`rlrun db upgrade`), so code of another version sharing the server
# never changes it behind its users' backs. An advisory lock serialises concurrent first users.

_ADVISORY_LOCK = 0x726C72756E  # "rlrun"


@contextmanager
def server_schema_lock(engine: Engine) -> Iterator[Connection]:
    """A write transaction that holds the registry's advisory lock until it ends (PostgreSQL);
    on other servers, just a transaction."""
    from sqlalchemy import text

    with migration_connection(engine) as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK})
        yield conn


# --------------------------------------------------------------------------------------------
# Upgrading a registry.


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


def _newer_message(where: str, revision: str) -> str:
    return (
        f"registry at {where} is at schema revision {revision}, newer than this rlrun (head {SCHEMA_HEAD});"
        " upgrade rlrun"
    )


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


def upgrade_sqlite(db_file: Path) -> Upgrade | None:
    """Bring a SQLite file to SCHEMA_HEAD under the file lock, copying it first when it holds a
    schema already. None when another process got there first."""
    with _file_lock(_lock_file(db_file)):
        probe = SqliteDatabase(str(db_file))
        try:
            revision = probe.revision()
            created = revision is None and _created_at_head(probe)
        finally:
            probe.close()
        if created:
            return Upgrade(str(db_file), None, SCHEMA_HEAD, None)
        if revision == SCHEMA_HEAD:
            return None
        from rlrun.registry.server import create_registry_engine

        if revision is not None and revision not in known_revisions():
            raise RegistryError(_newer_message(str(db_file), revision))
        backup = None if revision is None else _backup(db_file, revision)
        engine = create_registry_engine(f"sqlite:///{db_file}")
        try:
            upgrade_schema(engine)
        finally:
            engine.dispose()
    if backup is not None:
        message = "rlrun: upgraded the registry %s from schema %s to %s; the old file is kept at %s"
        logging.getLogger(__name__).warning(message, db_file, revision, SCHEMA_HEAD, backup)
    return Upgrade(str(db_file), revision, SCHEMA_HEAD, backup)


def _created_at_head(database: SqliteDatabase) -> bool:
    """Give a new registry file the head schema at once: head.sql's tables (which the migrations
    build, a test holds them to it) and the head revision, in one write transaction. Running every
    migration from empty instead costs a new home's first command about half a second of Alembic.
    False, with nothing written, where the file holds a schema already (one begun by something
    else): the migrations decide what to do with it."""
    from rlrun.registry.sqlite import head_statements

    with database.transaction(write=True) as tx:
        if tx.rows("SELECT count(*) FROM sqlite_master")[0][0]:
            return False
        for statement in head_statements():
            tx.execute(statement)
        tx.execute(
            f"CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL,"
            f" CONSTRAINT {VERSION_TABLE}_pkc PRIMARY KEY (version_num))"  # as Alembic's migrations leave it
        )
        tx.execute(f"INSERT INTO {VERSION_TABLE} (version_num) VALUES (:head)", {"head": SCHEMA_HEAD})
    return True


def open_server(url: str, *, create: bool, upgrade: bool = False) -> tuple[ServerDatabase, Upgrade | None]:
    """A server database at SCHEMA_HEAD: an empty one gets the schema (if `create`), an older one
    is upgraded only when `upgrade` is asked for, a newer one is refused."""
    from rlrun.registry.server import ServerDatabase

    database = ServerDatabase(url)
    try:
        with explained(url, database.unusable_errors):
            with database.engine.connect() as conn:
                revision = revision_on(conn)
            if revision == SCHEMA_HEAD:
                return database, None
            if revision is None and not create:
                raise NoSchema
            done = _migrate_server(database, url, upgrade=upgrade or revision is None)
        return database, done
    except BaseException:
        database.close()
        raise


class NoSchema(Exception):
    """A server database without a schema, opened without create: read it as empty."""


def _migrate_server(database: ServerDatabase, url: str, *, upgrade: bool) -> Upgrade | None:
    with server_schema_lock(database.engine) as conn:
        revision = revision_on(conn)  # another process may have done it meanwhile
        if revision == SCHEMA_HEAD:
            return None
        if revision is not None and revision not in known_revisions():
            raise RegistryError(_newer_message(label(url), revision))
        if not upgrade:
            raise RegistryError(
                f"registry at {label(url)} is at schema revision {revision} and this rlrun needs {SCHEMA_HEAD};"
                " back the database up and run `rlrun db upgrade`"
            )
        upgrade_on(conn)
    return Upgrade(label(url), revision, SCHEMA_HEAD, None)


def schema_state(home: Path | str, url: str | None = None) -> SchemaState:
    """The registry's schema revision, read without changing anything."""
    url = url or paths.database_url(Path(home))
    db_file = sqlite_file(url)
    if db_file is not None:
        if not db_file.exists():
            return SchemaState(str(db_file), None, SCHEMA_HEAD, exists=False)
        database = SqliteDatabase(str(db_file))
        try:
            with explained(url, database.unusable_errors):
                return SchemaState(str(db_file), database.revision(), SCHEMA_HEAD, exists=True)
        finally:
            database.close()
    from rlrun.registry.server import ServerDatabase

    server = ServerDatabase(url)
    try:
        with explained(url, server.unusable_errors), server.engine.connect() as conn:
            return SchemaState(label(url), revision_on(conn), SCHEMA_HEAD, exists=True)
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
        return upgrade_sqlite(db_file)
    if not is_sqlite(url):
        database, done = open_server(url, create=True, upgrade=True)
        database.close()
        return done
    return None
