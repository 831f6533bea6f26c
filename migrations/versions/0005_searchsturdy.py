"""Search heartbeats: a search's driver stamps its row with the database's clock, so a search is
judged running or crashed as a session is (`rlrun.registry.liveness`), whichever host its driver
ran on, not by a pid only its own host can check.

Revision ID: 0005_searchsturdy
Revises: 0004
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_searchsturdy"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        batch.add_column(sa.Column("heartbeat_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        batch.drop_column("heartbeat_at")
