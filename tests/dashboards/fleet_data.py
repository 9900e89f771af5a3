"""A small fleet's data, written into a store by Foreshock itself, for the panel queries.

Two nodes of two GPUs over 30 minutes at 10 s: an ECC counter that resets, XIDs, a link that
degrades in the last 15 minutes, training metrics with collective ops and kernels, risk
scores, alerts (through ``api.alert_state``) and a checkpoint-and-drain decision; the first 15
minutes rolled up and the rest of the narrow points compacted (PostgreSQL).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from collector.compact import WINDOW_S, compact_points
from collector.fleet_trace import FleetTrace, TraceMeta
from collector.metrics import GPU_METRICS
from collector.otlp import TimeWindow, decode, flatten
from collector.rollup import roll_up_and_expire
from collector.store import Store

JOB = "test"
NODES = ("n0", "n1")
GPUS = (0, 1)
END = 1_790_000_040.0
"""A whole minute, as the rollups and their watermark are."""
START = END - 1800.0
INTERVAL_S = 10.0
ROLLED_UP_TO = END - 900.0
"""Raw retention has rolled up the first 15 minutes: rollups before, raw data after."""


def _gpu_frame(ts: np.ndarray) -> pd.DataFrame:
    rows = []
    for node in NODES:
        for gpu in GPUS:
            frame = pd.DataFrame({"ts": ts, "node": node, "gpu": gpu})
            for i, m in enumerate(GPU_METRICS):
                frame[m.name] = float(i + 1)
            step = np.arange(len(ts), dtype=float)
            frame["gpu.temperature"] = 60 + (step % 7)
            frame["gpu.ecc.sbe"] = step * 2
            frame["gpu.pcie.replay"] = step
            frame["gpu.nvlink.crc_errors"] = step * 3
            if (node, gpu) == ("n0", 1):  # a driver reload resets the volatile counter
                after = frame.index >= 2 * len(ts) // 3
                frame.loc[after, "gpu.ecc.sbe"] = 2 * (step[: int(after.sum())] + 1)
            rows.append(frame)
    return pd.concat(rows, ignore_index=True).sort_values("ts", kind="stable")


def build_trace() -> FleetTrace:
    ts = np.arange(START, END + 1, INTERVAL_S)
    node = pd.concat(
        [pd.DataFrame({"ts": ts, "node": n, "train.step.duration": 1.0 + i * 0.5,
                       "train.compute.duration": 0.7, "train.collective.duration": 0.3 + i * 0.5})
         for i, n in enumerate(NODES)], ignore_index=True).sort_values("ts", kind="stable")
    links = []
    for src, dst in (("n0", "n1"), ("n1", "n0")):
        bw = np.full(len(ts), 10e9)
        if src == "n1":
            bw[ts > END - 900] = 2e9
        links.append(pd.DataFrame({"ts": ts, "src": src, "dst": dst, "net.link.bandwidth": bw,
                                   "net.link.latency": 5e-6}))
    events = pd.DataFrame({"ts": [START + 600, START + 1200], "node": ["n0", "n0"],
                           "gpu": [1, -1], "kind": ["xid", "xid"], "code": [48, 79]})
    meta = TraceMeta(start=START, end=END, interval_s=INTERVAL_S, nodes=NODES,
                     gpus_per_node=len(GPUS))
    return FleetTrace(meta=meta, gpu=_gpu_frame(ts),
                      node=node, links=pd.concat(links, ignore_index=True).sort_values("ts"),
                      events=events)


def _attrs(**values: object) -> list[dict[str, object]]:
    return [{"key": k.replace("_", "."),
             "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": str(v)}}
            for k, v in values.items()]


def _hook_request() -> bytes:
    """OTLP/JSON as the training hook exports it: step and kernel gauges per rank and a delta
    histogram of collective durations by op."""
    resources = []
    for rank, node in enumerate(NODES):
        times = [str(int(t * 1e9)) for t in np.arange(START, END + 1, 60.0)]
        gauge = [{"timeUnixNano": t, "asDouble": 1.0 + rank, "attributes": _attrs(rank=rank)}
                 for t in times]
        kernels = [{"timeUnixNano": t, "asDouble": 0.1 * (k + 1),
                    "attributes": _attrs(rank=rank, kernel=kernel)}
                   for t in times for k, kernel in enumerate(("sm90_gemm", "nccl_allreduce"))]
        collectives = [{"startTimeUnixNano": str(int(t) - 60 * 10**9), "timeUnixNano": t,
                        "count": "10", "sum": 3.0, "bucketCounts": ["10"],
                        "attributes": _attrs(rank=rank, op="all_reduce")} for t in times]
        resources.append({
            "resource": {"attributes": _attrs(job=JOB, node=node)},
            "scopeMetrics": [{"metrics": [
                {"name": "train.step.duration", "unit": "s", "gauge": {"dataPoints": gauge}},
                {"name": "train.kernel.duration", "unit": "s", "gauge": {"dataPoints": kernels}},
                {"name": "train.collective.duration", "unit": "s", "histogram": {
                    "aggregationTemporality": 1, "dataPoints": collectives}},
            ]}],
        })
    return json.dumps({"resourceMetrics": resources}).encode()


def _scores_and_alerts(store: Store) -> None:
    from api.alert_state import RiskObservation, fire, resolve
    from api.decision_state import Decision
    from predictor.risk_scores import write_scores

    with store.session() as session:
        for t in np.arange(START, END + 1, 60.0):
            risks = pd.DataFrame({
                "node": [n for n in NODES for _ in GPUS], "gpu": [g for _ in NODES for g in GPUS],
                "peer": "", "kind": "gpu", "lead_s": 1800.0,
                "signals": [("ecc.sbe rate up", "xid 48")] * len(NODES) * len(GPUS),
            })
            risks["risk"] = np.where((risks["node"] == "n0") & (risks["gpu"] == 1), 0.9, 0.05)
            if t == END - 60:
                risks = pd.concat([risks, pd.DataFrame({
                    "node": ["n1"], "gpu": [-1], "peer": ["n0"], "kind": ["link"], "risk": [0.7],
                    "lead_s": [np.nan], "signals": [()]})], ignore_index=True)
            write_scores(session, job=JOB, ts=float(t), risks=risks, model_version="m1")
    with store.session() as session:
        for node, gpu, ts in (("n0", 1, START + 300), ("n1", 0, START + 400)):
            fire(session, RiskObservation(job=JOB, node=node, gpu=gpu, peer=None, kind="gpu",
                                          risk=0.9, lead_s=1800.0, signals=("xid 48",),
                                          model_version="m1", ts=ts))
        resolve(session, job=JOB, node="n1", gpu=0, peer=None, kind="gpu", ts=START + 900)
        session.add(Decision(job=JOB, node="n0", alert_id=None, state="done",
                             action="checkpoint_drain", step=120, reason="alert on n0 gpu 1",
                             created_at=START + 320, updated_at=START + 400))


def _roll_up(store: Store) -> None:
    """The maintenance loop's retention with raw data kept for the last 15 minutes only."""
    report = roll_up_and_expire(store, now=END, raw_retention_s=END - ROLLED_UP_TO,
                                rollup_retention_s=30 * 86400)
    assert report.rolled_up_rows > 0 and report.deleted_raw_before == ROLLED_UP_TO


def _compact(store: Store) -> None:
    """The maintenance loop's compaction an hour later (PostgreSQL): the narrow points left
    raw by retention move into chunks, so the panels read rollups and compacted points."""
    report = compact_points(store, now=END + WINDOW_S, settle_s=0.0)
    assert store.is_sqlite or report.points > 0


def load(store: Store, *, compact: bool = True) -> None:
    """Write the whole fleet's data into ``store`` (``compact``: then compact what is raw)."""
    store.write_trace(build_trace(), job=JOB)
    batch = flatten(decode(_hook_request(), "application/json"),
                    window=TimeWindow(END, max_future_s=60.0))
    assert batch.rejected == 0, batch.error_message()
    store.write(batch)
    _scores_and_alerts(store)
    _roll_up(store)
    if compact:
        _compact(store)
