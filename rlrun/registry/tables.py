"""The registry's tables, declared once (SQLAlchemy): the schema the Alembic migrations must build
(`migrations/env.py` compares against it), and the DDL of an empty registry (`head.sql`).

Imported only where SQLAlchemy is wanted anyway (creating, upgrading, comparing schemas); the
fast read path selects with the column lists of `rlrun.registry.records`, which a test holds to
these declarations and to the migrations.
"""

from __future__ import annotations

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
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Constraint names are fixed by convention so migrations can refer to them by name (SQLite batch
# migrations need named constraints to drop or alter them).
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
    parent_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), index=True)
    host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    # The cluster actor that supervises a detached run (NULL: the command that started it does).
    supervisor: Mapped[str | None] = mapped_column(String(255))
    # When `rlrun stop` asked the run to stop (the database's clock); its sessions read it.
    stop_requested_at: Mapped[float | None] = mapped_column(Float)
    # Where the run's folder lives: its home's URL (`s3://bucket/prefix`) or absolute folder, as
    # `paths.home_address` names it (NULL: recorded before 0009, the home the registry is opened
    # with). A registry in $RLRUN_DB may list runs of several homes; commands find each in its own.
    home: Mapped[str | None] = mapped_column(Text)
    # The SLURM jobs that run its sessions, comma-separated in session order (`--slurm`; NULL: none).
    slurm_jobs: Mapped[str | None] = mapped_column(Text)
    # Where it was trained: NULL by rlrun; `sb3`, a foreign run imported from an SB3 / RL Zoo log
    # folder (`rlrun import sb3`): evaluations only, read-only.
    origin: Mapped[str | None] = mapped_column(String(32))


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
    # The fencing token: each attempt takes the next one, and a write whose token is no longer the
    # session's is refused (rlrun.registry.database.LeaseLost).
    lease: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))


class CheckpointRow(Base):
    __tablename__ = "checkpoints"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), index=True)
    frame: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)  # relative to the runs home
    sha256: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Float)


class EvaluationRow(Base):
    __tablename__ = "evaluations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), index=True)
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
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # train | resume | fork
    host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    start_frame: Mapped[int] = mapped_column(BigInteger)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    end_status: Mapped[str | None] = mapped_column(String(16))
    approximate: Mapped[bool] = mapped_column(Boolean, server_default=false())
    note: Mapped[str | None] = mapped_column(Text)  # why a resume was approximate
    node: Mapped[str | None] = mapped_column(String(64))  # the cluster node it ran on (Ray's node id)
    lease: Mapped[int | None] = mapped_column(BigInteger)  # the session's lease token it held


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


class SearchRow(Base):
    """A hyper-parameter search (`rlrun search`): its spec, space, sampler settings and status.
    Its trials are runs, linked through `trials`."""

    __tablename__ = "searches"
    __table_args__ = (Index("ix_searches_created_at", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200), unique=True)
    spec_name: Mapped[str] = mapped_column(String(200))
    spec_json: Mapped[str] = mapped_column(Text)  # the base spec, without its search block
    space_json: Mapped[str] = mapped_column(Text)  # the search block as given
    settings_json: Mapped[str] = mapped_column(Text)  # sampler, pruner, metric, trials, parallel, seed
    status: Mapped[str] = mapped_column(String(16))
    host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    importance_json: Mapped[str | None] = mapped_column(Text)  # each parameter's importance, at the end
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    heartbeat_at: Mapped[float | None] = mapped_column(Float)  # the driver's last sign of life (database clock)
    stop_requested_at: Mapped[float | None] = mapped_column(Float)  # `rlrun stop search:` (database clock)
    driver: Mapped[str | None] = mapped_column(String(255))  # a detached search's actor (NULL: a command)


class TrialRow(Base):
    """One trial of a search: its parameters, what the search made of it, and the run that trained
    it (unlinked, not deleted, when that run is removed: the trial's record is the search's)."""

    __tablename__ = "trials"
    # The unique (search_id, number) index also serves lookups by search_id alone.
    __table_args__ = (UniqueConstraint("search_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    search_id: Mapped[str] = mapped_column(ForeignKey("searches.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"), index=True)
    params_json: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16))  # running | complete | pruned | failed
    value: Mapped[float | None] = mapped_column(Float)
    intermediate_json: Mapped[str] = mapped_column(Text)  # [[frame, value], ...] as the pruner saw them
    system_attrs_json: Mapped[str] = mapped_column(Text)  # the pruner's own notes on the trial (Optuna's)
    note: Mapped[str | None] = mapped_column(Text)  # why it was pruned or failed
    created_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class LineageRow(Base):
    """A population-based training segment's place in its population (`rlrun search --scheduler
    pbt`): one per trial of such a search. The trial trains member `member` in `generation`,
    continuing member `parent_member`'s segment (its run `parent_run_id`, from its snapshot at
    `frame`); `mutated_json` names the values it explored ([] when it went on as it was)."""

    __tablename__ = "lineage"
    __table_args__ = (Index("ix_lineage_search_id", "search_id", "generation", "member"),)

    trial_id: Mapped[int] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    search_id: Mapped[str] = mapped_column(ForeignKey("searches.id", ondelete="CASCADE"))
    member: Mapped[int] = mapped_column(Integer)
    generation: Mapped[int] = mapped_column(Integer)
    parent_member: Mapped[int | None] = mapped_column(Integer)
    parent_run_id: Mapped[str | None] = mapped_column(String(32))  # kept as text: the run may be removed
    frame: Mapped[int] = mapped_column(BigInteger)
    mutated_json: Mapped[str] = mapped_column(Text)


def sqlite_ddl() -> list[str]:
    """CREATE statements for the head schema on SQLite, as `head.sql` ships them (`sqlite_script`)."""
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    dialect = sqlite.dialect()
    statements = []
    for table in Base.metadata.sorted_tables:
        statements.append(str(CreateTable(table).compile(dialect=dialect)))
        indexes = sorted(table.indexes, key=lambda index: str(index.name))  # a set: sorted, for a stable file
        statements += [str(CreateIndex(index).compile(dialect=dialect)) for index in indexes]
    return ["\n".join(line.rstrip() for line in statement.strip().splitlines()) for statement in statements]


def sqlite_script() -> str:
    """The text of `rlrun/registry/head.sql`, which an empty registry runs so that opening one
    needs no SQLAlchemy; tests/unit/test_registry_rules.py holds the file to these tables."""
    return HEAD_SQL_HEADER + "".join(statement + ";\n\n" for statement in sqlite_ddl()).rstrip("\n") + "\n"


HEAD_SQL_HEADER = """\
-- The head schema on SQLite: what an empty registry (in memory, where there is no registry file
-- yet) is made of. Generated from rlrun/registry/tables.py, never edited by hand:
--   python -c 'from rlrun.registry.tables import sqlite_script; print(sqlite_script(), end="")' \\
--       > rlrun/registry/head.sql

"""
