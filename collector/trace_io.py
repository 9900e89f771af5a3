"""Moving fleet-trace frames in and out of the store (export, import, online scoring).

Reading maps the tables onto the frames of ``fleet-trace/1``: ``gpu`` from ``gpu_samples``,
``node`` as the per-node mean over its ranks of the ``train.*`` durations at each sample time
(a histogram's mean is sum/count over the interval), ``links`` from ``net.link.*`` (node -> peer)
and ``events`` from ``events``; whether the job kept an XID log at all from ``jobs``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from sqlalchemy import text

from collector.compact import points_join
from collector.fleet_trace import FleetTrace, TraceMeta, empty_frame
from collector.metrics import CANONICAL, GPU_METRICS, LINK_TRACE_METRICS, NODE_TRACE_METRICS
from collector.otlp import GPU_INDEX, N_GPU, Batch, Entity
from collector.schema import NAME_LEN

if TYPE_CHECKING:
    from collector.store import Store

_CHUNK_ROWS = 20_000


def _where(job: str | None, start: float | None, end: float | None, ts: str) -> tuple[str, dict[
        str, Any]]:
    clauses: list[str] = ["1 = 1"]
    params: dict[str, Any] = {}
    if job is not None:
        clauses.append("e.job = :job")
        params["job"] = job
    if start is not None:
        clauses.append(f"{ts} >= :start")
        params["start"] = float(start)
    if end is not None:
        clauses.append(f"{ts} <= :end")
        params["end"] = float(end)
    return " AND ".join(clauses), params


def _read_gpu(conn: Any, where: str, params: dict[str, Any]) -> pd.DataFrame:
    cols = ", ".join(f"g.{m.column}" for m in GPU_METRICS)
    df = pd.read_sql(text(f"SELECT g.ts, e.node, e.gpu, {cols} FROM gpu_samples g "
                          f"JOIN entities e ON e.id = g.entity_id WHERE {where} "
                          "ORDER BY g.ts, e.node, e.gpu"),
                     conn, params=params)
    df.columns = ["ts", "node", "gpu", *(m.name for m in GPU_METRICS)]
    df["ts"] = df["ts"].astype("float64")
    df["gpu"] = df["gpu"].fillna(-1).astype("int64")
    for m in GPU_METRICS:
        df[m.name] = df[m.name].astype("float64")
    return df


def _read_points(conn: Any, where: str, params: dict[str, Any], names: tuple[str, ...]
                 ) -> pd.DataFrame:
    in_names = ", ".join(f":n{i}" for i in range(len(names)))
    points = points_join(sqlite=conn.dialect.name == "sqlite",
                         lo=":start" if "start" in params else None,
                         hi=":end" if "end" in params else None)
    params = {**params, **{f"n{i}": n for i, n in enumerate(names)}}
    return pd.read_sql(text(
        "SELECT p.ts, e.node, e.rank, e.peer, s.name, s.stat, s.kind, s.attrs, p.value "
        f"FROM series s JOIN entities e ON e.id = s.entity_id {points} "
        f"WHERE {where} AND s.name IN ({in_names})"), conn, params=params)


def _per_rank_values(df: pd.DataFrame) -> pd.DataFrame:
    """One value per (node, rank, name, ts): gauges as they are, histograms as sum/count."""
    plain = df[df["stat"] == ""][["ts", "node", "rank", "name", "value"]]
    hist = df[df["stat"].isin(["sum", "count"])]
    parts = [plain]
    if len(hist):
        keys = ["node", "rank", "name", "attrs", "kind"]
        wide = hist.pivot_table(index=[*keys, "ts"], columns="stat", values="value",
                                aggfunc="last").reset_index().sort_values("ts")
        if "sum" in wide and "count" in wide:
            cumulative = wide["kind"] == "histogram"
            grouped = wide.groupby(keys, dropna=False)
            d_sum, d_count = grouped["sum"].diff(), grouped["count"].diff()
            # A cumulative histogram's interval is the difference to its previous point; the
            # first point, or one after a counter reset, stands for itself.
            use_raw = d_count.isna() | (d_count < 0) | (d_sum.isna())
            s = np.where(cumulative & ~use_raw, d_sum, wide["sum"])
            c = np.where(cumulative & ~use_raw, d_count, wide["count"])
            wide["s"], wide["c"] = s, c
            agg = wide.groupby(["node", "rank", "name", "ts"], dropna=False)[["s", "c"]].sum()
            agg = agg[agg["c"] > 0]
            agg["value"] = agg["s"] / agg["c"]
            parts.append(agg.reset_index()[["ts", "node", "rank", "name", "value"]])
    out = pd.concat(parts, ignore_index=True)
    # Several series per rank (ops, kernels): one value per rank, then the mean over ranks.
    return out.groupby(["node", "rank", "name", "ts"], dropna=False)["value"].mean().reset_index()


def _read_node(conn: Any, where: str, params: dict[str, Any]) -> pd.DataFrame:
    df = _read_points(conn, where, params, NODE_TRACE_METRICS)
    if not len(df):
        return empty_frame("node.csv.gz")
    per_rank = _per_rank_values(df)
    node = per_rank.pivot_table(index=["ts", "node"], columns="name", values="value",
                                aggfunc="mean").reset_index()
    node.columns.name = None
    cols = ["ts", "node", *(n for n in NODE_TRACE_METRICS if n in node.columns)]
    return node[cols].sort_values("ts", kind="stable").reset_index(drop=True)


def _read_links(conn: Any, where: str, params: dict[str, Any]) -> pd.DataFrame:
    df = _read_points(conn, where + " AND e.peer IS NOT NULL", params, LINK_TRACE_METRICS)
    if not len(df):
        return empty_frame("links.csv.gz")
    links = df.pivot_table(index=["ts", "node", "peer"], columns="name", values="value",
                           aggfunc="mean").reset_index()
    links.columns.name = None
    links = links.rename(columns={"node": "src", "peer": "dst"})
    for name in LINK_TRACE_METRICS:
        if name not in links:
            links[name] = float("nan")
    cols = ["ts", "src", "dst", *LINK_TRACE_METRICS]
    return links[cols].sort_values("ts", kind="stable").reset_index(drop=True)


def _read_events(conn: Any, where: str, params: dict[str, Any]) -> pd.DataFrame:
    df = pd.read_sql(text(f"SELECT ev.ts, e.node, e.gpu, ev.kind, ev.code FROM events ev "
                          f"JOIN entities e ON e.id = ev.entity_id WHERE {where} ORDER BY ev.ts"),
                     conn, params=params)
    if not len(df):
        return empty_frame("events.csv")
    df["ts"] = df["ts"].astype("float64")
    df["gpu"] = df["gpu"].fillna(-1).astype("int64")
    df["code"] = df["code"].astype("float64")
    return df


def read_store_trace(store: Store, *, job: str | None, start: float | None,
                     end: float | None) -> FleetTrace:
    """The store's data as a :class:`FleetTrace` (see the module docstring)."""
    with store.engine.connect() as conn:
        gpu = _read_gpu(conn, *_where(job, start, end, "g.ts"))
        node = _read_node(conn, *_where(job, start, end, "p.ts"))
        links = _read_links(conn, *_where(job, start, end, "p.ts"))
        events = _read_events(conn, *_where(job, start, end, "ev.ts"))
        nodes_sql = "SELECT DISTINCT node FROM entities" + (" WHERE job = :job" if job else "")
        nodes = sorted(n for (n,) in conn.execute(text(nodes_sql), {"job": job}) if n)
        all_ts = [f["ts"] for f in (gpu, node, links, events) if len(f)]
        lo = min(float(t.min()) for t in all_ts) if all_ts else 0.0
        hi = max(float(t.max()) for t in all_ts) if all_ts else 0.0
        events_exported = _events_exported(conn, job, hi)
    interval = 10.0
    if len(gpu) > 1:
        diffs = gpu.sort_values(["node", "gpu", "ts"]).groupby(["node", "gpu"])["ts"].diff()
        diffs = diffs[diffs > 0]
        if len(diffs):
            interval = float(diffs.median())
    gpus_per_node = int(gpu.groupby("node")["gpu"].nunique().max()) if len(gpu) else 0
    meta = TraceMeta(
        start=float(start) if start is not None and math.isfinite(start) else lo,
        end=float(end) if end is not None and math.isfinite(end) and end >= lo else hi,
        interval_s=interval, nodes=tuple(nodes), gpus_per_node=gpus_per_node,
        extra={"job": job} if job else {})
    return FleetTrace(meta=meta, gpu=gpu, node=node, links=links, events=events,
                      events_exported=events_exported)


def _events_exported(conn: Any, job: str | None, hi: float) -> bool:
    """Whether the data read, up to ``hi``, kept an XID log: a job without a ``jobs`` row did,
    and so does data past the end of the trace imported without one (a live hook's). All jobs
    at once read as kept unless none of them kept one: their events are then written out."""
    if job is not None:
        marks = list(conn.execute(
            text("SELECT events_exported, through FROM jobs WHERE job = :job"), {"job": job}))
    else:
        marks = list(conn.execute(text(
            "SELECT j.events_exported, j.through FROM (SELECT DISTINCT job FROM entities) e "
            "LEFT JOIN jobs j ON j.job = e.job")))
    return not marks or any(kept is None or bool(kept) or hi > through
                            for kept, through in marks)


def unlogged_jobs(store: Store, *, start: float | None = None,
                  end: float | None = None) -> list[str]:
    """Jobs imported from a trace without an XID log (``foreshock import``) with data of that
    import (up to the mark's ``through``) between ``start`` and ``end``, by name."""
    with store.engine.connect() as conn:
        marks = list(conn.execute(text("SELECT job, through FROM jobs WHERE NOT events_exported")))
        return sorted(job for job, through in marks
                      if _has_data(conn, job, start, through if end is None else min(end, through)))


def _has_data(conn: Any, job: str, start: float | None, end: float) -> bool:
    """Whether ``job`` holds a GPU sample or a point between ``start`` and ``end``."""
    if start is not None and end < start:
        return False
    where, params = _where(job, start, end, "g.ts")
    if conn.execute(text(f"SELECT 1 FROM gpu_samples g JOIN entities e ON e.id = g.entity_id "
                         f"WHERE {where} LIMIT 1"), params).first() is not None:
        return True
    where, params = _where(job, start, end, "p.ts")
    points = points_join(sqlite=conn.dialect.name == "sqlite",
                         lo=":start" if "start" in params else None, hi=":end")
    return conn.execute(text(f"SELECT 1 FROM series s JOIN entities e ON e.id = s.entity_id "
                             f"{points} WHERE {where} LIMIT 1"), params).first() is not None


def _value(v: Any) -> float | None:
    return None if v is None or v != v else float(v)


def _gpu_batches(trace: FleetTrace, job: str) -> list[Batch]:
    known = [c for c in trace.gpu.columns if c in GPU_INDEX]
    extra = [c for c in trace.gpu.columns if c.startswith("gpu.") and c not in GPU_INDEX]
    batches = []
    frame = trace.gpu
    for lo in range(0, len(frame), _CHUNK_ROWS):
        part = frame.iloc[lo:lo + _CHUNK_ROWS]
        batch = Batch()
        idx = [GPU_INDEX[c] for c in known]
        for row in zip(part["ts"], part["node"], part["gpu"], *(part[c] for c in known),
                       strict=True):
            ent: Entity = (job, str(row[1]), None, int(row[2]), None, None)
            vals: list[float | None] = [None] * N_GPU
            for i, v in zip(idx, row[3:], strict=True):
                vals[i] = _value(v)
            batch.gpu[(batch.entity(ent), float(row[0]))] = vals
            batch.accepted += sum(v is not None for v in vals)
        for col in extra:
            for ts, node, g, v in zip(part["ts"], part["node"], part["gpu"], part[col],
                                      strict=True):
                if _value(v) is not None:
                    ent = (job, str(node), None, int(g), None, None)
                    ref = batch.series_ref((ent, col, "", "gauge", "", "{}"))
                    batch.points[(ref, float(ts))] = float(v)
                    batch.accepted += 1
        batches.append(batch)
    return batches


def _narrow_batches(frame: pd.DataFrame, names: tuple[str, ...], job: str, src: str,
                    dst: str | None) -> list[Batch]:
    batches = []
    present = [n for n in names if n in frame.columns]
    for lo in range(0, len(frame), _CHUNK_ROWS):
        part = frame.iloc[lo:lo + _CHUNK_ROWS]
        batch = Batch()
        peers = part[dst] if dst else [None] * len(part)
        for name in present:
            unit = CANONICAL[name].unit
            for ts, node, peer, v in zip(part["ts"], part[src], peers, part[name], strict=True):
                if _value(v) is None:
                    continue
                ent: Entity = (job, str(node), None, None, None if peer is None else str(peer),
                               None)
                ref = batch.series_ref((ent, name, "", "gauge", unit, "{}"))
                batch.points[(ref, float(ts))] = float(v)
                batch.accepted += 1
        batches.append(batch)
    return batches


def _event_batch(trace: FleetTrace, job: str) -> Batch:
    batch = Batch()
    ev = trace.events
    for ts, node, g, kind, code in zip(ev["ts"], ev["node"], ev["gpu"], ev["kind"], ev["code"],
                                       strict=True):
        gpu = None if g is None or g != g or int(g) < 0 else int(g)
        ent: Entity = (job, str(node), None, gpu, None, None)
        batch.events.add((batch.entity(ent), float(ts), str(kind),
                          None if code != code else int(code)))
        batch.accepted += 1
    return batch


def trace_batches(trace: FleetTrace, *, job: str) -> list[Batch]:
    """The frames of ``trace`` as store batches (each a few thousand rows)."""
    return [
        *_gpu_batches(trace, job),
        *_narrow_batches(trace.node, NODE_TRACE_METRICS, job, "node", None),
        *_narrow_batches(trace.links, LINK_TRACE_METRICS, job, "src", "dst"),
        _event_batch(trace, job),
    ]


def _check_names(trace: FleetTrace, job: str) -> None:
    """Refuse, before anything is written, a job or node name longer than the store keeps."""
    names = {*trace.meta.nodes, *trace.gpu["node"].unique(), *trace.node["node"].unique(),
             *trace.links["src"].unique(), *trace.links["dst"].unique(),
             *trace.events["node"].unique()}
    long = sorted((n for n in names if len(n) > NAME_LEN), key=len)
    if len(job) > NAME_LEN:
        raise ValueError(f"job name {job[:40]!r}... is {len(job)} characters long; the store "
                         f"keeps at most {NAME_LEN} (give a shorter --job)")
    if long:
        raise ValueError(f"node name {long[0][:40]!r}... is {len(long[0])} characters long "
                         f"({len(long)} such node(s)); the store keeps at most {NAME_LEN}: "
                         "shorten the names in the trace before importing it")


def write_store_trace(store: Store, trace: FleetTrace, *, job: str,
                      progress: Callable[[int], None] | None = None) -> int:
    """Write every frame of ``trace`` as data of ``job``; returns the points written. A name
    the store cannot hold is refused (ValueError) before anything is written."""
    _check_names(trace, job)
    written = 0
    for batch in trace_batches(trace, job=job):
        written += store.write(batch).accepted
        if progress is not None:
            progress(batch.accepted)
    # The last trace loaded into a job says whether its source kept an XID log.
    with store.engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO jobs (job, events_exported, through, updated_at) "
            "VALUES (:job, :e, :through, :now) ON CONFLICT (job) DO UPDATE SET "
            "events_exported = excluded.events_exported, through = excluded.through, "
            "updated_at = excluded.updated_at"),
            {"job": job, "e": trace.events_exported, "through": trace.meta.end,
             "now": time.time()})
    return written
