"""Rows into PostgreSQL: binary ``COPY`` into temporary tables, then ``INSERT ... ON CONFLICT``."""

from __future__ import annotations

from typing import Any

from collector.rows import GPU_COLS, GPU_MERGE, Row, Rows
from collector.schema import FLOAT4_GPU_COLUMNS

# COPY's binary format carries each column in its own type: 4 bytes for the real columns.
_COL_TYPES = ["float4" if c in FLOAT4_GPU_COLUMNS else "float8" for c in GPU_COLS]
_GPU_UPSERT = (
    f"INSERT INTO gpu_samples (entity_id, ts, {', '.join(GPU_COLS)}) "
    f"SELECT entity_id, ts, {', '.join(GPU_COLS)} FROM _in_gpu "
    f"ON CONFLICT (entity_id, ts) DO UPDATE SET {GPU_MERGE}"
)
_EVENT_INSERT = ("INSERT INTO events (ts, entity_id, kind, code) VALUES (%s, %s, %s, %s) "
                 "ON CONFLICT DO NOTHING")


def write_pg(raw: Any, rows: Rows) -> None:
    """Upsert ``rows`` (no key twice) through the pooled connection ``raw`` and commit."""
    gpu_rows, point_rows, event_rows = rows
    try:
        conn: Any = raw.driver_connection
        with conn.cursor() as cur:
            if not raw.info.get("foreshock_tmp"):
                cur.execute("CREATE TEMP TABLE IF NOT EXISTS _in_gpu (LIKE gpu_samples) "
                            "ON COMMIT DELETE ROWS")
                cur.execute("CREATE TEMP TABLE IF NOT EXISTS _in_points (LIKE points) "
                            "ON COMMIT DELETE ROWS")
                raw.info["foreshock_tmp"] = True
            if gpu_rows:
                _copy(cur, "_in_gpu", ["entity_id", "ts", *GPU_COLS], gpu_rows,
                      ["int4", "float8", *_COL_TYPES])
                cur.execute(_GPU_UPSERT)
            if point_rows:
                _copy(cur, "_in_points", ["series_id", "ts", "value"], point_rows,
                      ["int4", "float8", "float8"])
                cur.execute("INSERT INTO points SELECT * FROM _in_points "
                            "ON CONFLICT (series_id, ts) DO UPDATE SET value = excluded.value")
            if event_rows:
                cur.executemany(_EVENT_INSERT, event_rows)
        conn.commit()
    except BaseException:
        raw.rollback()
        raise


def _copy(cur: Any, table: str, columns: list[str], rows: list[Row], types: list[str]) -> None:
    # Binary COPY with declared types: about 4x faster than text COPY from Python rows.
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)
