"""Detached runs: who supervises a run, and a stop asked of it.

`runs.supervisor` names the cluster actor that supervises a detached run's sessions (`rlrun train
--ray --detach`; NULL: the command that started the run supervises it). `runs.stop_requested_at`
is when `rlrun stop` asked the run to stop (the database's clock; NULL: nobody did): its sessions
read it with their heartbeat and stop at their next step with a snapshot, wherever they run.

Revision ID: 0006_detach
Revises: 0005_searchsturdy
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_detach"
down_revision: str | None = "0005_searchsturdy"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("supervisor", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("stop_requested_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("stop_requested_at")
        batch.drop_column("supervisor")
