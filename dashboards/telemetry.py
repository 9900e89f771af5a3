"""SQL over the store's telemetry tables, shaped the way Grafana's PostgreSQL panels want it.

Timestamps in the store are float Unix seconds, so every query filters and buckets with the
``$__unixEpoch*`` macros. Time-series queries return ``time``, a ``metric`` text column (the
series name) and one ``value`` column: Grafana turns that long frame into one series per
``metric``.
"""

from __future__ import annotations

from collector.compact import chunk_points
from collector.metrics import GPU_METRICS

_CANONICAL = {m.column: m.name for m in GPU_METRICS}

GPU_FILTER = "e.job = '$job' AND e.node IN ($node) AND e.gpu IN ($gpu)"
"""The GPUs picked in the GPU dashboard's ``$job``, ``$node`` and ``$gpu`` variables."""

GPU_LABEL = "e.node || ' gpu ' || e.gpu"
RANK_LABEL = "e.node || coalesce(' rank ' || e.rank, '')"
LINK_LABEL = "e.node || ' → ' || e.peer"

LOOKBACK_S = 600
"""How far before the range a counter rate looks for the sample that precedes the first one."""


CUT = "(SELECT coalesce(max(value), 0) FROM maintenance_state WHERE name = 'raw_kept_from')"
"""Raw data from here on, 1-minute rollups before: the maintenance loop rolls raw data up as raw
retention removes it and moves this watermark in the same transaction (collector/rollup.py)."""


def _gpu_rows(parts: dict[str, str], *, value: str, ts_filter: str) -> str:
    """``entity_id, label, part, ts, v`` of the picked GPUs from raw samples or rollups.

    ``value`` is the rollup column that stands for a minute (``mean``, ``max`` or ``last``).
    """
    rows = ", ".join(f"('{label}', g.{column})" for label, column in parts.items())
    names = {label: _CANONICAL[column] for label, column in parts.items()}
    # A minute's last value was read at its end, not at its start.
    # The raw sample at the cut would tie with that last value: start after it.
    rollup_ts, raw_from = ("r.ts + 60", ">") if value == "last" else ("r.ts", ">=")
    part_case = " ".join(f"WHEN '{name}' THEN '{label}'" for label, name in names.items())
    name_list = ", ".join(f"'{name}'" for name in names.values())
    return f"""
  SELECT g.entity_id, {GPU_LABEL} AS label, c.part, g.ts, c.v
  FROM gpu_samples g
  JOIN entities e ON e.id = g.entity_id
  CROSS JOIN LATERAL (VALUES {rows}) AS c(part, v)
  WHERE {ts_filter.format(ts="g.ts")} AND g.ts {raw_from} {CUT} AND {GPU_FILTER}
    AND c.v IS NOT NULL
  UNION ALL
  SELECT s.entity_id, {GPU_LABEL} AS label, CASE s.name {part_case} END AS part,
         {rollup_ts} AS ts, r.{value} AS v
  FROM rollups r
  JOIN series s ON s.id = r.series_id
  JOIN entities e ON e.id = s.entity_id
  WHERE {ts_filter.format(ts="r.ts")} AND r.ts < {CUT} AND s.kind = 'rollup'
    AND s.name IN ({name_list}) AND {GPU_FILTER}"""


def gpu_gauge(parts: dict[str, str], *, agg: str = "avg") -> str:
    """One series per selected GPU and part (label -> column of ``gpu_samples``)."""
    label = "label" if len(parts) == 1 else "label || ' ' || part"
    rows = _gpu_rows(parts, value="max" if agg == "max" else "mean",
                     ts_filter="$__unixEpochFilter({ts})")
    return f"""
WITH samples AS ({rows}
)
SELECT $__unixEpochGroupAlias(ts, $__interval), {label} AS metric, {agg}(v) AS "value"
FROM samples
GROUP BY 1, 2
ORDER BY 1, 2
"""


def gpu_counter_rate(parts: dict[str, str], *, per_s: float = 1.0) -> str:
    """Per-GPU increase rate of cumulative counters, reset-aware.

    The increase between two samples is the difference of the counter; a negative difference
    means the counter restarted from zero (GPU reset, driver reload), so the increase is the
    new value itself, as Prometheus' ``rate()`` counts it. Rollups contribute each minute's
    last value.
    """
    rows = _gpu_rows(
        parts, value="last",
        ts_filter=f"{{ts}} >= $__unixEpochFrom() - {LOOKBACK_S} AND {{ts}} <= $__unixEpochTo()",
    )
    return f"""
WITH samples AS ({rows}
), steps AS (
  SELECT label, part, ts, v, v - lag(v) OVER w AS dv, ts - lag(ts) OVER w AS dt
  FROM samples
  WINDOW w AS (PARTITION BY entity_id, part ORDER BY ts)
)
SELECT $__unixEpochGroupAlias(ts, $__interval),
       {"label" if len(parts) == 1 else "label || ' ' || part"} AS metric,
       {per_s:g} * sum(CASE WHEN dv < 0 THEN v ELSE dv END) / sum(dt) AS "value"
FROM steps
WHERE dt > 0 AND $__unixEpochFilter(ts)
GROUP BY 1, 2
ORDER BY 1, 2
"""


_CHUNKED = chunk_points(series="s.id", lo="$__unixEpochFrom()", hi="$__unixEpochTo()")

SERIES_POINTS = f"""CROSS JOIN LATERAL (
  SELECT ts, value FROM points
  WHERE series_id = s.id AND $__unixEpochFilter(ts) AND ts >= {CUT}
  UNION ALL
  SELECT ts, value FROM (
  {_CHUNKED}
  ) chunked WHERE ts >= {CUT}
  UNION ALL
  SELECT ts, mean FROM rollups
  WHERE series_id = s.id AND $__unixEpochFilter(ts) AND ts < {CUT}
) p"""
"""Points ``p`` of series ``s`` in the range: raw (still in ``points`` or compacted into
``point_chunks``), or rollup means where the panel reads rollups.

A lateral join, so that each picked series is one index range scan on ``(series_id, ts)`` and
one on the chunks' ``(series_id, t0)``."""


def signals(column: str) -> str:
    """The JSON list of signals in ``column`` as one readable line (``a, b, c``)."""
    return (f"CASE WHEN left({column}, 1) = '[' THEN array_to_string(ARRAY("
            f"SELECT json_array_elements_text({column}::json)), ', ') ELSE {column} END")


def series_points(name: str, *, extra_filter: str = "") -> str:
    """``series`` joined to its points and ``entities`` for metric ``name`` of ``$job``."""
    return f"""
FROM series s
JOIN entities e ON e.id = s.entity_id
{SERIES_POINTS}
WHERE s.job = '$job' AND s.name = '{name}'{extra_filter}
"""


MEAN = (
    "coalesce(sum(p.value) FILTER (WHERE s.stat = 'sum')"
    " / nullif(sum(p.value) FILTER (WHERE s.stat = 'count'), 0),"
    " avg(p.value) FILTER (WHERE s.stat = ''))"
)
"""Mean of a duration whether it arrived as a gauge (stat '') or as histogram sum and count."""


def train_mean_by(name: str, label: str, *, extra_filter: str = "") -> str:
    """Mean of training metric ``name`` per time bucket and ``label`` expression."""
    return f"""
SELECT $__unixEpochGroupAlias(p.ts, $__interval), {label} AS metric, {MEAN} AS "value"
{series_points(name, extra_filter=extra_filter).strip()}
GROUP BY 1, 2
ORDER BY 1, 2
"""


def link_mean(name: str) -> str:
    """Mean of a ``net.link.*`` probe per time bucket and (node, peer)."""
    return f"""
SELECT $__unixEpochGroupAlias(p.ts, $__interval), {LINK_LABEL} AS metric,
       avg(p.value) AS "value"
{series_points(name, extra_filter=" AND e.node IN ($node)").strip()}
GROUP BY 1, 2
ORDER BY 1, 2
"""
