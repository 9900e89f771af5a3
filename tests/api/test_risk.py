"""GET /api/v1/risk (latest per entity) and /api/v1/risk/history, on SQLite and PostgreSQL."""

from __future__ import annotations

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from collector.store import Store
from predictor.risk_scores import write_scores

T = 1_767_225_600.0


def _risks(rows: list[tuple[str, str, int, str, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"kind": k, "node": n, "gpu": g, "peer": p, "risk": r,
                          "lead_s": 5400.0 if r > 0.5 else float("nan"),
                          "signals": ("ECC single-bit errors 40/h over 1h",) if r > 0.5 else ()}
                         for k, n, g, p, r in rows])


@pytest.fixture
def client(store_url: str):
    store = Store.open(store_url)
    with store.session() as s:
        write_scores(s, job="train", ts=T, model_version="hgb-test", risks=_risks([
            ("gpu", "n1", 0, "", 0.10), ("gpu", "n1", 1, "", 0.20), ("node", "n1", -1, "", 0.05),
            ("link", "n1", -1, "n2", 0.01)]))
        write_scores(s, job="train", ts=T + 30, model_version="hgb-test", risks=_risks([
            ("gpu", "n1", 0, "", 0.80), ("gpu", "n2", 0, "", 0.02)]))
        write_scores(s, job="other", ts=T + 30, model_version="hgb-test", risks=_risks([
            ("gpu", "x1", 0, "", 0.3)]))
    app = create_app(Settings(db_url=store_url, score_interval_s=3600), store=store)
    with TestClient(app) as c:
        yield c
    store.close()


def test_latest_risk_per_entity_riskiest_first(client: TestClient) -> None:
    body = client.get("/api/v1/risk", params={"job": "train"}).json()
    got = [(r["kind"], r["node"], r["gpu"], r["peer"], r["risk"]) for r in body["risks"]]
    assert got == [("gpu", "n1", 0, None, 0.8), ("gpu", "n1", 1, None, 0.2),
                   ("node", "n1", None, None, 0.05), ("gpu", "n2", 0, None, 0.02),
                   ("link", "n1", None, "n2", 0.01)]
    top = body["risks"][0]
    assert top["signals"] == ["ECC single-bit errors 40/h over 1h"]
    assert top["lead_s"] == 5400.0 and top["model_version"] == "hgb-test" and top["ts"] == T + 30


def test_latest_risk_filters(client: TestClient) -> None:
    def nodes(**params: object) -> list[tuple[str, int | None]]:
        rows = client.get("/api/v1/risk", params=params).json()["risks"]
        return [(r["node"], r["gpu"]) for r in rows]

    assert nodes(job="other") == [("x1", 0)]
    assert nodes(job="train", node="n2") == [("n2", 0)]
    assert nodes(job="train", kind="node") == [("n1", None)]
    assert nodes(min_risk=0.25) == [("n1", 0), ("x1", 0)]
    assert client.get("/api/v1/risk", params={"kind": "rack"}).status_code == 422


def test_history_of_one_gpu_oldest_first(client: TestClient) -> None:
    body = client.get("/api/v1/risk/history",
                      params={"job": "train", "node": "n1", "gpu": 0}).json()
    assert [(r["ts"], r["risk"]) for r in body["risks"]] == [(T, 0.1), (T + 30, 0.8)]
    window = client.get("/api/v1/risk/history", params={"start": T + 10, "end": T + 60}).json()
    assert {r["ts"] for r in window["risks"]} == {T + 30}
    bad = client.get("/api/v1/risk/history", params={"gpu": 0})
    assert bad.status_code == 422 and "node" in bad.json()["detail"]
