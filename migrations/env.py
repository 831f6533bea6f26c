"""Alembic environment for the rlrun registry.

rlrun runs migrations programmatically (see `rlrun.registry.schema.alembic_config`): there is no
alembic.ini, and the caller passes an open connection in `config.attributes["connection"]`,
already inside the transaction the migration should run in. Without one, the URL comes from
the `sqlalchemy.url` option, else from $RLRUN_DB / $RLRUN_HOME as the CLI would choose it.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from rlrun import paths
from rlrun.registry.database import VERSION_TABLE
from rlrun.registry.schema import migration_connection
from rlrun.registry.server import create_registry_engine
from rlrun.registry.tables import Base

config = context.config
target_metadata = Base.metadata

# render_as_batch: SQLite cannot ALTER most things, so autogenerate writes batch operations that
# copy the table instead. compare_server_default: keep `server_default`s free of drift too.
_OPTIONS = {
    "target_metadata": target_metadata,
    "version_table": VERSION_TABLE,
    "render_as_batch": True,
    "compare_type": True,
    "compare_server_default": True,
}


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or paths.database_url(paths.resolve_home())


def run_migrations_offline() -> None:
    """Emit SQL to stdout (`alembic upgrade --sql`) instead of running it."""
    context.configure(url=_url(), literal_binds=True, **_OPTIONS)
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    context.configure(connection=connection, **_OPTIONS)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    engine = create_registry_engine(_url())
    try:
        with migration_connection(engine) as own_connection:
            _run_on(own_connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
