import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api import alert_state
from api.app import create_app
from collector.store import Store
from tests.api.alerting import ADMIN_HEADERS, observation, settings


@pytest.fixture
def service(sqlite_url: str) -> Iterator[tuple[TestClient, Store]]:
    store = Store.open(sqlite_url)
    app = create_app(settings(sqlite_url, ingest_token="ingest-token-only"), store=store)
    with TestClient(app) as client:
        yield client, store


def test_alerts_are_listed_filtered_and_shown_with_history(service) -> None:
    client, store = service
    with store.session() as session:
        gpu = alert_state.fire(session, observation(risk=0.93))
        alert_state.fire(session, observation(kind="link", gpu=None, peer="node-02", risk=0.6))
        alert_state.fire(session, observation(job="gpt", node="node-11", kind="node", gpu=None))
        alert_state.resolve(session, job="gpt", node="node-11", gpu=None, peer=None,
                            kind="node", ts=time.time())

    everything = client.get("/api/v1/alerts").json()
    assert [a["state"] for a in everything] == ["firing", "firing", "resolved"]
    firing = client.get("/api/v1/alerts", params={"state": "firing"}).json()
    assert {a["kind"] for a in firing} == {"gpu", "link"}
    assert [a["node"] for a in client.get("/api/v1/alerts", params={"job": "gpt"}).json()] == [
        "node-11"]
    (link,) = client.get("/api/v1/alerts", params={"kind": "link", "node": "node-07"}).json()
    assert link["peer"] == "node-02" and link["severity"] == "warning"
    assert client.get("/api/v1/alerts", params={"kind": "disk"}).status_code == 422

    detail = client.get(f"/api/v1/alerts/{gpu.id}").json()
    assert detail["risk"] == 0.93 and detail["lead_s"] == 720.0
    assert detail["signals"] == ["ecc.sbe rising", "temp 91C"]
    assert detail["action"] == "checkpoint and drain node node-07"
    assert [h["state"] for h in detail["history"]] == ["firing"]
    assert client.get("/api/v1/alerts/999").status_code == 404


def test_ack_needs_the_admin_token_not_the_ingest_token(service) -> None:
    client, store = service
    with store.session() as session:
        alert = alert_state.fire(session, observation())
    url = f"/api/v1/alerts/{alert.id}/ack"
    assert client.post(url, json={"by": "alice"}).status_code == 401
    ingest = {"Authorization": "Bearer ingest-token-only"}
    assert client.post(url, json={"by": "alice"}, headers=ingest).status_code == 401
    acked = client.post(url, json={"by": "alice"}, headers=ADMIN_HEADERS)
    assert acked.status_code == 200 and acked.json()["acked_by"] == "alice"
    detail = client.get(f"/api/v1/alerts/{alert.id}").json()
    assert [h["state"] for h in detail["history"]] == ["firing", "acknowledged"]

    with store.session() as session:
        alert_state.resolve(session, job="llama", node="node-07", gpu=3, peer=None, kind="gpu",
                            ts=time.time())
    assert client.post(url, json={"by": "alice"}, headers=ADMIN_HEADERS).status_code == 409


def test_silences_are_created_listed_applied_and_expired(service) -> None:
    client, store = service
    assert client.get("/api/v1/silences").status_code == 401
    bad = client.post("/api/v1/silences", headers=ADMIN_HEADERS,
                      json={"matchers": {"rack": "r1"}, "duration_s": 60, "created_by": "bob"})
    assert bad.status_code == 422 and "rack" in bad.text
    no_end = client.post("/api/v1/silences", headers=ADMIN_HEADERS,
                         json={"matchers": {"node": "node-07"}, "created_by": "bob"})
    assert no_end.status_code == 422 and "ends_at" in no_end.text

    created = client.post("/api/v1/silences", headers=ADMIN_HEADERS, json={
        "matchers": {"node": "node-07"}, "duration_s": 3600, "created_by": "bob",
        "comment": "planned maintenance"})
    assert created.status_code == 201, created.text
    silence = created.json()
    assert silence["active"] and silence["matchers"] == {"node": "node-07"}

    with store.session() as session:
        alert = alert_state.fire(session, observation())
    shown = client.get(f"/api/v1/alerts/{alert.id}").json()
    assert shown["silenced"] and shown["deliveries"] == []
    assert [h["state"] for h in shown["history"]] == ["firing", "silenced"]

    listed = client.get("/api/v1/silences", headers=ADMIN_HEADERS, params={"active": True})
    assert [s["id"] for s in listed.json()] == [silence["id"]]
    expired = client.delete(f"/api/v1/silences/{silence['id']}", headers=ADMIN_HEADERS)
    assert expired.status_code == 200 and not expired.json()["active"]
    assert not client.get(f"/api/v1/alerts/{alert.id}").json()["silenced"]
    assert client.get("/api/v1/silences/999", headers=ADMIN_HEADERS).status_code == 404


def test_admin_endpoints_are_off_without_an_admin_token(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    app = create_app(settings(sqlite_url, admin_token=None), store=store)
    with TestClient(app) as client:
        response = client.get("/api/v1/silences", headers=ADMIN_HEADERS)
        assert response.status_code == 403
        assert "FORESHOCK_ADMIN_TOKEN" in response.json()["detail"]
        assert client.get("/api/v1/alerts").status_code == 200


def test_silences_refuse_times_that_are_no_number_and_say_so(service) -> None:
    # JSON bodies may carry NaN and Infinity. A NaN end failed with a 500 (the 422 that echoed
    # it could not be written as JSON); an infinite duration muted the node for ever and read
    # back as an end of null.
    client, _ = service
    for field, body in [
        ("ends_at", '{"matchers": {"node": "a"}, "ends_at": NaN, "created_by": "bob"}'),
        ("duration_s", '{"matchers": {"node": "a"}, "duration_s": Infinity, "created_by": "b"}'),
        ("starts_at", '{"matchers": {"node": "a"}, "starts_at": -Infinity, "duration_s": 60, '
                      '"created_by": "bob"}'),
    ]:
        r = client.post("/api/v1/silences", content=body,
                        headers={**ADMIN_HEADERS, "content-type": "application/json"})
        assert r.status_code == 422, (field, r.text)
        [error] = r.json()["detail"]
        assert error["loc"] == ["body", field] and "finite" in error["msg"], r.text
    assert client.get("/api/v1/silences", headers=ADMIN_HEADERS).json() == []
