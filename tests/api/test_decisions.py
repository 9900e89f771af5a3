"""Decisions: derived from firing alerts under the policy, moved by the trainer, cancelled by
an admin; on SQLite and the real PostgreSQL, through the real app."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.alert_state import RiskObservation, fire, resolve
from api.app import create_app
from api.settings import Settings
from collector.schema import Entity, Point, Series
from collector.store import Store

ADMIN = {"Authorization": "Bearer admin-secret"}
INGEST = {"Authorization": "Bearer ingest-secret"}
JOB = "llm"


def _steps(store: Store, *, job: str, nodes: list[str], ts: float) -> None:
    """Ranks of ``job`` on ``nodes`` reported a step at ``ts``."""
    with store.session() as s:
        for rank, node in enumerate(nodes):
            entity = Entity(key=f"{job}|{node}|{rank}||", job=job, node=node, rank=rank)
            s.add(entity)
            s.flush()
            series = Series(key=f"{entity.key}|train.step.duration||", job=job,
                            name="train.step.duration", entity_id=entity.id, kind="gauge")
            s.add(series)
            s.flush()
            s.add(Point(series_id=series.id, ts=ts, value=0.2))


def _alert(store: Store, *, node: str, risk: float = 0.95, lead_s: float | None = 300.0,
           job: str = JOB) -> int:
    with store.session() as s:
        alert = fire(s, RiskObservation(
            job=job, node=node, gpu=0, peer=None, kind="gpu", risk=risk, lead_s=lead_s,
            signals=("gpu.ecc.sbe rate",), model_version="test", ts=time.time()))
        s.flush()
        return alert.id


def _client(store: Store, db_url: str, **overrides: Any) -> Iterator[TestClient]:
    settings = Settings.model_validate({
        "db_url": db_url, "admin_token": "admin-secret", "ingest_token": "ingest-secret",
        "score_interval_s": 3600, "maintenance_interval_s": 3600, **overrides})
    with TestClient(create_app(settings, store=store)) as client:
        yield client


@pytest.fixture
def any_store(store_url: str) -> Iterator[Store]:
    s = Store.open(store_url)
    yield s
    s.engine.dispose()


@pytest.fixture
def store(sqlite_url: str) -> Iterator[Store]:
    s = Store.open(sqlite_url)
    yield s
    s.engine.dispose()


def _poll(client: TestClient, **params: Any) -> dict[str, Any]:
    r = client.get(f"/api/v1/jobs/{JOB}/decisions", headers=INGEST, params=params)
    assert r.status_code == 200, r.text
    polled: dict[str, Any] = r.json()
    return polled


def test_firing_alert_becomes_one_decision_the_trainer_carries_out(
        any_store: Store, store_url: str) -> None:
    store = any_store
    _steps(store, job=JOB, nodes=["node-a", "node-b", "node-c"], ts=time.time())
    alert_id = _alert(store, node="node-c")
    for client in _client(store, store_url):
        first = _poll(client)
        assert [(d["node"], d["state"], d["alert_id"]) for d in first["decisions"]] == [
            ("node-c", "pending", alert_id)]
        assert "risk 0.95" in first["decisions"][0]["reason"]
        # The alert keeps firing: polling again does not take a second decision.
        assert [d["id"] for d in _poll(client)["decisions"]] == [first["decisions"][0]["id"]]
        did = first["decisions"][0]["id"]

        acked = client.post(f"/api/v1/jobs/{JOB}/decisions/{did}/ack", headers=INGEST,
                            json={"step": 120, "note": "all ranks act after step 120"})
        assert acked.status_code == 200 and acked.json()["state"] == "acknowledged"
        assert acked.json()["step"] == 120
        assert _poll(client)["decisions"][0]["state"] == "acknowledged"

        done = client.post(f"/api/v1/jobs/{JOB}/decisions/{did}/done", headers=INGEST,
                           json={"note": "resumed on 2 nodes at step 121"})
        assert done.json()["state"] == "done"
        # Retried report (the trainer did not see the answer): same result, no error.
        again = client.post(f"/api/v1/jobs/{JOB}/decisions/{did}/done", headers=INGEST)
        assert again.status_code == 200
        assert _poll(client)["decisions"] == []

        listed = client.get("/api/v1/decisions", params={"job": JOB}).json()
        assert [(d["id"], d["state"], d["step"]) for d in listed] == [(did, "done", 120)]
        assert "resumed on 2 nodes" in listed[0]["reason"]
        # Unknown job, no token, bad state filter: clear refusals.
        assert client.post(f"/api/v1/jobs/other/decisions/{did}/ack",
                           headers=INGEST).status_code == 404
        assert client.get(f"/api/v1/jobs/{JOB}/decisions").status_code == 401
        bad = client.get("/api/v1/decisions", params={"state": "maybe"})
        assert bad.status_code == 422 and "pending" in bad.text


def test_a_drained_node_back_in_the_job_and_alerting_again_drains_again_after_its_wait(
        store: Store, sqlite_url: str) -> None:
    # A drained node goes silent and the scorer resolves its alert; returned to the job with its
    # risk still high, it alerts anew. Within 6 h of its drain that alert only alerts (a standing
    # false alarm would drain a healthy node every time it came back); after, it drains again.
    from api.decision_state import Decision

    _steps(store, job=JOB, nodes=["node-a", "node-b", "node-c"], ts=time.time())
    _alert(store, node="node-c")
    for client in _client(store, sqlite_url):
        first = _poll(client)["decisions"][0]["id"]
        client.post(f"/api/v1/jobs/{JOB}/decisions/{first}/ack", headers=INGEST,
                    json={"step": 50})
        client.post(f"/api/v1/jobs/{JOB}/decisions/{first}/done", headers=INGEST)
        with store.session() as s:
            resolve(s, job=JOB, node="node-c", gpu=0, peer=None, kind="gpu", ts=time.time())
        assert _poll(client)["decisions"] == []
        _steps(store, job=JOB, nodes=["node-c"], ts=time.time())  # back in the job
        again = _alert(store, node="node-c")
        held = _poll(client)
        assert held["decisions"] == []
        assert [(h["node"], h["alert_id"]) for h in held["held"]] == [("node-c", again)]
        assert f"was drained 0 min ago (decision {first})" in held["held"][0]["reason"]
        assert "no sooner than 6 h after its last drain" in held["held"][0]["reason"]
        with store.session() as s:  # a minute short of 6 h later, it is still held
            s.get(Decision, first).created_at -= 6 * 3600 - 60
        assert _poll(client)["decisions"] == []
        with store.session() as s:  # the wait is over
            s.get(Decision, first).created_at -= 61
        second = _poll(client)["decisions"]
        assert [(d["node"], d["alert_id"], d["state"]) for d in second] == [
            ("node-c", again, "pending")]
        assert second[0]["id"] != first


def test_the_wait_before_a_returned_node_drains_again_is_the_services_setting(
        store: Store, sqlite_url: str) -> None:
    from api.decision_state import Decision

    now = time.time()
    _steps(store, job=JOB, nodes=["node-a", "node-b"], ts=now)
    with store.session() as s:  # node-b was drained 2 h ago, and is back
        s.add(Decision(job=JOB, node="node-b", alert_id=None, state="done", reason="earlier",
                       created_at=now - 7200, updated_at=now - 7100))
    again = _alert(store, node="node-b")
    for client in _client(store, sqlite_url, drain_again_after_s=3 * 3600):
        held = _poll(client)["held"]
        assert [(h["node"], h["alert_id"]) for h in held] == [("node-b", again)]
        assert "drained 2 h ago" in held[0]["reason"] and "than 3 h" in held[0]["reason"]
    for client in _client(store, sqlite_url, drain_again_after_s=3600):
        assert [d["alert_id"] for d in _poll(client)["decisions"]] == [again]


def test_a_drain_an_admin_marks_repaired_lets_the_node_drain_again_at_once(
        store: Store, sqlite_url: str) -> None:
    # node-c's GPU was swapped after its drain: the admin says so, and the next alert on the
    # returned node is a decision at once instead of waiting out the 6 h. The repaired drain
    # still happened, so it still counts in the job's two drains an hour.
    now = time.time()
    _steps(store, job=JOB, nodes=["node-a", "node-b", "node-c"], ts=now)
    _alert(store, node="node-c")
    for client in _client(store, sqlite_url):
        first = _poll(client)["decisions"][0]["id"]
        url = f"/api/v1/jobs/{JOB}/decisions/{first}/repaired"
        early = client.post(url, headers=ADMIN)  # not drained yet: nothing to have repaired
        assert early.status_code == 409 and "pending; it cannot become repaired" in early.text
        client.post(f"/api/v1/jobs/{JOB}/decisions/{first}/done", headers=INGEST)
        with store.session() as s:
            resolve(s, job=JOB, node="node-c", gpu=0, peer=None, kind="gpu", ts=time.time())
        again = _alert(store, node="node-c")
        held = _poll(client)["held"]
        assert [h["alert_id"] for h in held] == [again]
        assert f"marks that drain repaired (POST {url})" in held[0]["reason"]

        assert client.post(url, headers=INGEST).status_code == 401  # an admin's call only
        r = client.post(url, headers=ADMIN, json={"note": "GPU 0 replaced"})
        assert r.status_code == 200 and r.json()["state"] == "repaired"
        assert r.json()["reason"].endswith("repaired: GPU 0 replaced")
        second = _poll(client)["decisions"]
        assert [(d["node"], d["alert_id"]) for d in second] == [("node-c", again)]
        assert client.get("/api/v1/decisions", params={"state": "repaired"}).json()[0]["id"] \
            == first

        _alert(store, node="node-a")  # two drains in this hour, the repaired one among them
        held = _poll(client)["held"]
        assert [h["node"] for h in held] == ["node-a"]
        assert "2 drain(s) in the last hour" in held[0]["reason"]


def test_cancelled_decision_is_not_acted_on_nor_taken_again(store: Store, sqlite_url: str,
                                                            tmp_path: Path) -> None:
    _steps(store, job=JOB, nodes=["node-a", "node-b", "node-c"], ts=time.time())
    _alert(store, node="node-b")
    for client in _client(store, sqlite_url):
        did = _poll(client)["decisions"][0]["id"]
        url = f"/api/v1/jobs/{JOB}/decisions/{did}/cancel"
        assert client.post(url).status_code == 401
        assert client.post(url, headers=INGEST).status_code == 401
        r = client.post(url, headers=ADMIN, json={"note": "node-b is being serviced anyway"})
        assert r.status_code == 200 and r.json()["state"] == "cancelled"
        assert _poll(client)["decisions"] == []
        late = client.post(f"/api/v1/jobs/{JOB}/decisions/{did}/ack", headers=INGEST,
                           json={"step": 7})
        assert late.status_code == 409
        assert "cancelled" in late.json()["detail"]


def test_policy_refuses_to_drain_below_the_minimum_node_count(store: Store,
                                                               sqlite_url: str) -> None:
    _steps(store, job=JOB, nodes=["node-a", "node-b"], ts=time.time())
    _alert(store, node="node-a")
    for client in _client(store, sqlite_url, drain_min_nodes=2):
        polled = _poll(client)
        assert polled["decisions"] == []
        assert polled["held"][0]["node"] == "node-a"
        assert "below the minimum of 2" in polled["held"][0]["reason"]
    # The job itself may ask for a higher minimum than the service's default.
    for client in _client(store, sqlite_url):
        assert _poll(client, min_nodes=2)["decisions"] == []
        assert [d["node"] for d in _poll(client)["decisions"]] == ["node-a"]


def test_policy_thresholds_hold_alerts_back(store: Store, sqlite_url: str) -> None:
    now = time.time()
    _steps(store, job=JOB, nodes=["n1", "n2", "n3", "n4"], ts=now)
    _steps(store, job="idle", nodes=["n9"], ts=now - 3600)  # not running any more
    _alert(store, node="n1", risk=0.55)
    _alert(store, node="n2", lead_s=20.0)
    _alert(store, node="n9", job="idle")
    for client in _client(store, sqlite_url, drain_risk_threshold=0.6, drain_min_lead_s=60,
                          drain_max_per_hour=1):
        held = {h["node"]: h["reason"] for h in _poll(client)["held"]}
        assert "below the policy's 0.60" in held["n1"]
        assert "shorter than the policy's 60 s" in held["n2"]
        _alert(store, node="n3")
        _alert(store, node="n4")
        polled = _poll(client)
        assert len(polled["decisions"]) == 1
        assert any("last hour" in h["reason"] for h in polled["held"])
        r = client.get("/api/v1/jobs/idle/decisions", headers=INGEST)
        assert r.json()["decisions"] == [] and r.json()["held"] == []


@pytest.mark.parametrize("node", ["node-b", "rack 1/node b'x"])
def test_done_runs_the_scheduler_drain_command(store: Store, sqlite_url: str, tmp_path: Path,
                                               node: str) -> None:
    # A node name is one argument whatever it holds. It was put into the command before the
    # split: "rack 1/node b" became two arguments (scontrol would drain two nodes), and a quote
    # in it stopped the split, so the command never ran.
    _steps(store, job=JOB, nodes=["node-a", node], ts=time.time())
    _alert(store, node=node)
    out = tmp_path / "drained.txt"
    command = (f"{sys.executable} -c \"import sys; open(sys.argv[1], 'w').write('|'.join("
               f"sys.argv[2:]))\" {out} {{node}} job={{job}}")
    for client in _client(store, sqlite_url, drain_command=command):
        did = _poll(client)["decisions"][0]["id"]
        client.post(f"/api/v1/jobs/{JOB}/decisions/{did}/done", headers=INGEST, json={"step": 3})
        assert out.read_text() == f"{node}|job={JOB}"
        reason = client.get("/api/v1/decisions").json()[0]["reason"]
        assert "drain command" in reason and "exited 0" in reason


@pytest.mark.parametrize(("command", "says"), [
    ("scontrol update NodeName='{node}", "No closing quotation"),
    ("scontrol update NodeName={node} Partition={rack}", "KeyError('rack')"),
])
def test_a_drain_command_that_cannot_be_filled_in_is_refused_at_start(command: str,
                                                                       says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        Settings(drain_command=command)
    assert Settings(drain_command="  ").drain_command is None  # blank: no command


@pytest.mark.parametrize(("field", "value", "says"), [
    ("risk_threshold", 1.5, "policy.risk_threshold=1.5 must be within [0, 1]"),
    ("min_lead_s", -1.0, "policy.min_lead_s=-1.0 must be >= 0"),
    ("max_drains_per_hour", -1, "policy.max_drains_per_hour=-1 must be >= 0"),
    ("min_nodes", 0, "policy.min_nodes=0 must be >= 1"),
    ("active_window_s", 0.0, "policy.active_window_s=0.0 must be > 0"),
    ("drain_again_after_s", -60.0, "policy.drain_again_after_s=-60.0 must be >= 0"),
])
def test_a_policy_built_in_code_refuses_a_bad_value_by_name(field: str, value: float,
                                                            says: str) -> None:
    # Settings refuses these from the environment before a policy is built; a policy built in
    # code gets the same refusal, naming the field and the bound.
    from api.decision_state import DrainPolicy

    with pytest.raises(ValueError, match=re.escape(says)):
        DrainPolicy(**{field: value})
    DrainPolicy(**{field: 0.5 if field == "risk_threshold" else 1})  # in range: accepted
