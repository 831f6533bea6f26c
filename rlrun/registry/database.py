"""The small interface both database drivers implement, and what is common to them: URLs, the
schema revision read, the error policy and the base every part of `Registry` builds on.

Two drivers: `rlrun.registry.sqlite` (the standard library's sqlite3: a local registry never
imports SQLAlchemy) and `rlrun.registry.server` (SQLAlchemy, loaded only for a server URL). Both
run plain, portable SQL with `:name` parameters, one short transaction at a time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rlrun import paths, storage
from rlrun.errors import BadInput, RegistryError, RegistryUnavailable

# The Alembic head this code was written against; a test keeps it equal to the migrations' head.
SCHEMA_HEAD = "0012_origin"
VERSION_TABLE = "rlrun_alembic_version"


class Transaction(Protocol):
    dialect: str

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]: ...
    def execute(self, sql: str, params: dict[str, Any] | None = None) -> int: ...
    def insert(self, sql: str, params: dict[str, Any]) -> int: ...
    def now(self) -> float: ...


class Database(Protocol):
    @property
    def integrity_errors(self) -> tuple[type[Exception], ...]: ...
    @property
    def unusable_errors(self) -> tuple[type[Exception], ...]: ...
    def transaction(self, write: bool) -> Any: ...
    def is_transient(self, error: BaseException) -> bool: ...
    def close(self) -> None: ...


# The database's clock in epoch seconds: every timestamp the registry writes, and the "now" that
# staleness is judged against, so hosts with skewed clocks agree (Optuna's heartbeat rule).
_CLOCK = {
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
    "postgresql": "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)",
}


def clock_sql(dialect: str) -> str:
    """An SQL expression for the database's clock, in epoch seconds."""
    return _CLOCK.get(dialect, _CLOCK["postgresql"])


_TABLE_EXISTS_SQL = {
    "sqlite": "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name",
    "postgresql": (
        "SELECT 1 FROM information_schema.tables WHERE table_name = :name AND table_schema = current_schema()"
    ),
}


def read_revision(tx: Transaction) -> str | None:
    """The schema revision stored in the database, None when it has no schema yet."""
    exists = _TABLE_EXISTS_SQL.get(tx.dialect, _TABLE_EXISTS_SQL["postgresql"])
    if not tx.rows(exists, {"name": VERSION_TABLE}):
        return None
    found = tx.rows(f"SELECT version_num FROM {VERSION_TABLE}")
    return found[0][0] if found else None


# The databases the registry's SQL is written for (its clock and catalogue queries above), and
# how a URL names them: any driver after a "+", as SQLAlchemy spells it.
DIALECTS = ("sqlite", "postgresql")
URL_FORMS = "sqlite:///path/to/registry.sqlite or postgresql+psycopg://user:password@host/db"


def dialect(url: str) -> str:
    """The database a URL names, "sqlite" or "postgresql"; anything else is bad input, refused
    before any driver is loaded. Parsed by hand: no SQLAlchemy on the fast path."""
    scheme, sep, _ = url.partition("://")
    name = scheme.split("+")[0]
    if not sep or name not in DIALECTS:
        problem = f"unknown database {name!r}" if sep else "not a URL"
        raise BadInput(f"registry URL {label(url)} (${paths.DB_ENV}): {problem}; use {URL_FORMS}")
    return name


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (`sqlite:///relative.db`, `sqlite:////abs/path.db`); None for
    in-memory SQLite and other databases."""
    if not is_sqlite(url):
        return None
    return _sqlite_path(url)


def _sqlite_path(url: str) -> Path | None:
    database = url.partition("://")[2].partition("?")[0].removeprefix("/")
    return None if database in ("", ":memory:") else Path(database)


def is_sqlite(url: str) -> bool:
    return dialect(url) == "sqlite"


def label(url: str) -> str:
    """A URL fit to print: the password hidden. Any text, even one `dialect` refuses."""
    scheme, sep, rest = url.partition("://")
    file = _sqlite_path(url) if scheme.split("+")[0] == "sqlite" else None
    if file is not None:
        return str(file)
    credentials, at, host = (rest if sep else url).rpartition("@")
    if at and ":" in credentials:
        credentials = credentials.split(":")[0] + ":***"
    return f"{scheme}{sep}{credentials}{at}{host}" if sep else f"{credentials}{at}{host}"


class Conflict(RegistryError):
    """A write broke a unique or foreign-key constraint: another writer won a race."""


class LeaseLost(RegistryError):
    """A fenced write found the session's lease taken by a newer attempt (see `Connected.fence`):
    this attempt is stale and must write nothing more."""

    def __init__(self, session_id: int, held: int, current: int | None) -> None:
        super().__init__(
            f"session {session_id}: this attempt's lease {held} was taken over (the session's lease is"
            f" now {current}); a newer attempt continues it, this one stops without writing"
        )
        self.session_id, self.held, self.current = session_id, held, current


@contextmanager
def explained(url: str, errors: tuple[type[Exception], ...]) -> Iterator[None]:
    """A database that cannot be used (not a database, unreachable, locked for too long) is one
    line saying so and what to do, not a traceback."""
    try:
        yield
    except RegistryError:
        raise
    except errors as error:
        detail = (str(getattr(error, "orig", None) or error).strip().splitlines() or [type(error).__name__])[0]
        busy = True  # the same command succeeds once the database answers: RegistryUnavailable, exit 3
        if "locked" in detail:
            advice = "another process held it for more than 30 s; try again"
        elif "too many clients" in detail or "connection slots" in detail:
            advice = (
                "the server's max_connections is reached (every session holds one): raise it, or connect"
                " through PgBouncer in transaction mode (docs/how-to/postgresql.md)"
            )
        elif sqlite_file(url) is not None:
            busy = False  # a file that is not a database: to be repaired, not waited for
            advice = "if the file is damaged, move it aside and run `rlrun db rebuild` (or restore a .bak copy)"
        else:
            busy = any(word in detail.lower() for word in UNREACHABLE_WORDS)  # not: a wrong password
            advice = f"check {paths.DB_ENV} and that the server is up"
        kind = RegistryUnavailable if busy else RegistryError
        raise kind(f"registry at {label(url)} cannot be used: {detail}; {advice}") from error


UNREACHABLE_WORDS = (
    "connection refused",
    "could not connect",
    "connection failed",
    "timeout",
    "timed out",
    "no route to host",
    "could not translate host name",
    "server closed the connection",
)
"""What a database driver's message says when the server is not there (not: a wrong password)."""


T = TypeVar("T")

# How long a retried write keeps trying through transient errors (see `Connected._write`): long
# enough to ride out a PostgreSQL restart or a managed failover (seconds to about a minute) and
# a burst of "too many clients", short enough that a registry that is really gone fails the
# session within a minute instead of hanging it. A session silent past `liveness.stale_after_seconds()` (30 s)
# may meanwhile be retried elsewhere; its lease then stops this attempt at its next write.
RETRY_ENV = "RLRUN_DB_RETRY_SECONDS"
RETRY_SECONDS = 60.0
FIRST_DELAY, MAX_DELAY = 0.05, 5.0  # exponential backoff between tries, in seconds


def retry_seconds() -> float:
    """The retry budget: $RLRUN_DB_RETRY_SECONDS, else RETRY_SECONDS; 0 turns retries off."""
    given = os.environ.get(RETRY_ENV)
    if not given:
        return RETRY_SECONDS
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise BadInput(
            f"${RETRY_ENV}={given!r} is not a number of seconds >= 0; unset it for the default ({RETRY_SECONDS:g} s)"
        )
    return seconds


class Connected:
    """An open registry database and its one transaction helper with its one error policy; the
    parts of `Registry` (store, queries, resolve) build on it."""

    def __init__(self, home: Path, url: str, database: Database, *, missing: bool = False, upgrade: Any = None) -> None:
        self.home = home
        self.url = url
        self._db = database
        self._missing = missing  # opened with create=False where there is no registry yet
        self.upgrade = upgrade  # what opening it did to the schema (a schema.Upgrade), if anything
        self._fence: tuple[int, int] | None = None  # (session id, lease token) every write must hold
        self.retry_seconds = retry_seconds()  # how long `_retried` keeps trying; 0: not at all

    def fence(self, session_id: int, lease: int) -> None:
        """From now on every write through this registry first checks, inside its transaction and
        holding the session's row, that `lease` is still the session's token, else raises
        LeaseLost and writes nothing. A file written inside such a transaction (`Writes.fenced`)
        is fenced too: a newer attempt's takeover waits for that row, so it cannot slip between
        the check and the write."""
        self._fence = (session_id, lease)

    def _check_fence(self, tx: Transaction) -> None:
        if self._fence is None:
            return
        session_id, held = self._fence
        lock = "" if tx.dialect == "sqlite" else " FOR UPDATE"  # SQLite's BEGIN IMMEDIATE already holds the lock
        found = tx.rows(f"SELECT lease FROM sessions WHERE id = :id{lock}", {"id": session_id})
        current = found[0][0] if found else None
        if current != held:
            raise LeaseLost(session_id, held, current)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Transaction]:
        """One transaction (BEGIN IMMEDIATE for writes on SQLite), committed on success."""
        with explained(self.url, self._db.unusable_errors), self._attempt(write) as tx:
            yield tx

    @contextmanager
    def _attempt(self, write: bool) -> Iterator[Transaction]:
        """One try at a transaction, its driver's errors as they are (but for constraints)."""
        if write and self._missing:
            raise RegistryError(f"no registry at {label(self.url)}; it is created by `rlrun train`")
        try:
            # a manifest the transaction rewrites reaches a URL home's store after the commit
            with storage.held_until_committed(), self._db.transaction(write) as tx:
                if write:
                    self._check_fence(tx)
                yield tx
        except self._db.integrity_errors as error:
            raise Conflict(str(error)) from error

    def _write(self, body: Callable[[Transaction], T]) -> T:
        """Run `body` in a write transaction, retried through transient errors (`_retried`)."""
        return self._retried(body, write=True)

    def _read(self, body: Callable[[Transaction], T]) -> T:
        """Run `body` in a read transaction, retried through transient errors (`_retried`)."""
        return self._retried(body, write=False)

    def _retried(self, body: Callable[[Transaction], T], *, write: bool) -> T:
        """Run `body` in a transaction; after a transient error (connection lost or refused,
        server shutting down, too many clients, serialization failure or deadlock, SQLite busy)
        run it again in a new transaction, on a new connection where the old one died, with
        exponential backoff for up to `self.retry_seconds`. Anything else (a constraint, LeaseLost,
        bad SQL) is raised at once. A write's fence is checked again on each try.

        The rule for callers: `body` must be safe to run twice. A connection lost during COMMIT
        leaves it unknown whether the earlier try committed, so a body that inserts first looks
        for the row it would insert, and a file it writes must already be there as it wants it."""
        budget, delay, started = self.retry_seconds, FIRST_DELAY, time.monotonic()
        with explained(self.url, self._db.unusable_errors):
            while True:
                try:
                    with self._attempt(write) as tx:
                        return body(tx)
                except Exception as error:
                    waited = time.monotonic() - started
                    if isinstance(error, RegistryError) or not self._db.is_transient(error) or waited + delay > budget:
                        raise
                time.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)
