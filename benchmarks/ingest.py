"""Ingest benchmark: OTLP/HTTP requests of ~5,000 points from separate processes into a live
``foreshock serve``; prints acknowledged points/s and bytes on disk per raw point.

    python benchmarks/ingest.py                      # SQLite and PostgreSQL
    python benchmarks/ingest.py --db sqlite --seconds 30 --senders 4 --workers 2

The point mix is what a fleet's hooks send, batched: each request holds the telemetry of 32 nodes
for one 10-second export interval (8 GPUs x 15 canonical gpu.* gauges/counters, per rank a step
and a compute duration and a train.collective.duration histogram, 4 link probes x
bandwidth/latency). Every request has new timestamps (a fixed phase per node, ~1 ms of jitter)
and new values that vary as real telemetry does, at the resolution its source reports
(:func:`_telemetry`): gauges with noise around a level of their own (integer degrees C and MHz,
whole percent, power in mW), cumulative counters growing by random increments, durations and
link probes with full-precision jitter, histograms whose count, sum, min, max and bucket counts
agree. The values are patched into one serialized template (fixed64 payloads at fixed offsets),
so every request has the same layout and the service reads it through its fast path (checked
before the run), and a sender spends its time waiting on the service.

Counting. A point is one OTLP data point, as OTLP's ``rejected_data_points`` counts them: a
number data point is one point, and a histogram data point is one point too, although the store
keeps four values of it (sum, count, min, max, each a narrow series). A request holds 4,864
points: 3,840 gpu.* (79%, stored as 256 rows of ``gpu_samples``, 15 values a row), 512 train.*
gauges, 256 histograms and 256 net.* gauges, i.e. 1,792 narrow values in ``points``.
Bytes per point = the database's size on disk (SQLite file after a WAL checkpoint; PostgreSQL
tables with indexes and TOAST) / acknowledged points; also given for the sample tables alone
(``gpu_samples``, ``points``, ``point_chunks``: what a long run converges to, without the series
catalogue it amortizes), and per table.

On PostgreSQL one compaction pass (collector/compact.py) then runs with a settle age of 0, as
the maintenance loop runs it on points older than ``FORESHOCK_COMPACT_AFTER_S``: it prints the
pass's rate and bytes per point after it, the steady state a long-running service converges to;
"bytes per narrow value in point_chunks" divides that table by the narrow values it holds.

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
from typing import Any

import httpx
import numpy as np
import psycopg
from numpy.typing import NDArray
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
BOUNDS = (0.1, 0.3)
"""train.collective.duration bucket bounds (s)."""
TABLES = ("entities", "gpu_samples", "series", "points", "point_chunks", "events", "rollups")


def _kv(target: object, key: str, value: object) -> None:
    kv = target.add()  # type: ignore[attr-defined]
    kv.key = key
    if isinstance(value, int):
        kv.value.int_value = value
    else:
        kv.value.string_value = str(value)


_MAGIC = 0x5EB7C4A9
"""High 32 bits of a slot's placeholder payload; the low 32 are the slot's number."""
INTERVAL_NS = 10_000_000_000


class Template:
    """One request of NODES_PER_REQUEST nodes whose timestamps and values are placeholders.

    Every placeholder is a fixed64 payload (a double or an unsigned count) numbered by slot;
    :meth:`bodies` writes each request's numbers over them.
    """

    def __init__(self, sender: int) -> None:
        self.request = ExportMetricsServiceRequest()
        self.n_slots = 0
        self.ts: list[int] = []
        """Timestamp slots, one per data point."""
        self.ts_node: list[int] = []
        """Node of each timestamp slot."""
        self.gpu: dict[str, NDArray[np.intp]] = {}
        """Value slots of each gpu.* metric, shape (node, gpu)."""
        self.rank: dict[str, NDArray[np.intp]] = {}
        """Slots of the per-rank values, shape (node, rank): durations, histogram fields."""
        self.link: dict[str, NDArray[np.intp]] = {}
        """Slots of the link probes, shape (node, peer)."""
        self._build(sender)
        placeholders = self.request.SerializeToString()
        self.bytes = np.frombuffer(placeholders, np.uint8).copy()
        self.offsets = self._find_slots(placeholders)
        self.n_points = len(self.ts)

    def _placeholder(self, table: dict[str, NDArray[np.intp]] | None = None, name: str = "",
                     where: tuple[int, int] = (0, 0)) -> int:
        """A new slot (filed in ``table[name][where]`` if given): its placeholder's bits."""
        slot = self.n_slots
        self.n_slots += 1
        if table is not None:
            shape = (NODES_PER_REQUEST, PEERS if table is self.link else GPUS)
            table.setdefault(name, np.full(shape, -1, np.intp))[where] = slot
        return _MAGIC << 32 | slot

    def _double(self, table: dict[str, NDArray[np.intp]], name: str,
                where: tuple[int, int]) -> float:
        return float(np.array(self._placeholder(table, name, where), np.uint64).view(np.float64))

    def _stamp(self, dp: Any, node: int) -> None:
        dp.time_unix_nano = self._placeholder()
        self.ts.append(self.n_slots - 1)
        self.ts_node.append(node)

    def _build(self, sender: int) -> None:
        for n in range(NODES_PER_REQUEST):
            node = f"s{sender}-node{n:03d}"
            rm = self.request.resource_metrics.add()
            _kv(rm.resource.attributes, "job", "bench")
            _kv(rm.resource.attributes, "node", node)
            sm = rm.scope_metrics.add()
            for spec in GPU_METRICS:
                m = sm.metrics.add()
                m.name = spec.name
                points = (m.sum if spec.kind == "cumulative" else m.gauge).data_points
                if spec.kind == "cumulative":
                    m.sum.aggregation_temporality = CUMULATIVE
                    m.sum.is_monotonic = True
                for g in range(GPUS):
                    dp = points.add()
                    dp.as_double = self._double(self.gpu, spec.name, (n, g))
                    self._stamp(dp, n)
                    _kv(dp.attributes, "gpu", g)
                    _kv(dp.attributes, "gpu.uuid", f"GPU-{node}-{g}")
            for name in ("train.step.duration", "train.compute.duration"):
                m = sm.metrics.add()
                m.name, m.unit = name, "s"
                for r in range(GPUS):
                    dp = m.gauge.data_points.add()
                    dp.as_double = self._double(self.rank, name, (n, r))
                    self._stamp(dp, n)
                    _kv(dp.attributes, "rank", n * GPUS + r)
            m = sm.metrics.add()
            m.name, m.unit = "train.collective.duration", "s"
            m.histogram.aggregation_temporality = DELTA
            for r in range(GPUS):
                hp = m.histogram.data_points.add()
                self._stamp(hp, n)
                hp.count = self._placeholder(self.rank, "count", (n, r))
                for stat in ("sum", "min", "max"):
                    setattr(hp, stat, self._double(self.rank, stat, (n, r)))
                hp.bucket_counts.extend([self._placeholder(self.rank, f"bucket{b}", (n, r))
                                         for b in range(3)])
                hp.explicit_bounds.extend(BOUNDS)
                _kv(hp.attributes, "rank", n * GPUS + r)
                _kv(hp.attributes, "op", "all_reduce")
            for name in ("net.link.bandwidth", "net.link.latency"):
                m = sm.metrics.add()
                m.name = name
                for p in range(PEERS):
                    dp = m.gauge.data_points.add()
                    dp.as_double = self._double(self.link, name, (n, p))
                    self._stamp(dp, n)
                    peer = (n + p + 1) % NODES_PER_REQUEST
                    _kv(dp.attributes, "peer", f"s{sender}-node{peer:03d}")

    def _find_slots(self, body: bytes) -> NDArray[np.intp]:
        """Byte offset of each slot's placeholder in ``body``."""
        buf = np.frombuffer(body, np.uint8)
        magic = np.frombuffer(np.array(_MAGIC, "<u4").tobytes(), np.uint8)
        at = np.flatnonzero(buf[7:] == magic[3])
        for i in range(3):
            at = at[buf[at + 4 + i] == magic[i]]
        slots = buf[at[:, None] + np.arange(4)].copy().view("<u4")[:, 0]
        if len(at) != self.n_slots or sorted(slots.tolist()) != list(range(self.n_slots)):
            raise RuntimeError(f"found {len(at)} placeholders for {self.n_slots} slots")
        offsets = np.empty(self.n_slots, np.intp)
        offsets[slots] = at
        return offsets

    def bodies(self, payloads: NDArray[np.uint64]) -> list[bytes]:
        """One request body per row of ``payloads`` (requests x slots)."""
        where = (self.offsets[:, None] + np.arange(8)).ravel()
        out = []
        for row in payloads:
            buf = self.bytes.copy()
            buf[where] = row.view(np.uint8)
            out.append(buf.tobytes())
        return out


def _telemetry(t: Template, *, requests: int, t0_ns: int, seed: int) -> NDArray[np.uint64]:
    """Timestamps and values of ``requests`` consecutive export intervals, (requests x slots).

    Each series has a level of its own and varies around it, at the resolution its source
    reports: NVML gives whole degrees, MHz and percent and power in mW; timers give full
    float64 durations; counters only grow.
    """
    rng = np.random.default_rng(seed)
    k, nodes = requests, NODES_PER_REQUEST
    out = np.zeros((k, t.n_slots), np.uint64)

    def put(slots: NDArray[np.intp], values: NDArray[Any]) -> None:
        v = values.reshape(k, -1)
        out[:, slots.ravel()] = v.view(np.uint64) if v.dtype == np.float64 else v.astype(np.uint64)

    def noisy(level: NDArray[np.float64], sd: float) -> NDArray[np.float64]:
        return np.asarray(level + rng.normal(0.0, sd, (k, *level.shape)))

    def counter(start_hi: int, rate: float) -> NDArray[np.float64]:
        start = rng.integers(0, start_hi + 1, (nodes, GPUS))
        return np.asarray(start + np.cumsum(rng.poisson(rate, (k, nodes, GPUS)), axis=0), float)

    per_gpu = (nodes, GPUS)
    phase_ns = rng.integers(0, 10**9, nodes)
    jitter_ns = rng.normal(0.0, 1e6, (k, nodes)).astype(np.int64)
    node_ts = t0_ns + np.arange(k)[:, None] * INTERVAL_NS + phase_ns + jitter_ns
    out[:, t.ts] = node_ts[:, t.ts_node].astype(np.uint64)

    gpu = {
        "gpu.utilization": np.clip(np.round(noisy(rng.uniform(85, 99, per_gpu), 3)), 0, 100)
        / 100,
        "gpu.memory.used": (rng.integers(60, 76, per_gpu) * 2**30
                            + rng.integers(-256, 257, (k, *per_gpu)) * 2**21).astype(float),
        "gpu.temperature": np.round(noisy(rng.uniform(50, 70, per_gpu), 1.0)),
        "gpu.memory.temperature": np.round(noisy(rng.uniform(58, 78, per_gpu), 0.8)),
        "gpu.power": np.round(noisy(rng.uniform(500, 680, per_gpu), 20.0), 3),
        "gpu.clock.sm": 1980.0 - 15.0 * rng.poisson(0.4, (k, *per_gpu)),
        "gpu.throttle.thermal": (rng.random((k, *per_gpu)) < 0.01).astype(float),
        "gpu.throttle.power": (rng.random((k, *per_gpu)) < 0.05).astype(float),
        "gpu.ecc.sbe": counter(20, 0.05),
        "gpu.ecc.dbe": counter(0, 0.0005),
        "gpu.rows.remapped.correctable": counter(2, 0.001),
        "gpu.rows.remapped.uncorrectable": counter(0, 0.0002),
        "gpu.rows.remap.pending": (rng.random((k, *per_gpu)) < 0.0005).astype(float),
        "gpu.pcie.replay": counter(500, 0.3),
        "gpu.nvlink.crc_errors": counter(5000, 2.0),
    }
    if set(gpu) != set(t.gpu):
        raise RuntimeError(f"no value model for {sorted(set(t.gpu) - set(gpu))}")
    for name, values in gpu.items():
        put(t.gpu[name], values)

    # A synchronous job: one step time per interval for all ranks, plus a little per rank.
    step = (1.25 + rng.normal(0.0, 0.03, (k, 1, 1))) + rng.normal(0.0, 0.004, (k, *per_gpu))
    put(t.rank["train.step.duration"], step)
    put(t.rank["train.compute.duration"], step * rng.uniform(0.72, 0.80, (k, *per_gpu)))
    count = 40 + rng.integers(-3, 4, (k, *per_gpu))
    lo = rng.uniform(0.03, 0.07, (k, *per_gpu))
    hi = rng.uniform(0.35, 0.9, (k, *per_gpu))
    mean = np.clip(rng.normal(0.2, 0.02, (k, *per_gpu)), lo, hi)
    # min < BOUNDS[0] and max > BOUNDS[1]: the outer buckets hold one each at least.
    first = 1 + rng.binomial(count - 2, 0.25)
    last = 1 + rng.binomial(count - first - 1, 0.25)
    for name, values in (("count", count), ("sum", count * mean), ("min", lo), ("max", hi),
                         ("bucket0", first), ("bucket1", count - first - last),
                         ("bucket2", last)):
        put(t.rank[name], values)

    per_link = (nodes, PEERS)
    put(t.link["net.link.bandwidth"], noisy(rng.uniform(2.2e10, 2.5e10, per_link), 3e8))
    latency = rng.uniform(1.0e-5, 1.5e-5, per_link)
    put(t.link["net.link.latency"], latency + np.abs(rng.normal(0.0, 1e-6, (k, *per_link))))
    return out


def check_fast_path(t0_ns: int) -> None:
    """Fail unless the service would read the benchmark's requests through a learned layout."""
    from collector.otlp import OtlpCache, TimeWindow, read_batch

    t = Template(0)
    bodies = t.bodies(_telemetry(t, requests=4, t0_ns=t0_ns, seed=0))
    cache, now = OtlpCache(), time.time()
    for body in bodies[:3]:
        batch = read_batch(body, "application/x-protobuf", window=TimeWindow(now, max_future_s=300),
                           cache=cache)
        if batch.rejected:
            raise SystemExit(f"the service rejects {batch.rejected} benchmark points")
    if cache.layouts.read(bodies[3], window=TimeWindow(now, max_future_s=300)) is None:
        raise SystemExit("benchmark requests miss the layout fast path (collector/otlp_layout)")


def sender(idx: int, url: str, seconds: float, start_at: float, t0_ns: int, result: mp.Queue
           ) -> None:
    t = Template(idx)
    per_request = t.n_points
    # Pre-built bodies: the sender spends its time waiting on the service, not encoding.
    bodies = t.bodies(_telemetry(t, requests=int(seconds * 60) + 10, t0_ns=t0_ns, seed=idx))
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
        # run instead of being two partial hours.
        t0_ns = int((time.time() - 86400) // 3600 * 3600 * 1e9)
        check_fast_path(t0_ns)
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
    print(f"{'':10s} bytes per point by table: {_breakdown(sizes, acked)}", flush=True)
    if db != "sqlite":
        moved, pass_s, after = compacted
        after_samples = sum(after.get(t, 0) for t in ("gpu_samples", "points", "point_chunks"))
        print(f"{'':10s} after one compaction pass (settle age 0): {moved:,} narrow points "
              f"moved into chunks in {pass_s:.1f} s = {moved / max(pass_s, 1e-9):,.0f} points/s; "
              f"{sum(after.values()) / max(acked, 1):.1f} bytes on disk per point "
              f"({sum(after.values()) / 2**20:.1f} MiB in all; "
              f"{after_samples / max(acked, 1):.1f} bytes per point in the sample tables; "
              f"{after.get('point_chunks', 0) / max(moved, 1):.1f} bytes per narrow value in "
              f"point_chunks), the steady state of a long-running service, whose autovacuum "
              f"lets new raw points reuse the space compaction freed", flush=True)
        print(f"{'':10s} after compaction, bytes per point by table: {_breakdown(after, acked)}",
              flush=True)


def _breakdown(sizes: dict[str, int], acked: int) -> str:
    return ", ".join(f"{t} {sizes[t] / max(acked, 1):.2f}" for t in TABLES if sizes.get(t))


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
