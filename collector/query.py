"""Reading series back: list series, range queries with a step and an aggregation, latest values.

A range query reads raw points where they are still kept and 1-minute rollups before that
(``maintenance_state.raw_kept_from``), so old ranges keep answering after retention. Raw
narrow points are read whether still in ``points`` or compacted into chunks (collector/compact.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
from sqlalchemy import text

from collector.compact import points_join
from collector.metrics import CANONICAL, GPU_COLUMNS

if TYPE_CHECKING:
    from collector.store import Store

Agg = Literal["mean", "min", "max", "last", "sum", "count"]
AGGS: tuple[str, ...] = ("mean", "min", "max", "last", "sum", "count")
STATS: tuple[str, ...] = ("", "sum", "count", "min", "max")
MAX_POINTS = 200_000
"""Most points one range query returns; past it, ask for a coarser ``step``."""


class UnknownMetricError(LookupError):
    """No series of this metric (with this stat) exists in the store."""


class QueryError(ValueError):
    """A query's parameters do not make sense; the message names the parameter."""


@dataclass(frozen=True, kw_only=True)
class EntityFilter:
    """Restricts a query to entities whose given attributes match (None: any)."""

    job: str | None = None
    node: str | None = None
    rank: int | None = None
    gpu: int | None = None
    peer: str | None = None

    def sql(self, alias: str = "e") -> tuple[str, dict[str, Any]]:
        clauses, params = [], {}
        for name in ("job", "node", "rank", "gpu", "peer"):
            value = getattr(self, name)
            if value is not None:
                clauses.append(f"{alias}.{name} = :f_{name}")
                params[f"f_{name}"] = value
        return (" AND ".join(clauses) or "1 = 1"), params


_LABELS = "e.job, e.node, e.rank, e.gpu, e.peer, e.gpu_uuid"
_LABEL_NAMES = ("job", "node", "rank", "gpu", "peer", "gpu.uuid")


def _labels(row: Any, attrs: str | None = None) -> dict[str, Any]:
    labels = {k: v for k, v in zip(_LABEL_NAMES, row, strict=True) if v is not None}
    if attrs and attrs != "{}":
        labels.update(json.loads(attrs))
    return labels


def raw_kept_from(conn: Any) -> float:
    """Start of the raw data (earlier minutes exist only as rollups); -inf before any retention."""
    value = conn.execute(text(
        "SELECT value FROM maintenance_state WHERE name = 'raw_kept_from'")).scalar()
    return float(value) if value is not None else -math.inf


def list_series(store: Store, *, where: EntityFilter, name: str | None = None,
                limit: int = 1000) -> list[dict[str, Any]]:
    """Series (metric + labels) known to the store; each GPU lists one per canonical column."""
    cond, params = where.sql()
    out: list[dict[str, Any]] = []
    with store.engine.connect() as conn:
        gpu_names = [n for n in GPU_COLUMNS if name in (None, n)]
        if gpu_names:
            rows = conn.execute(text(
                f"SELECT {_LABELS} FROM entities e WHERE {cond} AND e.gpu IS NOT NULL AND "
                "EXISTS (SELECT 1 FROM gpu_samples g WHERE g.entity_id = e.id) "
                "ORDER BY e.job, e.node, e.gpu LIMIT :lim"), {**params, "lim": limit})
            for row in rows:
                out.extend({"metric": n, "stat": "", "labels": _labels(row),
                            "kind": "cumulative" if CANONICAL[n].kind == "cumulative" else "gauge",
                            "unit": CANONICAL[n].unit} for n in gpu_names)
        name_cond = " AND s.name = :name" if name else ""
        rows = conn.execute(text(
            f"SELECT {_LABELS}, s.name, s.stat, s.kind, s.unit, s.attrs FROM series s "
            f"JOIN entities e ON e.id = s.entity_id WHERE {cond}{name_cond} "
            "AND s.kind != 'rollup' ORDER BY s.name, s.id LIMIT :lim"),
            {**params, "name": name, "lim": limit})
        for row in rows:
            out.append({"metric": row[6], "stat": row[7], "kind": row[8], "unit": row[9],
                        "labels": _labels(row[:6], row[10])})
    return out[:limit]


def _raw_rows(conn: Any, metric: str, stat: str, where: EntityFilter, start: float,
              end: float) -> pd.DataFrame:
    cond, params = where.sql()
    params = {**params, "start": start, "end": end, "lim": MAX_POINTS + 1}
    if metric in GPU_COLUMNS:
        col = GPU_COLUMNS[metric]
        sql = (f"SELECT e.id AS sid, '{{}}' AS attrs, {_LABELS}, g.ts, g.{col} AS value "
               f"FROM gpu_samples g JOIN entities e ON e.id = g.entity_id WHERE {cond} "
               f"AND g.ts >= :start AND g.ts <= :end AND g.{col} IS NOT NULL LIMIT :lim")
    else:
        points = points_join(sqlite=conn.dialect.name == "sqlite", lo=":start", hi=":end")
        sql = (f"SELECT s.id AS sid, s.attrs, {_LABELS}, p.ts, p.value FROM series s "
               f"JOIN entities e ON e.id = s.entity_id {points} "
               f"WHERE {cond} AND s.name = :name AND s.stat = :stat AND s.kind != 'rollup' "
               "LIMIT :lim")
        params.update(name=metric, stat=stat)
    return pd.read_sql(text(sql), conn, params=params)


def _rollup_rows(conn: Any, metric: str, stat: str, where: EntityFilter, start: float,
                 end: float, agg: str) -> pd.DataFrame:
    cond, params = where.sql()
    col = {"mean": "r.mean", "min": "r.min", "max": "r.max", "last": "r.last",
           "count": "r.count", "sum": "r.mean * r.count"}[agg]
    # GPU columns roll up into series of kind 'rollup'; group them by entity like raw rows.
    sid = "e.id" if metric in GPU_COLUMNS else "s.id"
    kind = "s.kind = 'rollup'" if metric in GPU_COLUMNS else "s.kind != 'rollup'"
    sql = (f"SELECT {sid} AS sid, s.attrs, {_LABELS}, r.ts, {col} AS value FROM rollups r "
           "JOIN series s ON s.id = r.series_id JOIN entities e ON e.id = s.entity_id "
           f"WHERE {cond} AND s.name = :name AND s.stat = :stat AND {kind} "
           "AND r.ts >= :start AND r.ts <= :end LIMIT :lim")
    return pd.read_sql(text(sql), conn, params={
        **params, "name": metric, "stat": stat, "start": start, "end": end, "lim": MAX_POINTS + 1})


def query_range(store: Store, *, metric: str, where: EntityFilter, start: float, end: float,
                step: float | None = None, agg: str = "mean", stat: str = ""
                ) -> list[dict[str, Any]]:
    """Points of ``metric`` per series in ``[start, end]``; with ``step``, one ``agg`` per step."""
    if not end >= start:
        raise QueryError(f"end={end} must not be before start={start}")
    if agg not in AGGS:
        raise QueryError(f"agg={agg!r} must be one of {', '.join(AGGS)}")
    if stat not in STATS:
        raise QueryError(f"stat={stat!r} must be one of sum, count, min, max (or empty)")
    if step is not None and (step <= 0 or (end - start) / step > MAX_POINTS):
        raise QueryError(f"step={step} must be > 0 and give at most {MAX_POINTS} steps")
    with store.engine.connect() as conn:
        if metric not in GPU_COLUMNS and conn.execute(text(
                "SELECT 1 FROM series WHERE name = :n AND stat = :s LIMIT 1"),
                {"n": metric, "s": stat}).first() is None:
            hint = " (a histogram: pass stat=sum, count, min or max)" if stat == "" else ""
            raise UnknownMetricError(f"no series of metric {metric!r} with stat={stat!r}{hint}")
        kept = raw_kept_from(conn)
        frames = []
        if start < kept:
            frames.append(_rollup_rows(conn, metric, stat, where, start, min(end, kept), agg))
        if end >= kept:
            frames.append(_raw_rows(conn, metric, stat, where, max(start, kept), end))
    df = pd.concat(frames, ignore_index=True)
    if len(df) > MAX_POINTS:
        raise QueryError(f"more than {MAX_POINTS} points: narrow the filters or pass a step")
    out = []
    for _sid, group in df.sort_values("ts", kind="stable").groupby("sid", sort=False):
        first = group.iloc[0]
        labels = _labels([first[k] if pd.notna(first[k]) else None
                          for k in ("job", "node", "rank", "gpu", "peer", "gpu_uuid")],
                         first["attrs"])
        labels = {k: (int(v) if k in ("rank", "gpu") else v) for k, v in labels.items()}
        if step is None:
            points = list(zip(group["ts"].astype(float), group["value"].astype(float),
                              strict=True))
        else:
            bucket = (group["ts"] // step) * step
            series = group.groupby(bucket)["value"].agg(
                "last" if agg == "last" else "size" if agg == "count" else agg)
            points = list(zip(series.index.astype(float), series.astype(float), strict=True))
        out.append({"labels": labels, "points": [[t, v] for t, v in points]})
    return out


_LATEST_SQLITE = ("JOIN points_all p ON p.series_id = s.id AND p.ts = "
                  "(SELECT MAX(p2.ts) FROM points_all p2 WHERE p2.series_id = s.id)")
# The newest raw point or the last one of the newest chunk (its arrays are in time order),
# whichever is later; the raw one if both are the same point written twice.
_LATEST_PG = """CROSS JOIN LATERAL (
  SELECT b.ts, b.value FROM (
    (SELECT r.ts, r.value, 0 AS chunked FROM points r WHERE r.series_id = s.id
     ORDER BY r.ts DESC LIMIT 1)
    UNION ALL
    (SELECT c.t1, c.vals[array_upper(c.vals, 1)], 1 FROM point_chunks c
     WHERE c.series_id = s.id ORDER BY c.t0 DESC LIMIT 1)
  ) b ORDER BY b.ts DESC, b.chunked LIMIT 1
) p"""


def latest(store: Store, *, metric: str, where: EntityFilter, stat: str = ""
           ) -> list[dict[str, Any]]:
    """The newest raw value of ``metric`` for each matching entity (and series)."""
    cond, params = where.sql()
    if metric in GPU_COLUMNS:
        col = GPU_COLUMNS[metric]
        sql = (f"SELECT {_LABELS}, '{{}}', g.ts, g.{col} FROM entities e "
               f"JOIN gpu_samples g ON g.entity_id = e.id WHERE {cond} AND g.ts = ("
               f"SELECT MAX(g2.ts) FROM gpu_samples g2 WHERE g2.entity_id = e.id "
               f"AND g2.{col} IS NOT NULL) ORDER BY e.job, e.node, e.gpu")
    else:
        sql = (f"SELECT {_LABELS}, s.attrs, p.ts, p.value FROM series s "
               f"JOIN entities e ON e.id = s.entity_id "
               f"{_LATEST_SQLITE if store.is_sqlite else _LATEST_PG} "
               f"WHERE {cond} AND s.name = :name AND s.stat = :stat AND s.kind != 'rollup' "
               "ORDER BY e.job, e.node, s.id")
        params.update(name=metric, stat=stat)
    with store.engine.connect() as conn:
        rows = conn.execute(text(sql), params).all()
    return [{"labels": _labels(r[:6], r[6]), "ts": float(r[7]), "value": float(r[8])}
            for r in rows]


def list_events(store: Store, *, where: EntityFilter, kind: str | None, start: float,
                end: float, limit: int = 10_000) -> list[dict[str, Any]]:
    """Events (XIDs) in ``[start, end]``, oldest first."""
    cond, params = where.sql()
    kind_cond = " AND ev.kind = :kind" if kind else ""
    with store.engine.connect() as conn:
        rows = conn.execute(text(
            f"SELECT {_LABELS}, ev.ts, ev.kind, ev.code FROM events ev "
            f"JOIN entities e ON e.id = ev.entity_id WHERE {cond}{kind_cond} "
            "AND ev.ts >= :start AND ev.ts <= :end ORDER BY ev.ts LIMIT :lim"),
            {**params, "kind": kind, "start": start, "end": end, "lim": limit}).all()
    return [{"labels": _labels(r[:6]), "ts": float(r[6]), "kind": r[7], "code": r[8]}
            for r in rows]
