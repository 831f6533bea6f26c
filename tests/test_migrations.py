"""Alembic migrations: one head, matching the code's SCHEMA_HEAD and models, reversible."""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

from rlrun.errors import RegistryError
from rlrun.paths import REGISTRY_FILE
from rlrun.registry import SCHEMA_HEAD, Registry
from rlrun.registry.database import VERSION_TABLE
from rlrun.registry.schema import (
    alembic_config,
    current_revision,
    downgrade_schema,
    migration_connection,
    migrations_dir,
    upgrade_schema,
    upgrade_sqlite,
)
from rlrun.registry.server import create_registry_engine
from rlrun.registry.tables import Base

pytest_plugins = ["postgres_server"]

TABLES = {
    "runs",
    "sessions",
    "checkpoints",
    "evaluations",
    "spec_revisions",
    "attempts",
    "searches",
    "trials",
    "lineage",
}


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = create_registry_engine(f"sqlite:///{tmp_path / 'registry.sqlite'}")
    yield engine
    engine.dispose()


def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def _tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def _drift(engine: Engine) -> list[object]:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "version_table": VERSION_TABLE,
                "compare_type": True,
                "compare_server_default": True,
            },
        )
        return list(compare_metadata(context, Base.metadata))


def test_migrations_found_in_the_source_checkout() -> None:
    assert migrations_dir() == Path(__file__).resolve().parent.parent / "migrations"
    assert (migrations_dir() / "env.py").is_file()


def test_single_head_equal_to_schema_head() -> None:
    heads = _script().get_heads()
    assert heads == [SCHEMA_HEAD]


def test_upgrade_from_empty_creates_every_table(engine: Engine) -> None:
    assert current_revision(engine) is None
    upgrade_schema(engine)
    assert _tables(engine) == TABLES | {VERSION_TABLE}
    assert current_revision(engine) == SCHEMA_HEAD
    assert "alembic_version" not in _tables(engine)


def test_models_match_migrations(engine: Engine) -> None:
    upgrade_schema(engine)
    assert _drift(engine) == []


def _described(db_file: Path) -> dict[str, Any]:
    """A SQLite file's schema as SQLite reads it back: each table's columns, foreign keys (in no
    order) and indexes, each index's table, the version table's rows and the journal mode."""
    db = sqlite3.connect(db_file)
    try:
        described: dict[str, Any] = {}
        for kind, name, table in db.execute("SELECT type, name, tbl_name FROM sqlite_master"):
            if kind != "table":
                described[name] = (kind, table)
                continue
            described[name] = (
                list(db.execute(f"PRAGMA table_info({name})")),
                sorted(row[2:] for row in db.execute(f"PRAGMA foreign_key_list({name})")),
                sorted(row[1:4] for row in db.execute(f"PRAGMA index_list({name})")),
            )
        described["versions"] = list(db.execute(f"SELECT * FROM {VERSION_TABLE}"))
        described["journal"] = db.execute("PRAGMA journal_mode").fetchone()
        return described
    finally:
        db.close()


def test_a_new_file_gets_the_schema_the_migrations_build(tmp_path: Path, engine: Engine) -> None:
    """A new registry file is given head.sql's schema at once (`upgrade_sqlite`), not built by running
    every migration: what SQLite reads back of it is what the migrations from empty leave."""
    upgrade_schema(engine)
    created = upgrade_sqlite(tmp_path / "new.sqlite")
    assert created is not None and (created.before, created.after, created.backup) == (None, SCHEMA_HEAD, None)
    assert _described(tmp_path / "new.sqlite") == _described(tmp_path / "registry.sqlite")
    assert _drift(engine) == [] and _described(tmp_path / "new.sqlite")["versions"] == [(SCHEMA_HEAD,)]


def test_drift_is_detected(engine: Engine) -> None:
    # The comparison above must be able to fail: an extra index is reported.
    upgrade_schema(engine)
    with engine.begin() as conn:
        conn.execute(text("CREATE INDEX ix_extra ON runs (status)"))
    assert _drift(engine) != []


def test_stairway_down_and_up(engine: Engine) -> None:
    revisions = [rev.revision for rev in _script().walk_revisions("base", "heads")]
    for revision in reversed(revisions):  # oldest first
        upgrade_schema(engine, revision)
        assert current_revision(engine) == revision
        down = _script().get_revision(revision).down_revision
        downgrade_schema(engine, "base" if down is None else str(down))
        upgrade_schema(engine, revision)
    downgrade_schema(engine, "base")
    assert _tables(engine) == {VERSION_TABLE}
    assert current_revision(engine) is None
    upgrade_schema(engine)
    assert _tables(engine) == TABLES | {VERSION_TABLE}
    assert _drift(engine) == []


def test_open_upgrades_an_older_registry(tmp_path: Path, engine: Engine) -> None:
    upgrade_schema(engine)
    downgrade_schema(engine, "base")
    with Registry.open(tmp_path) as registry:
        assert registry.count_runs() == 0
    assert current_revision(engine) == SCHEMA_HEAD


def test_newer_registry_is_refused(tmp_path: Path, engine: Engine) -> None:
    Registry.open(tmp_path).close()
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
    with pytest.raises(RegistryError, match="newer") as caught:
        Registry.open(tmp_path)
    message = str(caught.value)
    assert "9999" in message and SCHEMA_HEAD in message and "upgrade rlrun" in message
    with pytest.raises(RegistryError, match="newer"):
        Registry.open(tmp_path, create=False)
    assert current_revision(engine) == "9999"  # refused, not touched


def test_batch_migrations_keep_child_rows(tmp_path: Path, engine: Engine) -> None:
    # A batch migration recreates tables; with foreign keys on, dropping `runs` would cascade
    # and delete every session. Simulate one and check nothing is lost.
    from alembic.operations import Operations

    with Registry.open(tmp_path) as registry:
        registry.create_run(
            run_id="aaaaaaaaaa",
            name=None,
            spec_name="s",
            algorithm="a",
            env_id="e",
            max_frame=10,
            seed=0,
            num_sessions=2,
            spec_json="{}",
            host=None,
            pid=None,
        )
    with migration_connection(engine) as conn:
        operations = Operations(MigrationContext.configure(conn))
        with operations.batch_alter_table("runs", recreate="always") as batch:
            batch.alter_column("host", existing_type=Base.metadata.tables["runs"].c.host.type)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sessions")).scalar() == 2
        assert conn.execute(text("SELECT count(*) FROM spec_revisions")).scalar() == 1


# ---- data survives upgrades: the committed fixture registries (tests/fixtures/) -------------

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _load_fixture_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fixtures = _load_fixture_module()
OLD_REVISIONS: list[str] = fixtures.fixture_revisions()


def _key(db: sqlite3.Connection, table: str) -> str:
    """The table's primary key column (`id`, or `trial_id` for lineage)."""
    return next(row[1] for row in db.execute(f"PRAGMA table_info({table})") if row[5] == 1)


def _dump(db_file: Path) -> dict[str, list[dict[str, Any]]]:
    """Every row of every rlrun table, as plain values, by primary key."""
    db = sqlite3.connect(db_file)
    db.row_factory = sqlite3.Row
    try:
        tables = [
            name
            for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if name != VERSION_TABLE and not name.startswith("sqlite_")
        ]
        return {t: [dict(r) for r in db.execute(f"SELECT * FROM {t} ORDER BY {_key(db, t)}")] for t in tables}
    finally:
        db.close()


def _copy_fixture(revision: str, home: Path) -> Path:
    home.mkdir(parents=True)
    db_file = home / REGISTRY_FILE
    shutil.copyfile(fixtures.fixture_path(revision), db_file)
    return db_file


def _fields(record: object, row: dict[str, Any], renamed: dict[str, str] | None = None) -> dict:
    """The record's values for the row's columns (column name -> record attribute)."""
    renamed = renamed or {}
    return {column: getattr(record, renamed.get(column, column)) for column in row}


def test_a_fixture_for_every_revision_but_the_head() -> None:
    # A new migration makes the old head need a fixture: run tests/fixtures/make_fixtures.py.
    assert OLD_REVISIONS, "there is at least one revision older than the head"
    assert SCHEMA_HEAD not in OLD_REVISIONS
    on_disk = sorted(p.name for p in FIXTURES.glob("registry-*.sqlite"))
    assert on_disk == sorted(fixtures.fixture_path(r).name for r in OLD_REVISIONS)


@pytest.mark.parametrize("revision", OLD_REVISIONS)
def test_fixture_upgrade_keeps_every_row(tmp_path: Path, revision: str) -> None:
    home = tmp_path / "home"
    db_file = _copy_fixture(revision, home)
    engine = create_registry_engine(f"sqlite:///{db_file}")
    try:
        assert current_revision(engine) == revision
    finally:
        engine.dispose()
    before = _dump(db_file)
    expected = fixtures.rows_at(revision)
    assert set(before) == set(expected)
    assert all(len(before[t]) == len(rows) > 0 for t, rows in expected.items())

    with Registry.open(home) as registry:  # upgrades to the head
        after = _dump(db_file)
        # Raw rows: every table of the old revision, every row, every old column, same values.
        for table, rows in before.items():
            assert [{c: r[c] for c in rows[0]} for r in after[table]] == rows, table
        assert set(after) == TABLES

        # Through the API, against the values the generator wrote.
        runs = {row["id"]: row for row in expected["runs"]}
        reported = {"fa00000001": "finished", "fb00000002": "crashed"}  # fb's process is gone
        listed = registry.list_runs(limit=None)
        assert [(s.row, s.id, s.status) for s in listed] == [
            (1, "fb00000002", "crashed"),
            (2, "fa00000001", "finished"),
        ]
        by_id = {s.id: s for s in listed}
        assert (by_id["fa00000001"].frames_done, by_id["fa00000001"].best_eval) == (4200, 187.5)
        assert (by_id["fb00000002"].frames_done, by_id["fb00000002"].best_eval) == (4000, 200.0)
        assert by_id["fb00000002"].frames_target == 12000
        assert [s.id for s in registry.list_runs(status="crashed")] == ["fb00000002"]
        assert registry.count_runs("finished") == registry.count_runs("crashed") == 1
        assert registry.count_runs("running") == 0

        for run_id, run_row in runs.items():
            detail = registry.get_run(run_id)
            assert _fields(detail.run, run_row) == {**run_row, "status": reported[run_id]}
            sessions = [s for s in expected["sessions"] if s["run_id"] == run_id]
            silent = {"running": "crashed", "pending": "crashed"}  # all long silent
            assert [
                _fields(record, s, {"session_index": "index"})
                for record, s in zip(detail.sessions, sessions, strict=True)
            ] == [{**s, "status": silent.get(s["status"], s["status"])} for s in sessions]
            ids = {s["id"] for s in sessions}
            for table, records in [
                ("checkpoints", detail.checkpoints),
                ("evaluations", detail.evaluations),
                ("spec_revisions", detail.spec_revisions),
                ("attempts", detail.attempts),
            ]:
                rows = sorted(
                    (r for r in expected.get(table, []) if r.get("session_id") in ids or r.get("run_id") == run_id),
                    key=lambda r: (r.get("session_id", 0), r.get("frame", 0), r["id"]),
                )
                assert len(records) == len(rows), table
                got = [_fields(rec, r) for rec, r in zip(records, rows, strict=True)]
                if table == "attempts":
                    rows = [{**r, "approximate": bool(r["approximate"])} for r in rows]
                assert got == rows, table
            assert registry.latest_spec(run_id) == detail.spec_revisions[-1]
        assert registry.get_run("fa00000001").forks == ["fb00000002"]
        assert registry.latest_spec("fb00000002").revision == 1
        assert registry.resolve("fixture-alpha").id == "fa00000001"

    if "attempts" not in before:
        assert after["attempts"] == []  # a new table starts empty
    engine = create_registry_engine(f"sqlite:///{db_file}")
    try:
        assert current_revision(engine) == SCHEMA_HEAD
        assert _drift(engine) == []
    finally:
        engine.dispose()


@pytest.mark.parametrize("revision", OLD_REVISIONS)
def test_fixture_up_to_head_and_back_keeps_every_row(tmp_path: Path, revision: str) -> None:
    db_file = _copy_fixture(revision, tmp_path / "home")
    before = _dump(db_file)
    engine = create_registry_engine(f"sqlite:///{db_file}")
    try:
        upgrade_schema(engine)
        downgrade_schema(engine, revision)
        assert current_revision(engine) == revision
    finally:
        engine.dispose()
    assert _dump(db_file) == before


def test_open_copies_an_old_file_before_upgrading_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db_file = _copy_fixture(OLD_REVISIONS[0], home)
    original = db_file.read_bytes()
    with Registry.open(home, create=False) as registry:
        done = registry.upgrade
        assert done is not None and registry.count_runs() == 2
    assert (done.before, done.after) == (OLD_REVISIONS[0], SCHEMA_HEAD)
    assert done.backup is not None and done.backup.name.startswith(f"{REGISTRY_FILE}.{OLD_REVISIONS[0]}.")
    assert _dump(done.backup) == _dump_bytes(original, tmp_path)  # the copy is the file as it was
    with Registry.open(home) as registry:
        assert registry.upgrade is None  # done once
    assert len(list(home.glob("*.bak"))) == 1


def _dump_bytes(data: bytes, where: Path) -> dict[str, list[dict[str, Any]]]:
    copy = where / "as-it-was.sqlite"
    copy.write_bytes(data)
    return _dump(copy)


def test_a_failed_upgrade_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlrun.registry import schema as registry_schema

    home = tmp_path / "home"
    db_file = _copy_fixture(OLD_REVISIONS[0], home)
    before = _dump(db_file)

    original = registry_schema.upgrade_schema

    def half_then_fail(engine: Engine, target: str = "head") -> None:
        with registry_schema.migration_connection(engine) as conn:
            conn.execute(text("CREATE TABLE half_done (x INTEGER)"))
            raise RuntimeError("the disk filled up")

    monkeypatch.setattr(registry_schema, "upgrade_schema", half_then_fail)
    with pytest.raises(RuntimeError, match="the disk filled up"):
        Registry.open(home)
    monkeypatch.setattr(registry_schema, "upgrade_schema", original)
    assert _dump(db_file) == before  # one transaction: rolled back whole
    engine = create_registry_engine(f"sqlite:///{db_file}")
    try:
        assert current_revision(engine) == OLD_REVISIONS[0]
    finally:
        engine.dispose()
    with Registry.open(home) as registry:  # and the next open upgrades it
        assert registry.count_runs() == 2


# ---- the same on a PostgreSQL server -------------------------------------------------------------


@pytest.fixture
def pg_engine(postgres_url: str) -> Iterator[Engine]:
    engine = create_registry_engine(postgres_url)
    yield engine
    engine.dispose()


def test_postgres_upgrade_from_empty_stairway_and_drift(pg_engine: Engine) -> None:
    assert current_revision(pg_engine) is None
    revisions = [rev.revision for rev in _script().walk_revisions("base", "heads")]
    for revision in reversed(revisions):
        upgrade_schema(pg_engine, revision)
        assert current_revision(pg_engine) == revision
        down = _script().get_revision(revision).down_revision
        downgrade_schema(pg_engine, "base" if down is None else str(down))
        upgrade_schema(pg_engine, revision)
    assert _tables(pg_engine) == TABLES | {VERSION_TABLE}
    assert _drift(pg_engine) == []
    downgrade_schema(pg_engine, "base")
    assert _tables(pg_engine) == {VERSION_TABLE}


def _insert_rows(engine: Engine, revision: str) -> None:
    with engine.begin() as conn:
        for table, rows in fixtures.rows_at(revision).items():
            for row in rows:
                row = {**row, "approximate": bool(row["approximate"])} if "approximate" in row else row
                conn.execute(
                    text(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join(':' + c for c in row)})"), row
                )
        for table in ("sessions", "checkpoints", "evaluations", "spec_revisions", "attempts"):
            if table in fixtures.rows_at(revision):  # explicit ids were given: move the sequences past them
                sequence = f"pg_get_serial_sequence('{table}', 'id')"
                conn.execute(text(f"SELECT setval({sequence}, (SELECT MAX(id) FROM {table}))"))


@pytest.mark.parametrize("revision", OLD_REVISIONS)
def test_postgres_old_schema_is_upgraded_only_on_request_and_keeps_every_row(
    pg_engine: Engine, postgres_url: str, tmp_path: Path, revision: str
) -> None:
    from rlrun.registry import upgrade_registry

    upgrade_schema(pg_engine, revision)
    _insert_rows(pg_engine, revision)
    with pytest.raises(RegistryError) as caught:
        Registry.open(tmp_path, postgres_url)
    message = str(caught.value)
    assert f"is at schema revision {revision} and this rlrun needs {SCHEMA_HEAD}" in message
    assert "rlrun db upgrade" in message and "rlrun:***@" in message  # the password is not shown
    assert current_revision(pg_engine) == revision  # refused, not touched
    done = upgrade_registry(tmp_path, postgres_url)
    assert done is not None and (done.before, done.after, done.backup) == (revision, SCHEMA_HEAD, None)
    with Registry.open(tmp_path, postgres_url) as registry:
        listed = registry.list_runs(limit=None)
        assert [(s.id, s.status, s.frames_done, s.best_eval) for s in listed] == [
            ("fb00000002", "crashed", 4000, 200.0),
            ("fa00000001", "finished", 4200, 187.5),
        ]
        assert registry.get_run("fa00000001").forks == ["fb00000002"]
        assert registry.resolve("fixture-alpha").id == "fa00000001"
        run = registry.create_run(
            run_id="fc00000003",
            name=None,
            spec_name="s",
            algorithm="a",
            env_id="e",
            max_frame=1,
            seed=0,
            num_sessions=1,
            spec_json="{}",
            host=None,
            pid=None,
        )
        assert registry.get_run(run.id).sessions[0].id > 3  # new rows after the old ones
    assert _drift(pg_engine) == []


def test_postgres_newer_schema_is_refused(pg_engine: Engine, postgres_url: str, tmp_path: Path) -> None:
    upgrade_schema(pg_engine)
    with pg_engine.begin() as conn:
        conn.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
    for create in (True, False):
        with pytest.raises(RegistryError, match="schema revision 9999, newer than this rlrun"):
            Registry.open(tmp_path, postgres_url, create=create)
    assert current_revision(pg_engine) == "9999"


def test_postgres_first_users_race_to_create_the_schema(postgres_url: str, tmp_path: Path) -> None:
    import threading

    problems: list[BaseException] = []

    def first_use() -> None:
        try:
            Registry.open(tmp_path, postgres_url).close()
        except BaseException as error:
            problems.append(error)

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == []
    with Registry.open(tmp_path, postgres_url, create=False) as registry:
        assert registry.count_runs() == 0


def test_processes_opening_an_old_file_together_upgrade_it_once(tmp_path: Path) -> None:
    import subprocess
    import sys

    home = tmp_path / "home"
    db_file = _copy_fixture(OLD_REVISIONS[0], home)
    before = _dump(db_file)
    code = (
        "import sys; from rlrun.registry import Registry\n"
        "with Registry.open(sys.argv[1]) as r: print(r.count_runs(), r.upgrade is not None)"
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(home)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120) for p in processes]
    assert [p.returncode for p in processes] == [0] * 4, [err for _, err in outputs]
    assert sorted(out.strip() for out, _ in outputs) == ["2 False"] * 3 + ["2 True"]  # one upgraded, all read
    (backup,) = home.glob("*.bak")
    assert _dump(backup) == before
