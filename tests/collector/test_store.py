import time

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import text

from collector.fleet_trace import FleetTrace, TraceMeta
from collector.otlp import TimeWindow, flatten
from collector.store import Store
from tests.collector.otlp_builder import RequestBuilder, gpu_sample

T0 = 1_700_000_000.0


def small_trace(*, t0: float = T0, steps: int = 10, nodes: tuple[str, ...] = ("n0", "n1"),
                gpus: int = 2) -> FleetTrace:
    ts = t0 + np.arange(steps) * 10.0
    gpu = pd.DataFrame([{"ts": t, "node": n, "gpu": g, "gpu.temperature": 60.0 + g + i,
                         "gpu.ecc.sbe": float(i // 3)}
                        for i, t in enumerate(ts) for n in nodes for g in range(gpus)])
    node = pd.DataFrame([{"ts": t, "node": n, "train.step.duration": 1.5 + i * 0.01,
                          "train.compute.duration": 1.0}
                         for i, t in enumerate(ts) for n in nodes])
    links = pd.DataFrame([{"ts": t, "src": nodes[0], "dst": nodes[1],
                           "net.link.bandwidth": 2.5e10, "net.link.latency": 1e-5} for t in ts])
    events = pd.DataFrame([{"ts": ts[3], "node": nodes[0], "gpu": 1, "kind": "xid", "code": 79.0},
                           {"ts": ts[4], "node": nodes[1], "gpu": -1, "kind": "xid", "code": 48.0}])
    meta = TraceMeta(start=float(ts[0]), end=float(ts[-1]), interval_s=10.0, nodes=nodes,
                     gpus_per_node=gpus)
    return FleetTrace(meta=meta, gpu=gpu, node=node, links=links, events=events)


def test_trace_round_trips_through_the_store(store_url: str) -> None:
    store = Store.open(store_url)
    trace = small_trace()
    written = store.write_trace(trace, job="j")
    assert written == 40 * 2 + 20 * 2 + 10 * 2 + 2
    out = store.read_trace(job="j")
    assert out.meta.nodes == ("n0", "n1") and out.meta.gpus_per_node == 2
    assert out.meta.interval_s == 10.0 and out.meta.start == T0
    pd.testing.assert_frame_equal(
        out.gpu[["ts", "node", "gpu", "gpu.temperature", "gpu.ecc.sbe"]].reset_index(drop=True),
        trace.gpu.sort_values(["ts", "node", "gpu"]).reset_index(drop=True), check_dtype=False)
    assert out.gpu["gpu.power"].isna().all()
    pd.testing.assert_frame_equal(out.node, trace.node, check_dtype=False)
    pd.testing.assert_frame_equal(out.links, trace.links, check_dtype=False)
    assert out.events[["node", "gpu", "kind", "code"]].values.tolist() == [
        ["n0", 1, "xid", 79.0], ["n1", -1, "xid", 48.0]]
    assert len(store.read_trace(job="other").gpu) == 0
    assert len(store.read_trace(job="j", start=T0 + 50, end=T0 + 60).gpu) == 8
    store.close()


def test_rewriting_the_same_data_is_idempotent(store_url: str) -> None:
    store = Store.open(store_url)
    store.write_trace(small_trace(), job="j")
    store.write_trace(small_trace(), job="j")
    with store.engine.connect() as conn:
        counts = [conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()
                  for t in ("gpu_samples", "points", "events")]
    assert counts == [40, 60, 2]
    store.close()


def test_samples_of_one_gpu_arriving_in_separate_requests_merge(store_url: str) -> None:
    store = Store.open(store_url)
    now = time.time()
    first = RequestBuilder(job="j", node="n0").gauge("gpu.temperature", [(now, 70.0, {"gpu": 0})])
    second = RequestBuilder(job="j", node="n0").gauge("gpu.power", [(now, 350.0, {"gpu": 0})])
    for b in (first, second):
        store.write(flatten(b.request, window=TimeWindow(now, max_future_s=60)))
    gpu = store.read_trace(job="j").gpu
    assert len(gpu) == 1
    assert (gpu["gpu.temperature"].iloc[0], gpu["gpu.power"].iloc[0]) == (70.0, 350.0)
    store.close()


def test_cardinality_limit_refuses_new_series_past_it_and_keeps_canonical(store_url: str) -> None:
    store = Store.open(store_url)
    now = time.time()
    b = gpu_sample(now, job="j", node="n0")
    b.gauge("app.requests", [(now, 1.0, {"path": f"/p{i}"}) for i in range(5)])
    result = store.write(flatten(b.request, window=TimeWindow(now, max_future_s=60)),
                         max_series_per_job=3)
    assert (result.accepted, result.rejected) == (6 + 3, 2)
    assert "job 'j' reached max_series_per_job=3" in result.error_message
    # Other jobs have their own budget; canonical metrics never count.
    b2 = RequestBuilder(job="k", node="n0").gauge("app.requests", [(now, 1.0, {"path": "/"})])
    assert store.write(flatten(b2.request, window=TimeWindow(now, max_future_s=60)),
                       max_series_per_job=3).rejected == 0
    assert len(store.read_trace(job="j").gpu) == 2
    store.close()


def test_reopening_keeps_data_and_schema(store_url: str) -> None:
    store = Store.open(store_url)
    store.write_trace(small_trace(), job="j")
    store.close()
    reopened = Store.open(store_url)
    assert len(reopened.read_trace().gpu) == 40
    with reopened.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    reopened.close()


def test_cumulative_histograms_give_the_interval_mean_per_node(store_url: str) -> None:
    store = Store.open(store_url)
    now = time.time()
    for rank, scale in ((0, 1.0), (1, 3.0)):
        b = RequestBuilder(job="j", node="n0", rank=rank)
        b.histogram("train.collective.duration",
                    [(now - 10, 1.0 * scale, 10, {"op": "all_reduce"}),
                     (now, 3.0 * scale, 20, {"op": "all_reduce"})], cumulative=True)
        store.write(flatten(b.request, window=TimeWindow(now, max_future_s=60)))
    node = store.read_trace(job="j").node
    # rank 0: first 0.1 then (3-1)/10=0.2; rank 1: 0.3 then 0.6 -> node means 0.2, 0.4
    assert node["train.collective.duration"].tolist() == pytest.approx([0.2, 0.4])
    store.close()


def test_a_gpu_whose_uuid_changes_mid_request_is_one_entity(store_url: str) -> None:
    store = Store.open(store_url)
    now = time.time()
    b = RequestBuilder(job="j", node="n0")
    b.gauge("gpu.temperature", [(now, 70.0, {"gpu": 0, "gpu.uuid": "GPU-a"})])
    b.gauge("gpu.power", [(now, 300.0, {"gpu": 0, "gpu.uuid": "GPU-b"})])
    b.gauge("app.x", [(now, 1.0, {"gpu": 0, "gpu.uuid": u}) for u in ("GPU-a", "GPU-b")])
    assert store.write(flatten(b.request, window=TimeWindow(now, max_future_s=60))).rejected == 0
    gpu = store.read_trace(job="j").gpu
    assert len(gpu) == 1 and gpu["gpu.power"].iloc[0] == 300.0
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT gpu_uuid FROM entities")).scalar() == "GPU-b"
    store.close()
