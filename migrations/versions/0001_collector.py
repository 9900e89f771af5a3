"""collector: entities, gpu samples, series, points, events, rollups

Revision ID: 0001
Revises: None
"""

import sqlalchemy as sa
from alembic import op

from collector.metrics import GPU_METRICS

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "entities",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.String(512), nullable=False, unique=True),
        sa.Column("job", sa.String(128), nullable=False, index=True),
        sa.Column("node", sa.String(128), nullable=False),
        sa.Column("rank", sa.Integer),
        sa.Column("gpu", sa.Integer),
        sa.Column("gpu_uuid", sa.String(128)),
        sa.Column("peer", sa.String(128)),
    )
    op.create_table(
        "gpu_samples",
        # No foreign keys on the hot tables (see collector/schema.py).
        sa.Column("entity_id", sa.Integer, primary_key=True),
        sa.Column("ts", sa.Float, primary_key=True),
        *[sa.Column(m.column, sa.Float) for m in GPU_METRICS],
        sqlite_with_rowid=False,
    )
    op.create_table(
        "series",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.String(1024), nullable=False, unique=True),
        sa.Column("job", sa.String(128), nullable=False, index=True),
        sa.Column("name", sa.String(256), nullable=False, index=True),
        sa.Column("entity_id", sa.Integer, sa.ForeignKey("entities.id"), nullable=False,
                  index=True),
        sa.Column("stat", sa.String(16), nullable=False, server_default=""),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("unit", sa.String(32), nullable=False, server_default=""),
        sa.Column("attrs", sa.Text, nullable=False, server_default="{}"),
    )
    op.create_table(
        "points",
        sa.Column("series_id", sa.Integer, primary_key=True),
        sa.Column("ts", sa.Float, primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("ts", sa.Float, nullable=False),
        sa.Column("entity_id", sa.Integer, sa.ForeignKey("entities.id"), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("code", sa.Integer),
    )
    op.create_index("ix_events_ts", "events", ["ts"])
    op.create_index("ix_events_entity_ts", "events", ["entity_id", "ts", "kind", "code"],
                    unique=True)
    op.create_table(
        "rollups",
        sa.Column("series_id", sa.Integer, primary_key=True),
        sa.Column("ts", sa.Float, primary_key=True),
        sa.Column("min", sa.Float, nullable=False),
        sa.Column("max", sa.Float, nullable=False),
        sa.Column("mean", sa.Float, nullable=False),
        sa.Column("last", sa.Float, nullable=False),
        sa.Column("count", sa.Integer, nullable=False),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "maintenance_state",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in ("maintenance_state", "rollups", "events", "points", "series", "gpu_samples",
                  "entities"):
        op.drop_table(table)
