"""A stop asked of a search (`rlrun stop search:REF`).

`searches.stop_requested_at` is when `rlrun stop` asked the search to stop (the database's clock;
NULL: nobody did). Its driver reads it with its heartbeat, wherever it runs (the command, a
detached driver on a cluster), starts no more trials and asks its trials in flight to stop, so the
search ends preempted with every trial's snapshot; `rlrun resume search:` clears it.

Revision ID: 0008_searchstop
Revises: 0007_pbt
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_searchstop"
down_revision: str | None = "0007_pbt"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        batch.add_column(sa.Column("stop_requested_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        batch.drop_column("stop_requested_at")
