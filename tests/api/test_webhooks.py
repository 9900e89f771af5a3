import time
import uuid
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from api import alert_state
from api.app import create_app
from api.webhooks import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify_signature
from collector.store import Store
from tests.api.alerting import ADMIN, ADMIN_HEADERS, FAST, SECRET, observation, settings, subscribe
from tests.api.receiver import receiver


def _header(received: object, name: str) -> str:
    headers = {k.lower(): v for k, v in received.headers.items()}  # type: ignore[attr-defined]
    return headers[name.lower()]


def _states(client: TestClient, alert_id: int, *, until: list[str]) -> list[str]:
    deadline = time.monotonic() + 15
    while True:
        states = [d["state"] for d in client.get(f"/api/v1/alerts/{alert_id}").json()["deliveries"]]
        if states == until or time.monotonic() > deadline:
            return states
        time.sleep(0.05)


def test_healthy_receiver_gets_signed_alertmanager_payload(store_url: str) -> None:
    # Delivery latency is a benchmark figure (benchmarks/webhook_latency.py), not a timed test:
    # here the outbox only has to deliver without any nudge besides its own poll loop.
    store = Store.open(store_url)
    app = create_app(settings(store_url, webhook_poll_interval_s=0.25), store=store)
    with receiver() as recv, TestClient(app) as client:
        subscribe(store, recv.url)
        with store.session() as session:
            alert = alert_state.fire(session, observation())
        (got,) = recv.wait_for(1, timeout=10)

        body = got.json()
        assert body["version"] == "4" and body["status"] == "firing"
        assert body["receiver"] == "oncall"
        assert body["externalURL"] == app.state.settings.external_url
        (sent,) = body["alerts"]
        assert sent["labels"] == {"alertname": "ForeshockGpuFailureRisk", "severity": "critical",
                                  "job": "llama", "node": "node-07", "gpu": "3", "kind": "gpu"}
        assert sent["annotations"]["action"] == "checkpoint and drain node node-07"
        assert sent["annotations"]["risk"] == "0.910"
        assert sent["annotations"]["lead_estimate_s"] == "720"
        assert sent["annotations"]["signals"] == "ecc.sbe rising, temp 91C"
        assert "node-07" in sent["annotations"]["summary"]
        assert sent["endsAt"] == "0001-01-01T00:00:00Z" and sent["startsAt"].endswith("Z")
        assert sent["fingerprint"] == alert.fingerprint
        assert sent["generatorURL"].endswith(f"/api/v1/alerts/{alert.id}")
        assert body["commonLabels"] == sent["labels"]
        assert body["groupLabels"] == {"alertname": "ForeshockGpuFailureRisk", "job": "llama",
                                       "node": "node-07"}

        ts, signature = _header(got, TIMESTAMP_HEADER), _header(got, SIGNATURE_HEADER)
        assert signature.startswith("v1=")
        assert verify_signature(SECRET, ts, got.body, signature)
        assert not verify_signature(SECRET, ts, got.body.replace(b"0.910", b"0.100"), signature)
        assert not verify_signature("another-secret-entirely", ts, got.body, signature)
        assert not verify_signature(SECRET, ts, got.body, signature, now=int(ts) + 3600)
        first_key = _header(got, "X-Foreshock-Delivery")
        uuid.UUID(first_key)

        with store.session() as session:
            alert_state.resolve(session, job="llama", node="node-07", gpu=3, peer=None,
                                kind="gpu", ts=time.time())
        _, resolved = recv.wait_for(2, timeout=15)
        assert resolved.json()["status"] == "resolved"
        assert resolved.json()["alerts"][0]["endsAt"] != "0001-01-01T00:00:00Z"
        assert _header(resolved, "X-Foreshock-Delivery") != first_key

        # The receiver answered; the outbox records it a moment later.
        assert _states(client, alert.id, until=["delivered", "delivered"]) == [
            "delivered", "delivered"]
        metrics = client.get("/metrics").text
        assert 'foreshock_webhook_deliveries_total{result="delivered"} 2.0' in metrics


def test_failing_then_hanging_receiver_loses_nothing_and_holds_up_no_one(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    app = create_app(settings(sqlite_url), store=store)
    with receiver([500, "hang", 503]) as bad, receiver() as good, TestClient(app) as client:
        subscribe(store, bad.url, name="flaky")
        subscribe(store, good.url, name="healthy")
        ids = []
        for gpu in range(3):
            with store.session() as session:
                ids.append(alert_state.fire(session, observation(gpu=gpu)).id)
        good.wait_for(3, timeout=15)
        assert bad.received == []  # the healthy receiver did not wait for the broken one

        got = bad.wait_for(3, timeout=20)
        time.sleep(0.3)
        assert len(bad.received) == 3  # each alert once, in the order it fired
        assert [r.json()["alerts"][0]["labels"]["gpu"] for r in got] == ["0", "1", "2"]
        _states(client, ids[0], until=["delivered", "delivered"])
        first = client.get(f"/api/v1/alerts/{ids[0]}").json()["deliveries"]
        flaky = next(d for d in first if d["subscription_id"] == 1)
        assert flaky["state"] == "delivered" and flaky["attempts"] == 4
        assert flaky["key"] == _header(got[0], "X-Foreshock-Delivery")


def test_receiver_that_rejects_is_not_retried_and_deleted_subscription_is_cancelled(
        sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    app = create_app(settings(sqlite_url), store=store)
    with receiver([400]) as recv, TestClient(app) as client:
        subscribe(store, recv.url)
        with store.session() as session:
            alert = alert_state.fire(session, observation())
        deadline = time.monotonic() + 15
        while client.get(f"/api/v1/alerts/{alert.id}").json()["deliveries"][0]["state"] \
                == "pending" and time.monotonic() < deadline:
            time.sleep(0.05)
        (delivery,) = client.get(f"/api/v1/alerts/{alert.id}").json()["deliveries"]
        assert delivery["state"] == "rejected" and delivery["last_error"] == "HTTP 400"
        assert recv.attempts == 1

    with receiver([500] * 1000) as down:
        sub_id = subscribe(store, down.url, name="gone")
        with store.session() as session:
            alert = alert_state.fire(session, observation(gpu=5))
        with TestClient(app) as client:
            while down.attempts == 0:
                time.sleep(0.05)
            assert client.delete(f"/api/v1/subscriptions/{sub_id}",
                                 headers=ADMIN_HEADERS).status_code == 204
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                deliveries = client.get(f"/api/v1/alerts/{alert.id}").json()["deliveries"]
                (gone,) = [d for d in deliveries if d["subscription_id"] == sub_id]
                if gone["state"] == "cancelled":
                    break
                time.sleep(0.05)
            assert gone["state"] == "cancelled"


def test_undelivered_alerts_are_delivered_after_a_restart(live_server, tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'restart.db'}"
    env = {"FORESHOCK_ADMIN_TOKEN": ADMIN,
           **{f"FORESHOCK_{k.upper()}": str(v) for k, v in FAST.items()}}
    with receiver([500] * 10_000) as recv:
        server = live_server(db_url, env=env)
        created = httpx.post(f"{server.url}/api/v1/subscriptions", headers=ADMIN_HEADERS,
                             json={"name": "oncall", "url": recv.url, "secret": SECRET})
        assert created.status_code == 201, created.text
        store = Store.open(db_url)
        with store.session() as session:
            alert_state.fire(session, observation(gpu=1))
        deadline = time.monotonic() + 10
        while recv.attempts == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert recv.attempts > 0
        server.stop()
        with store.session() as session:  # fires while the service is down
            alert_state.fire(session, observation(gpu=2))
        recv.script.clear()  # the receiver recovers

        restarted = live_server(db_url, env=env)
        got = recv.wait_for(2, timeout=15)
        assert sorted(r.json()["alerts"][0]["labels"]["gpu"] for r in got) == ["1", "2"]
        assert all(verify_signature(SECRET, _header(r, TIMESTAMP_HEADER), r.body,
                                    _header(r, SIGNATURE_HEADER)) for r in got)
        restarted.stop()
        for log in (server.log(), restarted.log()):
            assert SECRET not in log
        store.close()
