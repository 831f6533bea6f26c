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

# PostgreSQL's SQLSTATEs after which the same transaction may succeed when run again (class 08,
# connection exceptions, too): the server shutting down or starting (57P01-03), out of connection
# slots (53300), a serialization failure or deadlock that rolled the transaction back (40001, 40P01).
TRANSIENT_SQLSTATES = ("57P01", "57P02", "57P03", "53300", "40001", "40P01")
# What a connection attempt that got no SQLSTATE says when retrying cannot help.
PERMANENT_CONNECT_FAILURES = ("authentication failed", "does not exist", "no pg_hba.conf entry")

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
        # pool_pre_ping: a pooled connection the server dropped while idle (a restart, an admin's
        # pg_terminate_backend) is replaced at checkout, so no transaction starts on a dead one;
        # one lost mid-transaction is `Connected._retried`'s.
        return create_engine(url, connect_args=_server_connect_args(url), pool_pre_ping=True)
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

    @staticmethod
    def is_transient(error: BaseException) -> bool:
        """An error after which the same transaction may succeed on a new connection: the
        connection was lost or refused, the server is restarting or full, or it rolled the
        transaction back to break a serialization conflict or deadlock."""
        from sqlalchemy import exc

        if not isinstance(error, exc.DBAPIError):
            return False
        if error.connection_invalidated:  # SQLAlchemy saw a disconnect and dropped the pool's connections
            return True
        state = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
        if state:
            return str(state).startswith("08") or state in TRANSIENT_SQLSTATES
        # No SQLSTATE: the server never answered (refused, closed, reset), unless it said why.
        return isinstance(error, exc.OperationalError) and not any(
            failure in str(error.orig) for failure in PERMANENT_CONNECT_FAILURES
        )

    @contextmanager
    def transaction(self, write: bool) -> Iterator[ServerTransaction]:
        with self.engine.connect() as conn, conn.begin():
            yield ServerTransaction(conn)

    def close(self) -> None:
        self.engine.dispose()
