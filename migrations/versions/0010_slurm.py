"""The SLURM jobs that run a run (`runs.slurm_jobs`).

`rlrun train|resume --slurm` submits one SLURM job per session, through submitit, and records their
ids here at once, comma-separated in session order (`1234,1235`), so `rlrun ls` and `rlrun show`
can ask SLURM how each job stands and `rlrun stop` finds them. A job that SLURM requeues keeps its
id; a resume with --slurm submits new jobs and records them in place of the old ones. NULL: the run
does not run on SLURM.

Revision ID: 0010_slurm
Revises: 0009_runhome
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_slurm"
down_revision: str | None = "0009_runhome"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("slurm_jobs", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("slurm_jobs")
