"""collector: compacted point chunks (PostgreSQL) and the points_all view

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# A chunk's points: its timestamps are delta-encoded ticks of 2**-22 s (see collector/compact.py).
_DECODE = """
  SELECT c.t0 + (sum(x.delta) OVER (ORDER BY x.n))::int8 / 4194304::float8 AS ts, x.value
  FROM unnest(c.ts_deltas, c.vals) WITH ORDINALITY AS x(delta, value, n)
"""
# Raw points, then the chunks' points less any point written again into ``points`` after its
# window was compacted: that newer write wins, as the writer's upsert would have it, and the
# view never shows a point twice.
_VIEW_PG = f"""
CREATE VIEW points_all (series_id, ts, value) AS
SELECT series_id, ts, value FROM points
UNION ALL
SELECT c.series_id, u.ts, u.value
FROM point_chunks c CROSS JOIN LATERAL ({_DECODE}) u
WHERE NOT EXISTS (SELECT 1 FROM points r WHERE r.series_id = c.series_id AND r.ts = u.ts)
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        # SQLite keeps every point in ``points`` (~15 bytes each there already).
        op.execute("CREATE VIEW points_all (series_id, ts, value) AS "
                   "SELECT series_id, ts, value FROM points")
        return
    op.create_table(
        "point_chunks",
        # No foreign key, as on the other hot tables (see collector/schema.py).
        sa.Column("series_id", sa.Integer, primary_key=True),
        sa.Column("t0", sa.Float, primary_key=True),
        sa.Column("t1", sa.Float, nullable=False),
        sa.Column("ts_deltas", postgresql.ARRAY(sa.BigInteger), nullable=False),
        sa.Column("vals", postgresql.ARRAY(sa.Float), nullable=False),
    )
    # Rows past PostgreSQL's fixed 2 kB threshold get compressed (pglz); the default target
    # (also 2 kB) would stop once the row is under it, leaving the second array as it is.
    op.execute("ALTER TABLE point_chunks SET (toast_tuple_target = 1024)")
    op.execute(_VIEW_PG)


def downgrade() -> None:
    op.execute("DROP VIEW points_all")
    if op.get_bind().dialect.name == "postgresql":
        # Back into ``points`` first, so that going down loses no data.
        op.execute("INSERT INTO points (series_id, ts, value) SELECT c.series_id, u.ts, "
                   f"u.value FROM point_chunks c CROSS JOIN LATERAL ({_DECODE}) u "
                   "ON CONFLICT (series_id, ts) DO NOTHING")
        op.drop_table("point_chunks")
