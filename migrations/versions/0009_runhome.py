"""Each run's home (`runs.home`).

Where the run's folder lives: its home's URL for a home in object storage (`s3://bucket/prefix`),
else the home's absolute folder, as `rlrun.paths.home_address` names it. A registry in $RLRUN_DB may
list runs of several homes; a command finds each run in its own, or says where it lives, instead of
looking for it in the home it was given. NULL for the runs recorded before: the home the registry
is opened with, as before (`rlrun db rebuild` records it).

Revision ID: 0009_runhome
Revises: 0008_searchstop
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_runhome"
down_revision: str | None = "0008_searchstop"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("home", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("home")
