"""collector: bounded GPU gauges as real (float4) on PostgreSQL, packed ahead of ts

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

from collector.metrics import GPU_METRICS
from collector.schema import FLOAT4_GPU_COLUMNS

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_FLOAT4 = [m.column for m in GPU_METRICS if m.column in FLOAT4_GPU_COLUMNS]
_FLOAT8 = [m.column for m in GPU_METRICS if m.column not in FLOAT4_GPU_COLUMNS]


def upgrade() -> None:
    # SQLite stores every number in 8 bytes whatever the column's type: nothing to do there.
    if op.get_bind().dialect.name != "postgresql":
        return
    # A copy rather than ALTER COLUMN ... TYPE (which rewrites the table as well) so that the
    # 4-byte columns follow the 4-byte entity_id: no alignment padding between them and the
    # 8-byte ones, 104 bytes of data a row where ALTER would leave 112 (136 before). Values
    # with more than 7 significant digits get rounded (NVML reports these gauges in whole
    # units, MHz, percent and mW; see collector/schema.py).
    op.create_table(
        "gpu_samples_new",
        sa.Column("entity_id", sa.Integer, nullable=False),
        *[sa.Column(c, sa.REAL) for c in _FLOAT4],
        sa.Column("ts", sa.Float, nullable=False),
        *[sa.Column(c, sa.Float) for c in _FLOAT8],
        sa.PrimaryKeyConstraint("entity_id", "ts", name="gpu_samples_new_pkey"),
    )
    cols = ", ".join(["entity_id", "ts", *_FLOAT4, *_FLOAT8])
    # In key order: the index is built full and each GPU's rows lie together.
    op.execute(f"INSERT INTO gpu_samples_new ({cols}) SELECT {cols} FROM gpu_samples "
               "ORDER BY entity_id, ts")
    op.drop_table("gpu_samples")
    op.rename_table("gpu_samples_new", "gpu_samples")
    op.execute("ALTER INDEX gpu_samples_new_pkey RENAME TO gpu_samples_pkey")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # Through float4's shortest digits, so that 61.3 comes back as 61.3 rather than as
        # float4's exact value 61.29999923706055; the columns keep their new order.
        op.execute("ALTER TABLE gpu_samples " + ", ".join(
            f"ALTER COLUMN {c} TYPE double precision USING {c}::text::double precision"
            for c in _FLOAT4))
