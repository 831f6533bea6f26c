"""Where a run was trained (`runs.origin`).

NULL: rlrun trained it. `sb3`: a foreign run, read from a Stable-Baselines3 / RL Zoo log folder by
`rlrun import sb3 PATH` (rlrun.imports): it holds that run's evaluations and nothing to resume, so
`ls`, `show`, `plot` and `compare` read it beside rlrun's runs, and resume, enjoy, export and push
refuse it.

Revision ID: 0012_origin
Revises: 0011_searchdetach
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_origin"
down_revision: str | None = "0011_searchdetach"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("origin", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("origin")
