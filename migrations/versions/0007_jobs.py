"""jobs: what the store knows of a job beyond its data (whether its source kept an XID log)

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # No row for a job means it exported everything: every job stored before this revision.
    op.create_table(
        "jobs",
        sa.Column("job", sa.String(128), primary_key=True),
        sa.Column("events_exported", sa.Boolean, nullable=False),
        sa.Column("through", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("jobs")
