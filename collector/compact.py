"""Compaction of settled narrow points into per-series chunks (PostgreSQL), and reading them.

On PostgreSQL a row of ``points`` costs ~95 bytes on disk (tuple header, alignment, index
entry) for 12 bytes of data. Once points are older than a settle age
(``FORESHOCK_COMPACT_AFTER_S``), the maintenance loop moves them into ``point_chunks``: one row
per series and hour, holding the hour's timestamps and values as two arrays: 16 bytes a point
plus ~130 a chunk, and, past 127 points (a chunk row over 2 kB), PostgreSQL compresses the
arrays (pglz, TOAST): ~13 bytes a point of noisy measurements, ~1.5 of repetitive ones
(counters, constant gauges). SQLite stores a narrow point in ~15 bytes already; there
compaction does nothing and ``point_chunks`` does not exist.

Readers see one set of points: the view ``points_all`` (both dialects), or, where a query
reads a time range of given series, :func:`points_join`, which seeks the chunks of the range
through their key instead of unnesting every chunk of a series.

Timestamps are stored in ticks of 2**-22 s (~0.24 us): float8 Unix seconds have exactly that
resolution from 2004 to 2038 (and a coarser one after), so every timestamp comes back bit for
bit, where milliseconds would round the nanosecond OTLP timestamps the writer stores. The ticks
are delta-encoded (int8: the first point's offset from the window's start, then each point's
from the one before), so a regular cadence leaves mostly zero bytes that compress, jitter and
all; readers add them up with a window function. A point whose timestamp would not survive the
round trip (only possible before 2004) stays in ``points``.

Points older than ``maintenance_state.raw_kept_from`` (late writes that retention has yet to
roll up) stay raw too: every compacted point older than the watermark has been rolled up, which
lets retention drop chunks whole (collector/rollup.py).

Each window moves in one statement (``DELETE ... RETURNING`` feeding an upsert of the chunks),
in its own transaction, so a crash loses or doubles nothing and a rerun carries on. A point
written again after its window was compacted (a retried or replayed request) lands in
``points`` and hides the chunk's copy, as the writer's upsert would; the next pass merges it
into the chunk, where the newer value replaces the older one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import text

if TYPE_CHECKING:
    from collector.store import Store

log = logging.getLogger("foreshock.compact")

WINDOW_S = 3600.0
"""Span of one chunk; windows are aligned to multiples of it (Unix time)."""
TICKS_PER_S = 4_194_304
"""2**22: float8's resolution of Unix seconds until 2038 (they get coarser after, never finer)."""
DEFAULT_SETTLE_S = 3600.0
"""Points younger than this stay raw: late and retried writes of recent data land there."""

_NO_LO, _NO_HI = "'-Infinity'::float8", "'Infinity'::float8"
_DECODE = f"""SELECT c.t0 + (sum(x.delta) OVER (ORDER BY x.n))::int8 / {TICKS_PER_S}::float8 AS ts,
           x.value
    FROM unnest(c.ts_deltas, c.vals) WITH ORDINALITY AS x(delta, value, n)"""
"""``ts, value`` of the points of chunk ``c``, in time order."""


@dataclass(frozen=True, kw_only=True)
class CompactionReport:
    """What one compaction pass did."""

    windows: int
    """Windows that had settled raw points (each one transaction)."""
    points: int
    """Raw points moved into chunks."""
    chunks: int
    """Chunk rows written, new or merged with a chunk that already held the window."""


# Per series, an index range of its raw points in the window; the rows go by ctid, so a point
# that a concurrent request rewrites in the meantime keeps its new version and stays raw. A
# window that has a chunk already (late points) is decoded, merged (the newer value wins) and
# encoded again.
_TICK = f"round((ts - :t0) * {TICKS_PER_S})::int8"
_MOVE = f"""
WITH moved AS (
  DELETE FROM points WHERE ctid = ANY(ARRAY(
    SELECT x.ctid FROM series s CROSS JOIN LATERAL (
      SELECT p.ctid FROM points p
      WHERE p.series_id = s.id AND p.ts >= :t0 AND p.ts < :t_end
        AND :t0 + round((p.ts - :t0) * {TICKS_PER_S}) / {TICKS_PER_S}::float8 = p.ts
    ) x))
  RETURNING series_id, ts, value
), written AS (
  INSERT INTO point_chunks (series_id, t0, t1, ts_deltas, vals)
  SELECT series_id, :t0, max(ts), array_agg(tick - prev ORDER BY tick),
         array_agg(value ORDER BY tick)
  FROM (SELECT series_id, ts, value, {_TICK} AS tick,
               coalesce(lag({_TICK}) OVER (PARTITION BY series_id ORDER BY ts), 0) AS prev
        FROM moved) m
  GROUP BY series_id
  ON CONFLICT (series_id, t0) DO UPDATE SET (t1, ts_deltas, vals) = (
    SELECT point_chunks.t0 + max(m.tick) / {TICKS_PER_S}::float8,
           array_agg(m.tick - m.prev ORDER BY m.tick), array_agg(m.value ORDER BY m.tick)
    FROM (SELECT u.tick, u.value, coalesce(lag(u.tick) OVER (ORDER BY u.tick), 0) AS prev
          FROM (SELECT DISTINCT ON (z.tick) z.tick, z.value FROM (
                  SELECT (sum(n.delta) OVER (ORDER BY n.i))::int8 AS tick, n.value, 0 AS older
                  FROM unnest(excluded.ts_deltas, excluded.vals)
                       WITH ORDINALITY AS n(delta, value, i)
                  UNION ALL
                  SELECT (sum(o.delta) OVER (ORDER BY o.i))::int8, o.value, 1
                  FROM unnest(point_chunks.ts_deltas, point_chunks.vals)
                       WITH ORDINALITY AS o(delta, value, i)
                ) z ORDER BY z.tick, z.older) u) m)
  RETURNING 1
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM written)
"""

# The oldest raw point at or after :from that is settled; one index probe per series.
_NEXT = ("SELECT MIN((SELECT MIN(p.ts) FROM points p WHERE p.series_id = s.id "
         "AND p.ts >= :from AND p.ts < :horizon)) FROM series s")


def compact_points(store: Store, *, now: float, settle_s: float = DEFAULT_SETTLE_S,
                   progress: Callable[[int], None] | None = None) -> CompactionReport:
    """Move raw points of windows wholly older than ``now - settle_s`` into chunks.

    Safe to run at any time and repeatedly; a no-op on SQLite. ``progress`` is called with the
    points of each window once its transaction has committed.
    """
    if not settle_s >= 0:
        raise ValueError(f"settle_s={settle_s} must be >= 0")
    if store.is_sqlite:
        return CompactionReport(windows=0, points=0, chunks=0)
    # Whole windows only: compacting a window that still fills would rewrite its chunk on
    # every pass.
    horizon = math.floor((now - settle_s) / WINDOW_S) * WINDOW_S
    from collector.query import raw_kept_from  # query reads chunks through this module

    windows = moved = written = 0
    with store.engine.connect() as conn:
        start = raw_kept_from(conn)
    while True:
        with store.engine.connect() as conn:
            first = conn.execute(text(_NEXT), {"from": start, "horizon": float(horizon)}).scalar()
        if first is None:
            break
        # floor(ts) first: float division could round a timestamp just below a window's end
        # up into the next window.
        t0 = float(math.floor(math.floor(first) / WINDOW_S) * WINDOW_S)
        with store.writer.transaction() as conn:
            n_points, n_chunks = conn.execute(
                text(_MOVE), {"t0": t0, "t_end": t0 + WINDOW_S}).one()
        windows, moved, written = windows + 1, moved + n_points, written + n_chunks
        if progress is not None:
            progress(int(n_points))
        start = t0 + WINDOW_S
    report = CompactionReport(windows=windows, points=moved, chunks=written)
    if moved:
        log.info("compaction: %s", report)
    return report


def chunk_points(*, series: str, lo: str = _NO_LO, hi: str = _NO_HI) -> str:
    """``SELECT ts, value`` of the compacted points of ``series`` (an SQL expression) in
    ``[lo, hi]``, less those written again into ``points`` since (PostgreSQL).

    Only the chunks that overlap the range are read, through the ``(series_id, t0)`` key; the
    check for points written again costs an index probe per point only in chunks newer than
    the series' oldest raw point, which is none unless a write came late.
    """
    return f"""SELECT u.ts, u.value FROM point_chunks c
  CROSS JOIN LATERAL (
    {_DECODE}
  ) u
  WHERE c.series_id = {series} AND c.t0 > {lo} - {WINDOW_S:g} AND c.t0 <= {hi}
    AND c.t1 >= {lo} AND u.ts >= {lo} AND u.ts <= {hi}
    AND (c.t1 < (SELECT coalesce(min(r.ts), 'Infinity') FROM points r
                 WHERE r.series_id = {series})
         OR NOT EXISTS (SELECT 1 FROM points r WHERE r.series_id = {series} AND r.ts = u.ts))"""


def points_join(*, sqlite: bool, series: str = "s.id", lo: str | None = None,
                hi: str | None = None) -> str:
    """A join clause adding ``p`` (``ts``, ``value``): the points of ``series`` (an SQL
    expression, usually ``s.id``) with ``lo <= ts <= hi``, raw or compacted alike."""
    if sqlite:
        bounds = "".join(f" AND p.ts {op} {v}" for op, v in ((">=", lo), ("<=", hi)) if v)
        return f"JOIN points_all p ON p.series_id = {series}{bounds}"
    raw = "".join(f" AND r.ts {op} {v}" for op, v in ((">=", lo), ("<=", hi)) if v)
    chunks = chunk_points(series=series, lo=lo or _NO_LO, hi=hi or _NO_HI)
    return f"""CROSS JOIN LATERAL (
  SELECT r.ts, r.value FROM points r WHERE r.series_id = {series}{raw}
  UNION ALL
  {chunks}
) p"""
