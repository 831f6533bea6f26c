"""Databases reached through SQLAlchemy: a server registry (PostgreSQL is tested) at run time, and
the engines the migrations run on (a SQLite file included). Imported only for a server URL or to
create, upgrade or compare a schema, so a local registry's reads never load SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import create_engine, event, make_url, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from rlrun.registry import sqlite
from rlrun.registry.database import clock_sql, is_sqlite, sqlite_file

# Set on a connection before it begins, read by the SQLite "begin" hook (see _on_sqlite_begin).
WRITE_FLAG = "rlrun_write"


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Stop pysqlite from issuing its own BEGIN; _on_sqlite_begin issues the right one.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    # busy_timeout (first of PRAGMAS) before journal_mode, which may itself wait for a lock.
    for pragma in (*sqlite.PRAGMAS, sqlite.WAL):
        cursor.execute(pragma)
    cursor.close()


def _on_sqlite_begin(conn: Connection) -> None:
    conn.exec_driver_sql(sqlite.begin_statement(bool(conn.info.get(WRITE_FLAG))))


def create_registry_engine(url: str) -> Engine:
    """An engine configured the way the registry needs it (pragmas and BEGIN control on SQLite)."""
    if not is_sqlite(url):
        return create_engine(url, connect_args=_server_connect_args(url))
    if sqlite_file(url) is None:
        # One shared connection, or every checkout would see a different empty database.
        engine = create_engine(url, poolclass=StaticPool, connect_args={"timeout": 30})
    else:
        engine = create_engine(url, connect_args={"timeout": 30})
    event.listen(engine, "connect", _on_sqlite_connect)
    event.listen(engine, "begin", _on_sqlite_begin)
    return engine


def _server_connect_args(url: str) -> dict[str, Any]:
    """psycopg (3) prepares a statement on the server once a connection has run it five times; a
    pooler in transaction mode (PgBouncer before 1.21, the usual way to give hundreds of sessions
    one server) hands the next transaction another server connection, where that statement is
    missing or already taken ("prepared statement "_pg3_0" already exists"). The registry's
    statements are small and planned in microseconds: never prepare them."""
    return {"prepare_threshold": None} if make_url(url).get_driver_name() == "psycopg" else {}


class ServerTransaction:
    """One transaction through SQLAlchemy, with the registry's small `Transaction` interface: plain
    SQL with `:name` parameters."""

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

    def now(self) -> float:
        return float(self.conn.execute(text("SELECT " + clock_sql(self.dialect))).scalar_one())


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
