"""Initial schema: runs, sessions, checkpoints, evaluations, spec revisions.

Revision ID: 0001
Revises:
Create Date: 2025-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _pk(table: str) -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint("id", name=f"pk_{table}")


def _session_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["session_id"], ["sessions.id"], name=f"fk_{table}_session_id_sessions", ondelete="CASCADE"
    )


def _create_runs() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("spec_name", sa.String(length=200), nullable=False),
        sa.Column("algorithm", sa.String(length=64), nullable=False),
        sa.Column("env_id", sa.String(length=200), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("max_frame", sa.BigInteger(), nullable=False),
        sa.Column("num_sessions", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("parent_id", sa.String(length=32), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["parent_id"], ["runs.id"], name="fk_runs_parent_id_runs", ondelete="SET NULL"),
        _pk("runs"),
        sa.UniqueConstraint("name", name="uq_runs_name"),
    )
    op.create_index("ix_runs_created_at", "runs", ["created_at", "id"])
    op.create_index("ix_runs_parent_id", "runs", ["parent_id"])


def _create_sessions() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("session_index", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("frame", sa.BigInteger(), nullable=False),
        sa.Column("episode", sa.BigInteger(), nullable=False),
        sa.Column("opt_step", sa.BigInteger(), nullable=False),
        sa.Column("best_eval", sa.Float(), nullable=True),
        sa.Column("last_eval", sa.Float(), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("heartbeat_at", sa.Float(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_sessions_run_id_runs", ondelete="CASCADE"),
        _pk("sessions"),
        sa.UniqueConstraint("run_id", "session_index", name="uq_sessions_run_id_session_index"),
    )


def _create_spec_revisions() -> None:
    op.create_table(
        "spec_revisions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("frame", sa.BigInteger(), nullable=False),
        sa.Column("spec_json", sa.Text(), nullable=False),
        sa.Column("diff_json", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_spec_revisions_run_id_runs", ondelete="CASCADE"),
        _pk("spec_revisions"),
        sa.UniqueConstraint("run_id", "revision", name="uq_spec_revisions_run_id_revision"),
    )


def _create_checkpoints() -> None:
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("frame", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        _session_fk("checkpoints"),
        _pk("checkpoints"),
    )
    op.create_index("ix_checkpoints_session_id", "checkpoints", ["session_id"])


def _create_evaluations() -> None:
    op.create_table(
        "evaluations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("frame", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(length=16), server_default="train", nullable=False),
        sa.Column("mean", sa.Float(), nullable=False),
        sa.Column("std", sa.Float(), nullable=False),
        sa.Column("min", sa.Float(), nullable=False),
        sa.Column("max", sa.Float(), nullable=False),
        sa.Column("episodes", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        _session_fk("evaluations"),
        _pk("evaluations"),
    )
    op.create_index("ix_evaluations_session_id", "evaluations", ["session_id"])


def upgrade() -> None:
    _create_runs()
    _create_sessions()
    _create_spec_revisions()
    _create_checkpoints()
    _create_evaluations()


def downgrade() -> None:
    # Children first; dropping a table drops its indexes with it.
    for table in ("evaluations", "checkpoints", "spec_revisions", "sessions", "runs"):
        op.drop_table(table)
