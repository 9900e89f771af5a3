import time
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text

from api import alert_state
from api.app import create_app
from collector.store import Store
from tests.api.alerting import observation, settings
from tests.api.daemon import binary_or_skip, daemon
from tests.conftest import free_port

# The interface's risk_scores columns (the predictor's migration owns the real table).
RISK_SCORES = Table(
    "risk_scores", MetaData(),
    Column("id", Integer, primary_key=True), Column("ts", Float), Column("job", String(128)),
    Column("node", String(128)), Column("gpu", Integer, nullable=True),
    Column("peer", String(128), nullable=True), Column("kind", String(8)), Column("risk", Float),
    Column("lead_s", Float, nullable=True), Column("signals", Text),
    Column("model_version", String(64)))


def _score(store: Store, **row: object) -> None:
    RISK_SCORES.create(store.engine, checkfirst=True)
    base = {"gpu": None, "peer": None, "lead_s": None, "signals": "[]", "model_version": "m1",
            "job": "llama"}
    with store.engine.begin() as conn:
        conn.execute(RISK_SCORES.insert().values(**{**base, **row}))


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name}


def test_metrics_export_newest_risk_per_entity_alerts_and_counters(store_url: str) -> None:
    store = Store.open(store_url)
    now = time.time()
    _score(store, ts=now - 60, node="node-07", gpu=3, kind="gpu", risk=0.2)
    _score(store, ts=now, node="node-07", gpu=3, kind="gpu", risk=0.85)
    _score(store, ts=now, node="node-07", peer="node-08", kind="link", risk=0.4)
    _score(store, ts=now - 7200, node="node-gone", gpu=0, kind="gpu", risk=0.9)  # stale
    with store.session() as session:
        alert_state.fire(session, observation())
    app = create_app(settings(store_url), store=store)
    other = create_app(settings(store_url), store=store)  # a registry per app: no clash
    with TestClient(app) as client, TestClient(other) as other_client:
        response = client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        risk = _samples(response.text, "foreshock_risk")
        assert risk == {
            (("gpu", "3"), ("job", "llama"), ("kind", "gpu"), ("node", "node-07"),
             ("peer", "")): 0.85,
            (("gpu", ""), ("job", "llama"), ("kind", "link"), ("node", "node-07"),
             ("peer", "node-08")): 0.4}
        active = _samples(response.text, "foreshock_alerts_active")
        assert active == {(("kind", "gpu"), ("severity", "critical")): 1.0}
        assert "foreshock_webhook_outbox_pending 0.0" in response.text
        assert "foreshock_ingest_points_total 0.0" in response.text
        assert other_client.get("/metrics").status_code == 200


def test_real_prometheus_scrapes_the_risk_series(live_server, sqlite_url: str,
                                                 tmp_path: Path) -> None:
    prometheus = binary_or_skip("prometheus")
    server = live_server(sqlite_url)
    store = Store.open(sqlite_url)
    _score(store, ts=time.time(), node="node-07", gpu=3, kind="gpu", risk=0.85)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: foreshock
    honor_labels: true
    static_configs: [{{targets: ["127.0.0.1:{server.port}"]}}]
""")
    with daemon([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                ready_url=f"http://127.0.0.1:{port}/-/ready", log_path=tmp_path / "prom.log"):
        deadline = time.monotonic() + 30
        result: list[dict[str, object]] = []
        while not result and time.monotonic() < deadline:
            time.sleep(0.5)
            answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/query",
                               params={"query": 'foreshock_risk{node="node-07"}'}).json()
            assert answer["status"] == "success"
            result = answer["data"]["result"]
    assert len(result) == 1, result
    metric, value = result[0]["metric"], result[0]["value"]
    assert metric["job"] == "llama" and metric["gpu"] == "3" and metric["kind"] == "gpu"
    assert float(value[1]) == 0.85  # type: ignore[index]
    store.close()
