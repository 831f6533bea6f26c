"""Searches: a hyper-parameter search (`rlrun search`) and its trials, each linked to the run that
trained it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "searches",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("spec_name", sa.String(length=200), nullable=False),
        sa.Column("spec_json", sa.Text(), nullable=False),
        sa.Column("space_json", sa.Text(), nullable=False),
        sa.Column("settings_json", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("importance_json", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_searches"),
        sa.UniqueConstraint("name", name="uq_searches_name"),
    )
    op.create_index("ix_searches_created_at", "searches", ["created_at", "id"])
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("search_id", sa.String(length=32), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=True),
        sa.Column("params_json", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("intermediate_json", sa.Text(), nullable=False),
        sa.Column("system_attrs_json", sa.Text(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["search_id"], ["searches.id"], name="fk_trials_search_id_searches", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_trials_run_id_runs", ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name="pk_trials"),
        sa.UniqueConstraint("search_id", "number", name="uq_trials_search_id_number"),
    )
    op.create_index("ix_trials_run_id", "trials", ["run_id"])


def downgrade() -> None:
    op.drop_table("trials")  # its indexes go with it
    op.drop_table("searches")
