"""decisions: checkpoint-and-drain decisions

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job", sa.String(128), nullable=False),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("alert_id", sa.Integer),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("step", sa.Integer),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_decisions_job_state", "decisions", ["job", "state"])
    op.create_index("ix_decisions_job_node", "decisions", ["job", "node"])


def downgrade() -> None:
    op.drop_table("decisions")
