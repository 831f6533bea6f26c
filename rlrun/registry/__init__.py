"""The run registry: the one package that owns the database.

It indexes runs, sessions, checkpoints, evaluations, spec revisions and attempts, in a SQLite file
inside the runs home by default, or in any database SQLAlchemy reaches through `RLRUN_DB`
(PostgreSQL is tested). Every method runs one short transaction of plain, portable SQL and returns
immutable records, so callers can keep results after the transaction is over.

One concern per module:
    records   the records handed out, the statuses, the column lists
    liveness  statuses as reported: crashed, settled, the session-to-run rule
    database  the driver interface, URLs, the revision read, the error policy
    sqlite    the standard library's sqlite3 driver (a local registry never imports SQLAlchemy)
    server    SQLAlchemy engines: server registries, and what migrations run on
    tables    the tables, declared once (SQLAlchemy), for Alembic
    schema    migrations, the revision a database is at, upgrades and backups
    store     writes;  search_store: a search's writes;  queries: reads;  resolve: run references
    manifest  the run folder's `run.json` and a search's `searches/<id>.json`, written and read

Fast to open: on SQLite the registry talks to the file through sqlite3 and checks the schema
revision with one query, so `rlrun ls` and `rlrun show` never import SQLAlchemy, Alembic, torch or
gymnasium. A local file at an older schema revision is upgraded on open, under a lock, after a
backup copy; a server database only by `rlrun db upgrade`; a database newer than this code is
refused.
"""

from __future__ import annotations

from pathlib import Path

from rlrun import paths
from rlrun.registry.database import (
    SCHEMA_HEAD,
    VERSION_TABLE,
    explained,
    is_sqlite,
    retry_seconds,
    sqlite_file,
)
from rlrun.registry.liveness import run_status, stale_after_seconds
from rlrun.registry.manifest import MANIFEST, MANIFEST_FORMAT, Manifest, read_manifest
from rlrun.registry.records import (
    ATTEMPT_END_STATUSES,
    ATTEMPT_KINDS,
    CRASHED,
    LISTED_RUN_STATUSES,
    RUN_STATUSES,
    SESSION_STATUSES,
    AttemptRecord,
    CheckpointRecord,
    EvaluationRecord,
    LineageRecord,
    RestoredRun,
    RunDetail,
    RunRecord,
    RunSummary,
    SessionRecord,
    SpecRevisionRecord,
)
from rlrun.registry.resolve import CheckpointChoice, Resolution, choose_checkpoint
from rlrun.registry.schema import (
    NoSchema,
    SchemaState,
    Upgrade,
    open_server,
    schema_state,
    upgrade_registry,
    upgrade_sqlite,
)
from rlrun.registry.search_store import SearchWrites
from rlrun.registry.sqlite import SqliteDatabase, empty_database

__all__ = [
    "ATTEMPT_END_STATUSES",
    "ATTEMPT_KINDS",
    "CRASHED",
    "LISTED_RUN_STATUSES",
    "MANIFEST",
    "MANIFEST_FORMAT",
    "RUN_STATUSES",
    "SCHEMA_HEAD",
    "SESSION_STATUSES",
    "VERSION_TABLE",
    "AttemptRecord",
    "CheckpointChoice",
    "CheckpointRecord",
    "EvaluationRecord",
    "LineageRecord",
    "Manifest",
    "Registry",
    "RestoredRun",
    "RunDetail",
    "RunRecord",
    "RunSummary",
    "SchemaState",
    "SessionRecord",
    "SpecRevisionRecord",
    "Upgrade",
    "choose_checkpoint",
    "read_manifest",
    "run_status",
    "schema_state",
    "sqlite_file",
    "stale_after_seconds",
    "upgrade_registry",
]


class Registry(SearchWrites, Resolution):
    """The runs, sessions, checkpoints, evaluations and spec revisions of one runs home: writes
    (`store`, `search_store`), reads (`queries`) and run references (`resolve`) on one open database."""

    @classmethod
    def open(cls, home: Path | str, url: str | None = None, *, create: bool = True) -> Registry:
        """Open the registry of `home`, creating or upgrading its schema when needed.

        With create=False and no database file, nothing is written: the registry answers every
        read as empty and refuses writes.
        """
        retry_seconds()  # a bad $RLRUN_DB_RETRY_SECONDS is refused before anything is written
        home = Path(home)
        url = url or paths.database_url(home)
        db_file = sqlite_file(url)
        if db_file is None:
            return cls._open_elsewhere(home, url, create)
        if not db_file.exists() and not create:
            return cls(home, url, empty_database(), missing=True)
        paths.check_folder(db_file.parent, f"${paths.DB_ENV} {url}: folder")
        db_file.parent.mkdir(parents=True, exist_ok=True)
        database = SqliteDatabase(str(db_file))
        try:
            with explained(url, database.unusable_errors):
                done = upgrade_sqlite(db_file) if database.revision() != SCHEMA_HEAD else None
        except BaseException:
            database.close()
            raise
        return cls(home, url, database, upgrade=done)

    @classmethod
    def _open_elsewhere(cls, home: Path, url: str, create: bool) -> Registry:
        if is_sqlite(url):  # in memory: a registry that lives as long as this object
            return cls(home, url, empty_database())
        try:
            database, done = open_server(url, create=create)
        except NoSchema:
            return cls(home, url, empty_database(), missing=True)
        return cls(home, url, database, upgrade=done)

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
