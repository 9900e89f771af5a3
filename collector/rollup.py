"""Retention with rollups: raw points older than the raw retention become 1-minute rollups
(min, max, mean, last, count) and are deleted; rollups and events older than the rollup
retention are deleted. Disk stays bounded by the two retention times.

Rollups are made from the raw data at the moment it leaves, minute-aligned window by window,
each window in one transaction that also moves ``maintenance_state.raw_kept_from``: a query
reads raw data from that instant on and rollups before it, never both for the same minute.

Points compacted into hour chunks (PostgreSQL, collector/compact.py) are rolled up the same way
but leave with their whole chunk, once its last point is rolled up: rewriting every series'
oldest chunk on each pass, a minute at a time, would write an hour of data sixty times. Until
then a chunk's points older than the watermark stay readable as raw data (a trace export may
show them) and are never rolled up twice: compaction only takes points at or after the
watermark, so every compacted point before it has been rolled up.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd
from sqlalchemy import Connection, text

from collector.compact import chunk_points
from collector.metrics import GPU_METRICS
from collector.query import raw_kept_from

if TYPE_CHECKING:
    from collector.store import Store

log = logging.getLogger("foreshock.rollup")

WINDOW_S = 600.0
"""Raw data rolled up and deleted per transaction (keeps each one short)."""
_COLS = {m.column: m.name for m in GPU_METRICS}


@dataclass(frozen=True, kw_only=True)
class RetentionReport:
    """What one maintenance pass did."""

    rolled_up_rows: int
    deleted_raw_before: float
    deleted_rollups: int
    deleted_events: int


def _minute_stats(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    df = df.sort_values("ts", kind="stable")
    df["minute"] = (df["ts"] // 60.0) * 60.0
    out = df.groupby([*keys, "minute"])["value"].agg(["min", "max", "mean", "last", "count"])
    return out.reset_index()


def _gpu_series_ids(store: Store, conn: Connection, pairs: pd.DataFrame
                    ) -> dict[tuple[int, str], int]:
    """Series of kind 'rollup' for (GPU entity, canonical column), created as needed."""
    rows = [{"key": f"rollup|{int(e)}|{name}", "job": job, "name": name, "entity_id": int(e),
             "stat": "", "kind": "rollup", "unit": "", "attrs": "{}"}
            for e, job, name in pairs[["entity_id", "job", "name"]].itertuples(index=False)]
    ids = store.writer.upsert_keys(
        "INSERT INTO series (key, job, name, entity_id, stat, kind, unit, attrs) "
        "VALUES (:key, :job, :name, :entity_id, :stat, :kind, :unit, :attrs) "
        "ON CONFLICT (key) DO NOTHING", "series", rows, conn=conn)
    return {(int(r["entity_id"]), str(r["name"])): ids[str(r["key"])] for r in rows}


def _window_rollups(store: Store, conn: Connection, lo: float, hi: float,
                    kept: float) -> pd.DataFrame:
    cols = ", ".join(f"g.{c}" for c in _COLS)
    # Joining through entities lets both databases seek the (entity_id, ts) primary key.
    gpu = pd.read_sql(text(
        f"SELECT g.entity_id, e.job, g.ts, {cols} FROM entities e JOIN gpu_samples g "
        "ON g.entity_id = e.id WHERE g.ts >= :lo AND g.ts < :hi"), conn,
        params={"lo": lo, "hi": hi})
    parts = []
    if len(gpu):
        long = gpu.melt(id_vars=["entity_id", "job", "ts"], var_name="col",
                        value_name="value").dropna(subset=["value"])
        long["name"] = long["col"].map(_COLS)
        stats = _minute_stats(long, ["entity_id", "job", "name"])
        ids = _gpu_series_ids(store, conn, stats[["entity_id", "job", "name"]].drop_duplicates())
        stats["series_id"] = [ids[(int(e), n)] for e, n in zip(stats["entity_id"],
                                                                  stats["name"], strict=True)]
        parts.append(stats)
    # Compacted points older than the watermark (``kept``, or ``lo`` once a window of this pass
    # has moved it) were rolled up already (see the docstring).
    points = pd.read_sql(text(_POINTS_SQLITE if store.is_sqlite else _POINTS_PG), conn,
                         params={"lo": lo, "hi": hi, "chunks_lo": max(lo, kept)})
    if len(points):
        parts.append(_minute_stats(points, ["series_id"]))
    if not parts:
        return pd.DataFrame(columns=["series_id", "minute", "min", "max", "mean", "last", "count"])
    return pd.concat(parts, ignore_index=True)


def _newest_raw_ts(conn: Connection) -> float | None:
    # Per-entity maxima use the (entity_id, ts) keys; a bare MAX(ts) would scan everything.
    sql = ["SELECT MAX((SELECT MAX(g.ts) FROM gpu_samples g WHERE g.entity_id = e.id)) "
           "FROM entities e",
           "SELECT MAX((SELECT MAX(p.ts) FROM points p WHERE p.series_id = s.id)) FROM series s"]
    if conn.dialect.name != "sqlite":
        # A series' newest chunk (by its key) ends with its newest compacted point.
        sql.append("SELECT MAX((SELECT c.t1 FROM point_chunks c WHERE c.series_id = s.id "
                   "ORDER BY c.t0 DESC LIMIT 1)) FROM series s")
    found = [float(v) for v in (conn.execute(text(q)).scalar() for q in sql) if v is not None]
    return max(found) if found else None


def _first_raw_ts(conn: Connection, kept: float, since: float = -math.inf) -> float | None:
    """The oldest raw point at or after ``since`` not rolled up yet (or a little before it)."""
    # Per entity and series through their keys: a bare MIN(ts) would scan everything.
    lows = [conn.execute(text(q), {"t": since}).scalar() for q in (
        "SELECT MIN((SELECT MIN(g.ts) FROM gpu_samples g WHERE g.entity_id = e.id "
        "AND g.ts >= :t)) FROM entities e",
        "SELECT MIN((SELECT MIN(p.ts) FROM points p WHERE p.series_id = s.id "
        "AND p.ts >= :t)) FROM series s")]
    kept = max(kept, since)
    if conn.dialect.name != "sqlite":
        # Per series, its chunks by key up to the first one that reaches the watermark.
        chunk = conn.execute(text(
            "SELECT MIN((SELECT MIN(c.t0) FROM point_chunks c WHERE c.series_id = s.id "
            "AND c.t1 >= :kept)) FROM series s"), {"kept": kept}).scalar()
        lows.append(None if chunk is None else max(float(chunk), kept))
    found = [float(v) for v in lows if v is not None]
    return min(found) if found else None


def _minute(ts: float) -> float:
    """The start of the minute ``ts`` lies in."""
    return math.floor(ts / 60.0) * 60.0


def _set_state(conn: Connection, name: str, value: float) -> None:
    conn.execute(text("INSERT INTO maintenance_state (name, value) VALUES (:n, :v) "
                      "ON CONFLICT (name) DO UPDATE SET value = excluded.value"),
                 {"n": name, "v": value})


def roll_up_and_expire(store: Store, *, now: float, raw_retention_s: float,
                       rollup_retention_s: float) -> RetentionReport:
    """One maintenance pass (see the module docstring); safe to run at any time, repeatedly.

    Ages count back from ``now`` or from the newest raw point if that is older, so a trace
    imported from the past keeps its raw data until newer data arrives.
    """
    with store.engine.connect() as conn:
        kept = raw_kept_from(conn)
        newest = _newest_raw_ts(conn)
    reference = now if newest is None else min(now, newest)
    cutoff = _minute(reference - raw_retention_s)
    rolled = 0
    first = None
    if newest is not None and cutoff > kept:
        # Not when the store held no raw point a moment ago: points written since (a trace
        # imported from the past) would be aged against ``now``, not against their own newest.
        with store.engine.connect() as conn:
            first = _first_raw_ts(conn, kept)
    if first is not None and first < cutoff:
        # From the oldest raw point, not from the watermark: late or imported points older
        # than it are rolled up too (merged into their minutes) instead of lingering.
        lo = _minute(first)
        while lo < cutoff:
            hi = min(cutoff, lo + WINDOW_S)
            with store.writer.transaction() as conn:
                stats = _window_rollups(store, conn, lo, hi, kept)
                if len(stats):
                    conn.execute(text(_MERGE_SQLITE if store.is_sqlite else _MERGE_PG),
                                 _records(stats))
                    rolled += len(stats)
                for table in ("gpu_samples", "points"):
                    conn.execute(text(f"DELETE FROM {table} WHERE ts < :hi"), {"hi": hi})
                if not store.is_sqlite:
                    conn.execute(text(_DELETE_CHUNKS), {"hi": hi})
                to = hi
                if not len(stats):
                    # A gap in the raw data: go to its end at once, not through it a window at a
                    # time (a point from a clock a year off once took 52,560 windows, 66 s).
                    after = _first_raw_ts(conn, kept, since=hi)
                    to = cutoff if after is None else max(hi, min(cutoff, _minute(after)))
                _set_state(conn, "raw_kept_from", max(kept, to))
            lo = to
    horizon = reference - rollup_retention_s
    with store.writer.transaction() as conn:
        n_rollups = conn.execute(text("DELETE FROM rollups WHERE ts < :t"), {"t": horizon})
        n_events = conn.execute(text("DELETE FROM events WHERE ts < :t"), {"t": horizon})
    report = RetentionReport(rolled_up_rows=rolled, deleted_raw_before=cutoff,
                             deleted_rollups=n_rollups.rowcount or 0,
                             deleted_events=n_events.rowcount or 0)
    if rolled or report.deleted_rollups or report.deleted_events:
        log.info("retention: %s", report)
    return report


_POINTS_SQLITE = ("SELECT p.series_id, p.ts, p.value FROM series s "
                  "JOIN points_all p ON p.series_id = s.id WHERE p.ts >= :lo AND p.ts < :hi")
_POINTS_PG = f"""SELECT s.id AS series_id, p.ts, p.value FROM series s CROSS JOIN LATERAL (
  SELECT r.ts, r.value FROM points r WHERE r.series_id = s.id AND r.ts >= :lo AND r.ts < :hi
  UNION ALL
  {chunk_points(series="s.id", lo=":chunks_lo", hi=":hi")}
) p WHERE p.ts < :hi"""
# Chunks whose last point is rolled up, found per series through the (series_id, t0) key.
_DELETE_CHUNKS = """DELETE FROM point_chunks WHERE ctid = ANY(ARRAY(
  SELECT x.ctid FROM series s CROSS JOIN LATERAL (
    SELECT c.ctid FROM point_chunks c WHERE c.series_id = s.id AND c.t0 < :hi AND c.t1 < :hi
  ) x))"""

_MERGE = (
    "INSERT INTO rollups (series_id, ts, min, max, mean, last, count) "
    "VALUES (:series_id, :minute, :min, :max, :mean, :last, :count) "
    "ON CONFLICT (series_id, ts) DO UPDATE SET min = {least}(rollups.min, excluded.min), "
    "max = {greatest}(rollups.max, excluded.max), "
    "mean = (rollups.mean * rollups.count + excluded.mean * excluded.count) "
    "/ (rollups.count + excluded.count), last = rollups.last, "
    "count = rollups.count + excluded.count")
# A minute rolled up twice (points that arrived late) merges; its 'last' stays the first one's.
_MERGE_SQLITE = _MERGE.format(least="min", greatest="max")
_MERGE_PG = _MERGE.format(least="LEAST", greatest="GREATEST")


def _records(stats: pd.DataFrame) -> list[dict[str, Any]]:
    cols = ("series_id", "minute", "min", "max", "mean", "last", "count")
    return [{"series_id": int(r[0]), "minute": float(r[1]), "min": float(r[2]),
             "max": float(r[3]), "mean": float(r[4]), "last": float(r[5]), "count": int(r[6])}
            for r in zip(*(stats[c] for c in cols), strict=True)]
