"""predictor: risk scores

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "risk_scores",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("job", sa.String(128), nullable=False),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("gpu", sa.Integer),
        sa.Column("peer", sa.String(128)),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("risk", sa.Float, nullable=False),
        sa.Column("lead_s", sa.Float),
        sa.Column("signals", sa.Text, nullable=False, server_default="[]"),
        sa.Column("model_version", sa.String(64), nullable=False),
    )
    op.create_index("ix_risk_scores_job_ts", "risk_scores", ["job", "ts"])
    op.create_index("ix_risk_scores_node_ts", "risk_scores", ["node", "ts"])


def downgrade() -> None:
    op.drop_index("ix_risk_scores_node_ts", table_name="risk_scores")
    op.drop_index("ix_risk_scores_job_ts", table_name="risk_scores")
    op.drop_table("risk_scores")
