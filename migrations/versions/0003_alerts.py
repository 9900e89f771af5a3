"""alerts: alert state, silences, webhook subscriptions, delivery outbox

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("fingerprint", sa.String(32), nullable=False, unique=True),
        sa.Column("job", sa.String(128), nullable=False, index=True),
        sa.Column("node", sa.String(128), nullable=False, index=True),
        sa.Column("gpu", sa.Integer),
        sa.Column("peer", sa.String(128)),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("state", sa.String(16), nullable=False, index=True),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("risk", sa.Float, nullable=False),
        sa.Column("lead_s", sa.Float),
        sa.Column("signals", sa.Text, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("model_version", sa.String(64), nullable=False),
        sa.Column("starts_at", sa.Float, nullable=False),
        sa.Column("ends_at", sa.Float),
        sa.Column("updated_at", sa.Float, nullable=False, index=True),
        sa.Column("acked_at", sa.Float),
        sa.Column("acked_by", sa.String(128)),
    )
    op.create_table(
        "alert_history",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("alert_id", sa.Integer, sa.ForeignKey("alerts.id"), nullable=False),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("risk", sa.Float, nullable=False),
    )
    op.create_index("ix_alert_history_alert_ts", "alert_history", ["alert_id", "ts"])
    op.create_table(
        "silences",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("matchers", sa.Text, nullable=False),
        sa.Column("starts_at", sa.Float, nullable=False),
        sa.Column("ends_at", sa.Float, nullable=False, index=True),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("comment", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "subscriptions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(128), nullable=False, unique=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("secret", sa.Text, nullable=False),
        sa.Column("filters", sa.Text, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    # No foreign key to subscriptions: deleting a subscription leaves its rows for the
    # delivery loop to cancel, so the history of what was sent stays readable.
    op.create_table(
        "outbox",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.String(36), nullable=False, unique=True),
        sa.Column("subscription_id", sa.Integer, nullable=False),
        sa.Column("alert_id", sa.Integer, nullable=False, index=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("alert", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", sa.Float, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("delivered_at", sa.Float),
        sa.Column("last_error", sa.Text),
    )
    op.create_index("ix_outbox_state_sub_id", "outbox", ["state", "subscription_id", "id"])


def downgrade() -> None:
    for table in ("outbox", "subscriptions", "silences", "alert_history", "alerts"):
        op.drop_table(table)
