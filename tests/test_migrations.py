"""Alembic migrations: one head, matching the code's SCHEMA_HEAD and models, reversible."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

from rlrun.errors import RegistryError
from rlrun.registry import (
    SCHEMA_HEAD,
    VERSION_TABLE,
    Base,
    Registry,
    alembic_config,
    create_registry_engine,
    current_revision,
    downgrade_schema,
    migration_connection,
    migrations_dir,
    upgrade_schema,
)

TABLES = {"runs", "sessions", "checkpoints", "evaluations", "spec_revisions"}


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
            run_id="aaaaaaaaaa", name=None, spec_name="s", algorithm="a", env_id="e",
            max_frame=10, seed=0, num_sessions=2, spec_json="{}", host=None, pid=None,
        )  # fmt: skip
    with migration_connection(engine) as conn:
        operations = Operations(MigrationContext.configure(conn))
        with operations.batch_alter_table("runs", recreate="always") as batch:
            batch.alter_column("host", existing_type=Base.metadata.tables["runs"].c.host.type)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM sessions")).scalar() == 2
        assert conn.execute(text("SELECT count(*) FROM spec_revisions")).scalar() == 1
