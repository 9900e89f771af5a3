"""Time every dashboard query on a synthetic fleet loaded into PostgreSQL.

    python benchmarks/dashboard_queries.py [--nodes 128] [--gpus 8] [--days 7] [--interval-s 60]
        [--cluster] [--raw] [--keep]

Creates a fresh database on the test PostgreSQL (FORESHOCK_TEST_PG), loads the fleet with
set-based SQL (GPU samples, node training metrics, link probes, XIDs, risk scores, alerts,
decisions), compacts the narrow points older than an hour into ``point_chunks`` as a running
service's maintenance loop does (collector/compact.py, ``FORESHOCK_COMPACT_AFTER_S``; ``--raw``
leaves them all in ``points``), then runs each panel's query as Grafana would for the last 6
hours and for the whole range, and prints the time each took. The database is dropped at the
end.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import Any

import psycopg
from sqlalchemy import text

from collector.compact import DEFAULT_SETTLE_S, compact_points
from collector.metrics import GPU_METRICS
from collector.store import Store
from dashboards.export import build_all
from dashboards.macros import QueryContext, expand

ADMIN = os.environ.get("FORESHOCK_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
JOB = "bench"


def _load(store: Store, *, nodes: int, gpus: int, days: float, interval_s: float,
          end: float) -> dict[str, int]:
    start = end - days * 86400
    params = {"job": JOB, "nodes": nodes, "gpus": gpus, "start": int(start), "end": int(end),
              "step": int(interval_s)}
    columns = ", ".join(m.column for m in GPU_METRICS)
    values = ", ".join(
        "60 + 10 * random()" if m.column == "temperature"
        else "(t.ts - :start) / 60 * (e.gpu + 1)" if m.kind == "cumulative"
        else "random()" for m in GPU_METRICS
    )
    statements = [
        # GPUs, ranks (node level, as trace import writes them) and links to the next 2 nodes.
        """INSERT INTO entities (key, job, node, gpu)
           SELECT :job || '|n' || n || '||' || g || '|', :job, 'n' || n, g
           FROM generate_series(0, :nodes - 1) n, generate_series(0, :gpus - 1) g""",
        """INSERT INTO entities (key, job, node)
           SELECT :job || '|n' || n || '|||', :job, 'n' || n
           FROM generate_series(0, :nodes - 1) n""",
        """INSERT INTO entities (key, job, node, peer)
           SELECT :job || '|n' || n || '|||n' || ((n + d) % :nodes), :job, 'n' || n,
                  'n' || ((n + d) % :nodes)
           FROM generate_series(0, :nodes - 1) n, generate_series(1, 2) d""",
        f"""INSERT INTO gpu_samples (entity_id, ts, {columns})
           SELECT e.id, t.ts, {values}
           FROM entities e, generate_series(:start, :end, :step) t(ts)
           WHERE e.gpu IS NOT NULL""",
        """INSERT INTO series (key, job, name, entity_id, stat, kind, unit, attrs)
           SELECT e.key || '|' || m.name, :job, m.name, e.id, '', 'gauge', 's', '{}'
           FROM entities e, unnest(ARRAY['train.step.duration', 'train.compute.duration',
                'train.collective.duration']) m(name)
           WHERE e.gpu IS NULL AND e.peer IS NULL""",
        """INSERT INTO series (key, job, name, entity_id, stat, kind, unit, attrs)
           SELECT e.key || '|' || m.name, :job, m.name, e.id, '', 'gauge', '', '{}'
           FROM entities e, unnest(ARRAY['net.link.bandwidth', 'net.link.latency']) m(name)
           WHERE e.peer IS NOT NULL""",
        """INSERT INTO points (series_id, ts, value)
           SELECT s.id, t.ts, CASE WHEN s.name LIKE 'net.link.bandwidth' THEN 1e10 * random()
                                   ELSE random() END
           FROM series s, generate_series(:start, :end, :step) t(ts)""",
        """INSERT INTO events (ts, entity_id, kind, code)
           SELECT :start + random() * (:end - :start), e.id, 'xid', 48
           FROM entities e WHERE e.gpu IS NOT NULL AND random() < 0.05""",
        """INSERT INTO risk_scores (ts, job, node, gpu, peer, kind, risk, lead_s, signals,
                                    model_version)
           SELECT t.ts, :job, e.node, e.gpu, NULL, 'gpu', random() ^ 4, 1800, '["ecc"]', 'm1'
           FROM entities e, generate_series(:start, :end, 300) t(ts)
           WHERE e.gpu IS NOT NULL""",
        """INSERT INTO alerts (fingerprint, job, node, gpu, kind, state, severity, risk, signals,
                               action, model_version, starts_at, updated_at)
           SELECT md5(e.key), :job, e.node, e.gpu, 'gpu',
                  CASE WHEN random() < 0.5 THEN 'firing' ELSE 'resolved' END, 'critical', 0.9,
                  '["ecc"]', 'checkpoint and drain node ' || e.node, 'm1',
                  :start + random() * (:end - :start), :end
           FROM entities e WHERE e.gpu IS NOT NULL AND random() < 0.03""",
        """INSERT INTO alert_history (alert_id, ts, state, risk)
           SELECT id, starts_at, 'firing', risk FROM alerts""",
        """INSERT INTO decisions (job, node, state, action, step, reason, created_at, updated_at)
           SELECT job, node, 'done', 'checkpoint_drain', 1000, 'bench', starts_at, starts_at
           FROM alerts WHERE state = 'firing'""",
    ]
    for sql in statements:
        t0 = time.perf_counter()
        with store.engine.begin() as conn:
            conn.execute(text(sql), params)
        print(f"  loaded in {time.perf_counter() - t0:6.1f} s: {' '.join(sql.split())[:70]}")
    with store.engine.begin() as conn:
        conn.execute(text("ANALYZE"))
        return {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()
                for t in ("gpu_samples", "points", "risk_scores", "events", "alerts")}


def _time(store: Store, sql: str) -> tuple[float, int]:
    with store.engine.connect() as conn:
        t0 = time.perf_counter()
        rows = conn.execute(text(sql.replace(":", r"\:"))).fetchall()
        return time.perf_counter() - t0, len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=128, help="nodes in the fleet")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--days", type=float, default=7.0, help="days of history")
    parser.add_argument("--interval-s", type=float, default=60.0, help="sampling interval")
    parser.add_argument("--keep", action="store_true", help="keep the database (for EXPLAIN)")
    parser.add_argument("--cluster", action="store_true",
                        help="CLUSTER gpu_samples and points on their primary keys first")
    parser.add_argument("--raw", action="store_true",
                        help="do not compact the narrow points (all of them stay in points)")
    args = parser.parse_args()
    name = f"foreshock_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    store = Store.open(f"{base}/{name}")
    try:
        end = float(int(time.time()) // 60 * 60)
        print(f"loading {args.nodes} x {args.gpus} GPUs, {args.days} days at {args.interval_s} s")
        t0 = time.perf_counter()
        counts = _load(store, nodes=args.nodes, gpus=args.gpus, days=args.days,
                       interval_s=args.interval_s, end=end)
        print(f"loaded in {time.perf_counter() - t0:.0f} s: {counts}")
        if args.cluster:
            t0 = time.perf_counter()
            with store.engine.begin() as conn:
                for table in ("gpu_samples", "points"):
                    conn.execute(text(f"CLUSTER {table} USING {table}_pkey"))
                conn.execute(text("ANALYZE"))
            print(f"clustered in {time.perf_counter() - t0:.0f} s")
        if not args.raw:
            t0 = time.perf_counter()
            report = compact_points(store, now=end, settle_s=DEFAULT_SETTLE_S)
            # What autovacuum does in a running service: the moved rows' space is free again.
            with psycopg.connect(ADMIN.rsplit("/", 1)[0] + f"/{name}", autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE points")
                conn.execute("ANALYZE point_chunks")
            print(f"compacted {report.points:,} narrow points older than "
                  f"{DEFAULT_SETTLE_S:.0f} s into {report.chunks:,} chunks in "
                  f"{time.perf_counter() - t0:.0f} s")
        nodes = [f"n{i}" for i in range(args.nodes)]
        picks: dict[str, str | list[str]] = {"job": JOB, "node": ["n0"],
                                             "gpu": [str(g) for g in range(args.gpus)]}
        ranges = {"6h": end - 6 * 3600, f"{args.days:g}d": end - args.days * 86400}
        print(f"{'dashboard':<12} {'panel':<40} " + " ".join(f"{r:>14}" for r in ranges))
        for dash, data in build_all().items():
            variables: list[dict[str, Any]] = data["templating"]["list"]
            multi = frozenset(v["name"] for v in variables if v.get("multi"))
            values = {k: v for k, v in picks.items() if any(x["name"] == k for x in variables)}
            if dash in ("training", "network"):
                values["node"] = nodes  # "All"
            if "job" in multi:
                values["job"] = [JOB]
            for panel in data["panels"]:
                for target in panel.get("targets", []):
                    cells = []
                    for start in ranges.values():
                        ctx = QueryContext(start=start, end=end, variables=values, multi=multi,
                                           max_data_points=1000)
                        seconds, rows = _time(store, expand(target["rawSql"], ctx))
                        cells.append(f"{seconds * 1000:7.0f} ms {rows:>4}")
                    print(f"{dash:<12} {panel['title'][:40]:<40} " + " ".join(cells))
    finally:
        store.close()
        if args.keep:
            print(f"kept database {name}")
        else:
            with psycopg.connect(ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
