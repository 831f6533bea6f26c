"""SQLite through the standard library: the driver of a local registry (no SQLAlchemy).

WAL lets readers and the writer work side by side, and every write transaction takes the write
lock up front (BEGIN IMMEDIATE) and waits its turn: a transaction that starts as a reader and
then writes cannot be helped by busy_timeout (SQLite answers SQLITE_BUSY at once to avoid a
deadlock), which is where "database is locked" comes from under parallel writers. The pragmas and
the BEGIN statement here are also what the SQLAlchemy engine for migrations uses
(`rlrun.registry.server.create_registry_engine`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlrun.registry.database import clock_sql, read_revision

PRAGMAS = (
    "PRAGMA busy_timeout=30000",  # wait for the lock (up to 30 s) rather than fail at once
    "PRAGMA synchronous=NORMAL",  # durable at checkpoints, safe in WAL mode
    "PRAGMA foreign_keys=ON",  # ON DELETE CASCADE; SQLite leaves it off by default
)
WAL = "PRAGMA journal_mode=WAL"  # kept in the file: set before the first write, never by a reader
BUSY, LOCKED = 5, 6  # SQLite's result codes for a lock held past busy_timeout (primary codes)


def begin_statement(write: bool) -> str:
    """A writer takes the write lock at BEGIN, so it waits (busy_timeout) instead of failing."""
    return "BEGIN IMMEDIATE" if write else "BEGIN"


class SqliteTransaction:
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

    def now(self) -> float:
        return float(self.conn.execute("SELECT " + clock_sql(self.dialect)).fetchone()[0])


class SqliteDatabase:
    """One connection to a SQLite file (or memory), opened on first use, one transaction at a time."""

    integrity_errors: tuple[type[Exception], ...] = (sqlite3.IntegrityError,)
    unusable_errors: tuple[type[Exception], ...] = (sqlite3.DatabaseError,)

    def __init__(self, target: str, *, schema: Sequence[str] = (), busy_timeout: float | None = None) -> None:
        self.target = target
        self._busy_timeout = busy_timeout  # seconds; None keeps PRAGMAS' 30 s (tests shorten it)
        self._schema = schema  # statements to run on a new in-memory database
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._wal = False

    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(self.target, timeout=30, isolation_level=None, check_same_thread=False)
            for pragma in PRAGMAS:
                conn.execute(pragma)
            if self._busy_timeout is not None:
                conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout * 1000)}")
            for statement in self._schema:
                conn.execute(statement)
            self._conn = conn
        return self._conn

    @contextmanager
    def transaction(self, write: bool) -> Iterator[SqliteTransaction]:
        with self._lock:
            conn = self.connection()
            if write and not self._wal:
                self._use_wal(conn)
            conn.execute(begin_statement(write))
            try:
                yield SqliteTransaction(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:  # the body failed, or COMMIT did (a full disk, say)
                    conn.execute("ROLLBACK")
                raise

    @staticmethod
    def is_transient(error: BaseException) -> bool:
        """A lock another connection held past busy_timeout: the same write may succeed later."""
        return isinstance(error, sqlite3.OperationalError) and getattr(error, "sqlite_errorcode", -1) & 0xFF in (
            BUSY,
            LOCKED,
        )

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Write-ahead logging, so readers never block the writer nor the writer readers. The mode
        is kept in the file; it is set before the first write, never by a reader (a refused or
        merely listed registry is left byte for byte as it was)."""
        if self.target != ":memory:" and conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute(WAL)
        self._wal = True

    def revision(self) -> str | None:
        """The schema revision in the file, None when it has no schema yet."""
        with self.transaction(write=False) as tx:
            return read_revision(tx)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


# The head schema's CREATE statements, generated from `rlrun.registry.tables` (a test holds the
# file to it): rendering them with SQLAlchemy would cost `rlrun ls` on a new home over a second.
HEAD_SQL = Path(__file__).with_name("head.sql")


def head_statements() -> list[str]:
    return [statement for statement in HEAD_SQL.read_text(encoding="utf-8").split(";\n") if statement.strip()]


def empty_database() -> SqliteDatabase:
    """An in-memory registry with the schema and no rows: reads where there is no registry yet
    answer empty."""
    return SqliteDatabase(":memory:", schema=head_statements())
