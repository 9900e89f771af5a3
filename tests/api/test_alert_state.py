import json
import time

import pytest
from sqlalchemy import select

from api import alert_state
from api.alert_state import Alert, AlertHistory, Silence
from api.outbox import Delivery
from collector.store import Store
from tests.api.alerting import observation, subscribe


def _deliveries(store: Store) -> list[tuple[int, str]]:
    with store.session() as session:
        return [(d.subscription_id, d.status)
                for d in session.scalars(select(Delivery).order_by(Delivery.id))]


def test_one_alert_per_entity_fires_updates_resolves_and_fires_again(store_url: str) -> None:
    store = Store.open(store_url)
    sub = subscribe(store, "http://127.0.0.1:9/hook")
    with store.session() as session:
        first = alert_state.fire(session, observation(risk=0.6))
    with store.session() as session:  # still firing: updated in place, not re-notified
        again = alert_state.fire(session, observation(risk=0.7, lead_s=300.0, signals=("xid 79",)))
    assert again.id == first.id
    with store.session() as session:
        (alert,) = alert_state.firing_alerts(session)
        assert (alert.risk, alert.lead_s, alert.signal_list) == (0.7, 300.0, ["xid 79"])
        assert alert.severity == "warning" and alert.action == "checkpoint and drain node node-07"
        assert alert_state.firing_alerts(session, job="other") == []
    assert _deliveries(store) == [(sub, "firing")]

    with store.session() as session:
        resolved = alert_state.resolve(session, job="llama", node="node-07", gpu=3, peer=None,
                                       kind="gpu", ts=time.time())
        assert resolved is not None and resolved.state == "resolved"
        assert alert_state.resolve(session, job="llama", node="node-07", gpu=3, peer=None,
                                   kind="gpu", ts=time.time()) is None
        assert alert_state.firing_alerts(session) == []
    with store.session() as session:
        refired = alert_state.fire(session, observation(risk=0.95))
        assert refired.id == first.id and refired.ends_at is None
        history = session.scalars(select(AlertHistory.state).order_by(AlertHistory.id)).all()
        assert history == ["firing", "resolved", "firing"]
        assert len(session.scalars(select(Alert)).all()) == 1
    assert _deliveries(store) == [(sub, "firing"), (sub, "resolved"), (sub, "firing")]


def test_entities_and_kinds_are_separate_alerts_with_labels_for_each(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    with store.session() as session:
        gpu = alert_state.fire(session, observation())
        link = alert_state.fire(session, observation(kind="link", gpu=None, peer="node-08"))
        node = alert_state.fire(session, observation(kind="node", gpu=None))
        assert len({gpu.fingerprint, link.fingerprint, node.fingerprint}) == 3
        assert link.labels() == {"alertname": "ForeshockLinkFailureRisk", "severity": "critical",
                                 "job": "llama", "node": "node-07", "kind": "link",
                                 "peer": "node-08"}
        assert "gpu" not in node.labels() and "peer" not in node.labels()
        assert "link node-07 -> node-08" in link.annotations()["summary"]


def test_filters_silences_and_acks_decide_who_is_notified(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    critical_only = subscribe(store, "http://127.0.0.1:9/a", name="pager",
                              filters=json.dumps({"severity": ["critical"]}))
    other_job = subscribe(store, "http://127.0.0.1:9/b", name="other",
                          filters=json.dumps({"job": ["gpt"], "kind": ["gpu"]}))
    everything = subscribe(store, "http://127.0.0.1:9/c", name="all")
    with store.session() as session:
        alert_state.fire(session, observation(risk=0.5))  # warning
    assert _deliveries(store) == [(everything, "firing")]
    with store.session() as session:  # escalation warning -> critical is notified again
        alert_state.fire(session, observation(risk=0.9))
    assert _deliveries(store)[1:] == [(critical_only, "firing"), (everything, "firing")]

    with store.session() as session:  # an acknowledged alert's escalation is not
        alert = alert_state.fire(session, observation(gpu=4, risk=0.5))
        alert_state.acknowledge(session, alert, by="alice")
        alert_state.fire(session, observation(gpu=4, risk=0.9))
    assert len(_deliveries(store)) == 4

    with store.session() as session:
        session.add(Silence(matchers=json.dumps({"node": "node-09"}), starts_at=time.time() - 1,
                            ends_at=time.time() + 600, created_by="bob", comment="maintenance",
                            created_at=time.time()))
    with store.session() as session:
        silenced = alert_state.fire(session, observation(node="node-09"))
        assert alert_state.is_silenced(session, silenced)
        assert silenced.state == "firing"  # muted, still tracked
        alert_state.fire(session, observation(job="gpt", node="node-10"))
    assert _deliveries(store)[4:] == [(critical_only, "firing"), (other_job, "firing"),
                                      (everything, "firing")]


def test_bad_observation_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"RiskObservation.risk=1.5"):
        observation(risk=1.5)
    with pytest.raises(ValueError, match=r"RiskObservation.kind='disk'"):
        observation(kind="disk")
