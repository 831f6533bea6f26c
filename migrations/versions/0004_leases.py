"""Leases: a fencing token per session, and the token and cluster node each attempt held.

At-least-once execution (a Ray retry, a requeued job) can leave an old attempt alive beside the one
that replaced it. Each attempt takes the session's lease (`sessions.lease` + 1) before it writes,
and every write of a session checks that the token is still its own, so a stale attempt writes
nothing more. `attempts.node` is where an attempt ran (the Ray node id; hosts may share a name).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("lease", sa.BigInteger(), server_default=sa.text("0"), nullable=False))
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("node", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("lease", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("lease")
        batch.drop_column("node")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("lease")
