"""Who drives a search (`searches.driver`).

The cluster actor that drives a detached search (`rlrun search ... --ray --detach`, or a resume so
handed over), as `runs.supervisor` names a detached run's supervisor; NULL: the command that
started or resumed the search drives it. `rlrun stop search:` reads it to suggest the resume that
continues the search the way it ran (detached again), as `rlrun stop` does for a run.

Revision ID: 0011_searchdetach
Revises: 0010_slurm
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_searchdetach"
down_revision: str | None = "0010_slurm"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        batch.add_column(sa.Column("driver", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        batch.drop_column("driver")
