"""Ingest benchmark: OTLP/HTTP requests of ~5,000 points from separate processes into a live
``foreshock serve``; prints acknowledged points/s and bytes on disk per raw point.

    python benchmarks/ingest.py                      # SQLite and PostgreSQL
    python benchmarks/ingest.py --db sqlite --seconds 30 --senders 4 --workers 2

The point mix is what a fleet's hooks send, batched: each request holds the telemetry of 32 nodes
for one export interval (8 GPUs x 15 canonical gpu.* gauges/counters, per rank a step and a
compute duration and a train.collective.duration histogram, 4 link probes x bandwidth/latency):
79% gpu.*, 16% train.*, 5% net.*. Every request has new timestamps, so rows are inserted, not
overwritten. Bytes per point = the database's size on disk (SQLite file after a WAL checkpoint;
PostgreSQL tables with indexes and TOAST) / acknowledged points; also given for the sample tables
alone (``gpu_samples`` and ``points``), which is what a long run converges to.

On PostgreSQL one compaction pass (collector/compact.py) then runs with a settle age of 0, as
the maintenance loop runs it on points older than ``FORESHOCK_COMPACT_AFTER_S``: it prints the
pass's rate and bytes per point after it, the steady state a long-running service converges to.

Points per CPU-second of the service's processes (workers, not the PostgreSQL server) is printed
beside the wall-clock rate: on a shared machine it says what the code costs, whatever the load.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
DELTA = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collector.metrics import GPU_METRICS  # noqa: E402

PG_ADMIN = os.environ.get("FORESHOCK_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
NODES_PER_REQUEST = 32
GPUS = 8
PEERS = 4
TABLES = ("entities", "gpu_samples", "series", "points", "point_chunks", "events", "rollups")


def _kv(target: object, key: str, value: object) -> None:
    kv = target.add()  # type: ignore[attr-defined]
    kv.key = key
    if isinstance(value, int):
        kv.value.int_value = value
    else:
        kv.value.string_value = str(value)


def build_template(sender: int) -> tuple[ExportMetricsServiceRequest, list[object], int]:
    """One request of NODES_PER_REQUEST nodes; returns it, its data points and the point count."""
    req = ExportMetricsServiceRequest()
    dps: list[object] = []
    for n in range(NODES_PER_REQUEST):
        node = f"s{sender}-node{n:03d}"
        rm = req.resource_metrics.add()
        _kv(rm.resource.attributes, "job", "bench")
        _kv(rm.resource.attributes, "node", node)
        sm = rm.scope_metrics.add()
        for i, spec in enumerate(GPU_METRICS):
            m = sm.metrics.add()
            m.name = spec.name
            points = (m.sum if spec.kind == "cumulative" else m.gauge).data_points
            if spec.kind == "cumulative":
                m.sum.aggregation_temporality = CUMULATIVE
                m.sum.is_monotonic = True
            for g in range(GPUS):
                dp = points.add()
                dp.as_double = 40.0 + i + g * 0.5 if spec.kind != "cumulative" else float(g)
                _kv(dp.attributes, "gpu", g)
                _kv(dp.attributes, "gpu.uuid", f"GPU-{node}-{g}")
                dps.append(dp)
        for name in ("train.step.duration", "train.compute.duration"):
            m = sm.metrics.add()
            m.name, m.unit = name, "s"
            for r in range(GPUS):
                dp = m.gauge.data_points.add()
                dp.as_double = 1.25 + r * 0.001
                _kv(dp.attributes, "rank", n * GPUS + r)
                dps.append(dp)
        m = sm.metrics.add()
        m.name, m.unit = "train.collective.duration", "s"
        m.histogram.aggregation_temporality = DELTA
        for r in range(GPUS):
            hp = m.histogram.data_points.add()
            hp.count, hp.sum, hp.min, hp.max = 40, 8.0, 0.05, 0.5
            hp.bucket_counts.extend([10, 20, 10])
            hp.explicit_bounds.extend([0.1, 0.3])
            _kv(hp.attributes, "rank", n * GPUS + r)
            _kv(hp.attributes, "op", "all_reduce")
            dps.append(hp)
        for name in ("net.link.bandwidth", "net.link.latency"):
            m = sm.metrics.add()
            m.name = name
            for p in range(PEERS):
                dp = m.gauge.data_points.add()
                dp.as_double = 2.4e10 if name.endswith("bandwidth") else 1.2e-5
                _kv(dp.attributes, "peer", f"s{sender}-node{(n + p + 1) % NODES_PER_REQUEST:03d}")
                dps.append(dp)
    return req, dps, len(dps)


def sender(idx: int, url: str, seconds: float, start_at: float, t0_ns: int, result: mp.Queue
           ) -> None:
    req, dps, per_request = build_template(idx)
    bodies = []
    # Pre-build bodies so the sender spends its time waiting on the service, not encoding.
    for k in range(int(seconds * 60) + 10):
        ts = t0_ns + k * 10_000_000_000
        for dp in dps:
            dp.time_unix_nano = ts  # type: ignore[attr-defined]
        bodies.append(req.SerializeToString())
    acked = rejected = requests = 0
    headers = {"content-type": "application/x-protobuf"}
    with httpx.Client(timeout=60) as http:
        time.sleep(max(0.0, start_at - time.time()))
        deadline = start_at + seconds
        for body in bodies:
            if time.time() >= deadline:
                break
            r = http.post(url, content=body, headers=headers)
            if r.status_code != 200:
                raise SystemExit(f"sender {idx}: HTTP {r.status_code}: {r.text[:300]}")
            resp = ExportMetricsServiceResponse.FromString(r.content)
            rej = resp.partial_success.rejected_data_points
            acked += per_request - rej
            rejected += rej
            requests += 1
    result.put((acked, rejected, requests, time.time()))


def _start(db_url: str, workers: int, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "api", "serve", "--db", db_url, "--port", str(port),
         "--workers", str(workers), "--log-level", "warning"],
        cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        env={**os.environ, "FORESHOCK_MAINTENANCE_INTERVAL_S": "3600",
             "FORESHOCK_SCORE_INTERVAL_S": "3600"})
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"service did not start:\n{log.read_text()}")


def _tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    tree, total, grew = {pid}, 0.0, True
    while grew:
        before = len(tree)
        tree |= {p for p, (ppid, _) in stats.items() if ppid in tree}
        grew = len(tree) > before
    for p in tree:
        total += stats.get(p, (0, 0.0))[1]
    return total


def _pg_sizes(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        conn.execute("CHECKPOINT")
        return {t: int(conn.execute("SELECT pg_total_relation_size(%s)", (t,))
                       .fetchone()[0])  # type: ignore[index]
                for t in TABLES}


def _compact_pg(url: str, dsn: str) -> tuple[int, float, dict[str, int]]:
    """One compaction pass over everything: (points moved, seconds, table sizes after it).

    ``points`` is then rewritten (VACUUM FULL) to the size of what is left in it: in a running
    service the freed space is reused by the next raw points rather than growing the table.
    """
    from collector.compact import compact_points
    from collector.store import Store

    store = Store.open(url)
    try:
        started = time.perf_counter()
        report = compact_points(store, now=time.time(), settle_s=0.0)
        seconds = time.perf_counter() - started
    finally:
        store.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM FULL points")
    return report.points, seconds, _pg_sizes(dsn)


def run(db: str, *, seconds: float, senders: int, workers: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="foreshock-bench-"))
    pg_name = f"foreshock_bench_{uuid.uuid4().hex[:8]}"
    if db == "sqlite":
        path = tmp / "bench.db"
        url = f"sqlite:///{path}"
    else:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{pg_name}"')
        url = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") \
            + f"/{pg_name}"
    proc, base = _start(url, workers, tmp / "serve.log")
    try:
        queue: mp.Queue = mp.Queue()
        start_at = time.time() + 3.0 + 0.5 * senders
        # A day ago, from the start of an hour: compaction's hour chunks then fill as in a long
        # run instead of being two partial hours. Sub-second digits as a real clock's.
        t0_ns = int((time.time() - 86400) // 3600 * 3600 * 1e9) + 123_456_789
        procs = [mp.Process(target=sender, args=(i, f"{base}/v1/metrics", seconds, start_at,
                                                  t0_ns, queue)) for i in range(senders)]
        for p in procs:
            p.start()
        time.sleep(max(0.0, start_at - time.time()))
        cpu0 = _tree_cpu_s(proc.pid)
        results = [queue.get(timeout=seconds + 300) for _ in procs]
        for p in procs:
            p.join()
        acked = sum(r[0] for r in results)
        rejected = sum(r[1] for r in results)
        requests = sum(r[2] for r in results)
        elapsed = max(r[3] for r in results) - start_at
        service_cpu = _tree_cpu_s(proc.pid) - cpu0
    finally:
        proc.terminate()
        proc.wait(30)
    if db == "sqlite":
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            marks = ", ".join("?" * len(TABLES))
            sizes = dict(conn.execute(
                f"SELECT name, sum(pgsize) FROM dbstat WHERE name IN ({marks}) GROUP BY name",
                TABLES).fetchall())
        size = sum(f.stat().st_size for f in tmp.glob("bench.db*"))
    else:
        dsn = PG_ADMIN.rsplit("/", 1)[0] + f"/{pg_name}"
        try:
            sizes = _pg_sizes(dsn)
            size = sum(sizes.values())
            compacted = _compact_pg(url, dsn)
        finally:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
    shutil.rmtree(tmp, ignore_errors=True)
    samples = sizes.get("gpu_samples", 0) + sizes.get("points", 0)
    load = os.getloadavg()[0]
    print(f"{db:10s} workers={workers} senders={senders}: {requests} requests, "
          f"{acked:,} points acknowledged ({rejected} rejected) in {elapsed:.1f} s = "
          f"{acked / elapsed:,.0f} points/s (load average {load:.1f}; "
          f"{acked / max(service_cpu, 1e-9):,.0f} points per CPU-second of the service's "
          f"processes{', not counting the PostgreSQL server' if db != 'sqlite' else ''}); "
          f"{size / max(acked, 1):.1f} bytes on disk per point "
          f"({size / 2**20:.1f} MiB in all; {samples / max(acked, 1):.1f} bytes per point in the "
          f"sample tables, without the series catalogue that a longer run amortizes)", flush=True)
    if db != "sqlite":
        moved, pass_s, after = compacted
        after_samples = sum(after.get(t, 0) for t in ("gpu_samples", "points", "point_chunks"))
        print(f"{'':10s} after one compaction pass (settle age 0): {moved:,} narrow points "
              f"moved into chunks in {pass_s:.1f} s = {moved / max(pass_s, 1e-9):,.0f} points/s; "
              f"{sum(after.values()) / max(acked, 1):.1f} bytes on disk per point "
              f"({sum(after.values()) / 2**20:.1f} MiB in all; "
              f"{after_samples / max(acked, 1):.1f} bytes per point in the sample tables; "
              f"{after.get('point_chunks', 0) / max(moved, 1):.1f} bytes per narrow point in "
              f"point_chunks), the steady state of a long-running service, whose autovacuum "
              f"lets new raw points reuse the space compaction freed", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=20.0, help="Sending time per database.")
    parser.add_argument("--senders", type=int, default=4, help="Sender processes.")
    parser.add_argument("--workers", type=int, default=2, help="Service worker processes.")
    args = parser.parse_args()
    for db in (["sqlite", "postgresql"] if args.db == "both" else [args.db]):
        run(db, seconds=args.seconds, senders=args.senders, workers=args.workers)


if __name__ == "__main__":
    main()
