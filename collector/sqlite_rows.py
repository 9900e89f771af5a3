"""Rows into SQLite: one ``executemany`` upsert per table in one IMMEDIATE transaction."""

from __future__ import annotations

from typing import Any

from collector.rows import GPU_COLS, GPU_MERGE, Rows

# Pages of WAL before the writer checkpoints (SQLite's default is 1,000). Each request rewrites
# the last page of each of its series (~2,000 pages, 8 MiB of WAL for a 5,000-point request), so
# a larger WAL lets a checkpoint copy a page once for many commits instead of once per commit
# (65,536 pages: 256 MiB, a third less commit time than 16,384); durability is the WAL's either
# way, and the file is reused, not grown, after each checkpoint.
_WAL_AUTOCHECKPOINT = 65536
# Page cache of the writing connection (SQLite's default is 2 MiB). A request modifies the last
# page of each of its ~2,000 series and GPUs; when those pages stay cached between commits, an
# upsert does not read its page back from the WAL or the file.
_CACHE_KIB = 64 * 1024

GPU_UPSERT = (
    f"INSERT INTO gpu_samples (entity_id, ts, {', '.join(GPU_COLS)}) "
    f"VALUES ({', '.join('?' for _ in range(len(GPU_COLS) + 2))}) "
    f"ON CONFLICT (entity_id, ts) DO UPDATE SET {GPU_MERGE}"
)
POINT_UPSERT = ("INSERT INTO points (series_id, ts, value) VALUES (?, ?, ?) "
                "ON CONFLICT (series_id, ts) DO UPDATE SET value = excluded.value")
EVENT_INSERT = ("INSERT INTO events (ts, entity_id, kind, code) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING")


def write_sqlite(raw: Any, rows: Rows) -> None:
    """Upsert ``rows`` through the DB-API connection ``raw`` and commit (rolled back on error).

    Rows are upserted one by one, so a key repeated by two requests is merged as if the
    requests had been written one after the other.
    """
    gpu_rows, point_rows, event_rows = rows
    try:
        if not raw.info.get("foreshock_wal"):
            raw.cursor().execute(f"PRAGMA wal_autocheckpoint={_WAL_AUTOCHECKPOINT}")
            raw.cursor().execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            raw.info["foreshock_wal"] = True
        cur = raw.cursor()
        # IMMEDIATE takes the write lock up front, so another writer (the maintenance pass,
        # another program) makes this one wait (busy_timeout) instead of failing mid-way.
        cur.execute("BEGIN IMMEDIATE")
        if gpu_rows:
            cur.executemany(GPU_UPSERT, gpu_rows)
        if point_rows:
            cur.executemany(POINT_UPSERT, point_rows)
        if event_rows:
            cur.executemany(EVENT_INSERT, event_rows)
        cur.execute("COMMIT")
        cur.close()
    except BaseException:
        raw.rollback()
        raise
