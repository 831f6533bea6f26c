"""Lineage: where each segment of a population-based training search came from (which member, from
which member's run and frame, which values it explored).

Revision ID: 0007_pbt
Revises: 0006_detach
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_pbt"
down_revision: str | None = "0006_detach"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "lineage",
        sa.Column("trial_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("search_id", sa.String(length=32), nullable=False),
        sa.Column("member", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("parent_member", sa.Integer(), nullable=True),
        sa.Column("parent_run_id", sa.String(length=32), nullable=True),
        sa.Column("frame", sa.BigInteger(), nullable=False),
        sa.Column("mutated_json", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["search_id"], ["searches.id"], name="fk_lineage_search_id_searches", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], name="fk_lineage_trial_id_trials", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("trial_id", name="pk_lineage"),
    )
    op.create_index("ix_lineage_search_id", "lineage", ["search_id", "generation", "member"])


def downgrade() -> None:
    op.drop_table("lineage")  # its index goes with it
