"""The service's scoring loop: store -> features -> shipped model -> risk_scores and alerts."""

from __future__ import annotations

import dataclasses
import json

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from api import alert_state
from api.app import create_app
from api.scoring import JobState, policy_from, score_all
from api.settings import Settings
from collector.fleet_trace import FleetTrace
from collector.store import Store
from collector.trace_io import trace_batches
from predictor.feature_frames import GPU_FEATURES
from predictor.hysteresis import AlertPolicy, PolicyConfig
from predictor.model import RiskModel
from predictor.risk_scores import history
from predictor.scorer import Scorer
from predictor.signals_absent import without
from tests.predictor.conftest import T0, Spec, make_trace


def _shifted(trace: FleetTrace, dt: float) -> FleetTrace:
    def sh(f):
        f = f.copy()
        f["ts"] = f["ts"] + dt
        return f
    meta = dataclasses.replace(trace.meta, start=trace.meta.start + dt, end=trace.meta.end + dt)
    return FleetTrace(meta=meta, gpu=sh(trace.gpu), node=sh(trace.node),
                      links=sh(trace.links), events=sh(trace.events))


def test_scoring_tick_writes_risks_fires_and_later_resolves(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    trace = make_trace(Spec(nodes=3, gpus=4, hours=1.0, interval_s=10.0,
                            ecc_ramp=("n002", 1, 0.75, 1.2)))
    now = 1_800_000_000.0
    store.write_trace(_shifted(trace, now - (T0 + 3600)), job="train")
    scorer = Scorer(RiskModel.load())
    jobs = {"train": JobState(policy=AlertPolicy(config=PolicyConfig(persist_s=0)))}
    score_all(store, scorer, jobs, now=now, window_s=6 * 3600, interval_s=30)
    with store.session() as s:
        rows = history(s, job="train")
        entities = {(r.kind, r.node, r.gpu) for r in rows}
        assert entities >= {("gpu", "n002", 1), ("node", "n000", None)}
        top = max(rows, key=lambda r: r.risk)
        assert (top.node, top.gpu) == ("n002", 1) and top.model_version == scorer.version
        assert json.loads(top.signals)
        firing = alert_state.firing_alerts(s, job="train")
        assert [(a.node, a.gpu, a.kind) for a in firing] == [("n002", 1, "gpu")]
    # No data for an hour: the node no longer reports, so its alert resolves.
    score_all(store, scorer, jobs, now=now + 3600, window_s=6 * 3600, interval_s=30)
    with store.session() as s:
        assert alert_state.firing_alerts(s, job="train") == []
    store.close()


def test_a_job_imported_without_an_event_log_is_scored_with_xid_counts_unknown(
        store_url: str) -> None:
    # Its trace kept no XID log: the service must not read that as GPUs that raised none, the
    # way `foreshock backtest` of the trace directory does not; live data after it is read as it
    # comes.
    store = Store.open(store_url)
    trace = make_trace(Spec(nodes=3, gpus=4, hours=1.0, interval_s=10.0,
                            ecc_ramp=("n002", 1, 0.5, 1.2)))
    now = 1_800_000_000.0
    shifted = _shifted(trace, now - (T0 + 3600))
    assert len(shifted.events)
    store.write_trace(shifted, job="kept")
    store.write_trace(without(shifted, ["events"]), job="bare")
    scorer = Scorer(RiskModel.load())
    jobs = {job: JobState() for job in ("kept", "bare")}
    score_all(store, scorer, jobs, now=now, window_s=6 * 3600, interval_s=30)
    xids = [c for c in GPU_FEATURES if c.startswith("xid_")]
    kept, bare = (jobs[job].engine.features(now) for job in ("kept", "bare"))
    assert bare.gpu[xids].isna().all().all()
    assert bare.node[["xid_node_1h", "xid_node_6h"]].isna().all().all()
    assert kept.gpu[xids].notna().all().all()
    assert kept.gpu.set_index(["node", "gpu"]).loc[("n002", 1), "xid_mem_1h"] >= 1
    with store.session() as s:  # and it is still scored
        assert {r.node for r in history(s, job="bare")} == {"n000", "n001", "n002"}
    # The job then streams live, as a hook does, which reports XIDs: they count again.
    for batch in trace_batches(_shifted(trace, now + 600 - T0), job="bare"):
        store.write(batch)
    score_all(store, scorer, jobs, now=now + 4200, window_s=6 * 3600, interval_s=30)
    live = jobs["bare"].engine.features(now + 4200)
    assert live.gpu[xids].notna().all().all()
    assert live.gpu.set_index(["node", "gpu"]).loc[("n002", 1), "xid_mem_1h"] >= 1
    store.close()


def test_service_starts_with_the_scoring_loop(sqlite_url: str) -> None:
    app = create_app(Settings(db_url=sqlite_url, score_interval_s=0.05))
    with TestClient(app) as client:
        assert client.get("/api/v1/risk").json() == {"risks": [], "count": 0}


def test_the_alert_policy_runs_as_fast_as_the_settings_compress_time(monkeypatch) -> None:
    # foreshock demo's service: every lane 150x faster, the levels as they are; a persistence
    # given outright is taken as given; a compression of 0 is refused by name.
    monkeypatch.setenv("FORESHOCK_ALERT_TIME_COMPRESSION", "150")
    fast = policy_from(Settings())
    assert (fast.persist_s, fast.mid_persist_s, fast.slow_persist_s) == (6.0, 10.0, 24.0)
    assert (fast.fire_at, fast.mid_at) == (PolicyConfig().fire_at, PolicyConfig().mid_at)
    monkeypatch.setenv("FORESHOCK_ALERT_PERSIST_S", "30")
    assert (policy_from(Settings()).persist_s, policy_from(Settings()).mid_persist_s) == (30, 10)
    monkeypatch.setenv("FORESHOCK_ALERT_TIME_COMPRESSION", "0")
    with pytest.raises(ValidationError, match="alert_time_compression"):
        Settings()
