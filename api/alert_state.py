"""Alert state in the store: one alert per entity and kind, firing -> resolved, with history,
silences and acknowledgements.

The scorer decides when an entity crosses its thresholds (hysteresis is its business) and calls
``fire``/``resolve``; this module keeps the state and, on every transition, enqueues webhook
deliveries in the same transaction so an alert is never committed without its notifications.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import Float, ForeignKey, Index, Integer, String, Text, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from api import outbox
from collector.schema import NAME_LEN, Base

AlertKind = Literal["gpu", "link", "node"]
KINDS: tuple[str, ...] = ("gpu", "link", "node")
SEVERITIES: tuple[str, ...] = ("critical", "warning")
CRITICAL_RISK = 0.8
"""Risk at or above which an alert is ``critical``; below it, ``warning``."""
ALERTNAMES = {"gpu": "ForeshockGpuFailureRisk", "link": "ForeshockLinkFailureRisk",
              "node": "ForeshockNodeFailureRisk"}
ZERO_TIME = "0001-01-01T00:00:00Z"
"""What Alertmanager puts in ``endsAt`` of an alert that has not ended."""


@dataclass(frozen=True, kw_only=True)
class RiskObservation:
    """One scored entity, as the scorer hands it to ``fire``."""

    job: str
    node: str
    gpu: int | None
    peer: str | None
    kind: AlertKind
    risk: float
    lead_s: float | None
    signals: tuple[str, ...]
    model_version: str
    ts: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"RiskObservation.kind={self.kind!r} must be one of {KINDS}")
        if not 0.0 <= self.risk <= 1.0:
            raise ValueError(f"RiskObservation.risk={self.risk} must be within [0, 1]")


class Alert(Base):
    """The one alert of an entity and kind; it fires, resolves and may fire again."""

    __tablename__ = "alerts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(32), unique=True)
    job: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    node: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    gpu: Mapped[int | None] = mapped_column(Integer)
    peer: Mapped[str | None] = mapped_column(String(NAME_LEN))
    kind: Mapped[str] = mapped_column(String(8))
    state: Mapped[str] = mapped_column(String(16), index=True)
    severity: Mapped[str] = mapped_column(String(16))
    risk: Mapped[float] = mapped_column(Float)
    lead_s: Mapped[float | None] = mapped_column(Float)
    signals: Mapped[str] = mapped_column(Text, default="[]")
    """JSON list of short strings, top signal first."""
    action: Mapped[str] = mapped_column(Text)
    model_version: Mapped[str] = mapped_column(String(64))
    starts_at: Mapped[float] = mapped_column(Float)
    ends_at: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float, index=True)
    acked_at: Mapped[float | None] = mapped_column(Float)
    acked_by: Mapped[str | None] = mapped_column(String(128))

    @property
    def signal_list(self) -> list[str]:
        return list(json.loads(self.signals or "[]"))

    def labels(self) -> dict[str, str]:
        """Alertmanager labels; ``gpu`` and ``peer`` only where they apply."""
        labels = {"alertname": ALERTNAMES[self.kind], "severity": self.severity,
                  "job": self.job, "node": self.node, "kind": self.kind}
        if self.gpu is not None:
            labels["gpu"] = str(self.gpu)
        if self.peer is not None:
            labels["peer"] = self.peer
        return labels

    def annotations(self) -> dict[str, str]:
        where = {"gpu": f"GPU {self.gpu} on node {self.node}",
                 "link": f"link {self.node} -> {self.peer}",
                 "node": f"node {self.node}"}[self.kind]
        lead = "unknown" if self.lead_s is None else f"~{self.lead_s / 60:.0f} min"
        signals = ", ".join(self.signal_list)
        return {
            "summary": f"{where} (job {self.job}) is likely to fail: risk {self.risk:.2f}",
            "description": (f"Foreshock model {self.model_version} predicts a failure of {where} "
                            f"in job {self.job} with probability {self.risk:.2f}; lead time "
                            f"{lead}. Top signals: {signals or 'none'}. "
                            f"Recommended: {self.action}."),
            "risk": f"{self.risk:.3f}",
            "lead_estimate_s": "" if self.lead_s is None else f"{self.lead_s:.0f}",
            "signals": signals,
            "action": self.action,
            "model_version": self.model_version,
        }

    def to_alertmanager(self, *, generator_url: str = "") -> dict[str, Any]:
        """This alert as one element of an Alertmanager webhook ``alerts[]``."""
        return {
            "status": self.state,
            "labels": self.labels(),
            "annotations": self.annotations(),
            "startsAt": iso(self.starts_at),
            "endsAt": iso(self.ends_at) if self.ends_at is not None else ZERO_TIME,
            "generatorURL": generator_url,
            "fingerprint": self.fingerprint,
        }


class AlertHistory(Base):
    """One transition or update of an alert."""

    __tablename__ = "alert_history"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    alert_id: Mapped[int] = mapped_column(ForeignKey("alerts.id"))
    ts: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))
    """``firing``, ``resolved``, ``escalated``, ``acknowledged`` or ``silenced``."""
    risk: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_alert_history_alert_ts", "alert_id", "ts"),)


class Silence(Base):
    """Mutes notifications of alerts whose labels equal every matcher, between two times."""

    __tablename__ = "silences"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    matchers: Mapped[str] = mapped_column(Text)
    """JSON object label -> value (job, node, gpu, peer, kind, severity, alertname)."""
    starts_at: Mapped[float] = mapped_column(Float)
    ends_at: Mapped[float] = mapped_column(Float, index=True)
    created_by: Mapped[str] = mapped_column(String(128))
    comment: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)

    def matches(self, labels: dict[str, str], now: float) -> bool:
        if not self.starts_at <= now < self.ends_at:
            return False
        return all(labels.get(k) == v for k, v in json.loads(self.matchers).items())


def iso(ts: float) -> str:
    """RFC 3339 UTC with milliseconds, as Alertmanager writes times."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def fingerprint(*, job: str, node: str, gpu: int | None, peer: str | None, kind: str) -> str:
    """Stable 16-hex id of an entity and kind (the width Alertmanager uses)."""
    key = "\x1f".join((job, node, "" if gpu is None else str(gpu), peer or "", kind))
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def severity_of(risk: float) -> str:
    return "critical" if risk >= CRITICAL_RISK else "warning"


def is_silenced(session: Session, alert: Alert, now: float | None = None) -> bool:
    now = time.time() if now is None else now
    active = session.scalars(select(Silence).where(Silence.ends_at > now)).all()
    return any(s.matches(alert.labels(), now) for s in active)


def _notify(session: Session, alert: Alert, now: float) -> None:
    """Enqueue deliveries of the alert's current state unless a silence mutes it."""
    if is_silenced(session, alert, now):
        session.add(AlertHistory(alert_id=alert.id, ts=now, state="silenced", risk=alert.risk))
        return
    outbox.enqueue(session, alert_id=alert.id, status=alert.state, labels=alert.labels(),
                   alert=alert.to_alertmanager())


def fire(session: Session, obs: RiskObservation) -> Alert:
    """Open (or update risk/lead/signals of) the alert of ``obs``'s entity and kind.

    A transition to firing, or an escalation warning -> critical of an unacknowledged alert,
    enqueues webhook deliveries in the caller's transaction.
    """
    fp = fingerprint(job=obs.job, node=obs.node, gpu=obs.gpu, peer=obs.peer, kind=obs.kind)
    alert = session.scalars(select(Alert).where(Alert.fingerprint == fp)).one_or_none()
    now = time.time()
    severity = severity_of(obs.risk)
    if alert is None:
        alert = Alert(fingerprint=fp, job=obs.job, node=obs.node, gpu=obs.gpu, peer=obs.peer,
                      kind=obs.kind, state="resolved", severity=severity, risk=obs.risk,
                      action=f"checkpoint and drain node {obs.node}", starts_at=obs.ts,
                      updated_at=now, model_version=obs.model_version)
        session.add(alert)
    was = alert.state
    escalated = was == "firing" and alert.severity == "warning" and severity == "critical"
    alert.risk, alert.lead_s, alert.severity = obs.risk, obs.lead_s, severity
    alert.signals = json.dumps(list(obs.signals))
    alert.model_version, alert.updated_at = obs.model_version, now
    if was != "firing":
        alert.state, alert.starts_at, alert.ends_at = "firing", obs.ts, None
        alert.acked_at = alert.acked_by = None
    session.flush()
    if was != "firing":
        session.add(AlertHistory(alert_id=alert.id, ts=obs.ts, state="firing", risk=obs.risk))
        _notify(session, alert, now)
    elif escalated and alert.acked_at is None:
        session.add(AlertHistory(alert_id=alert.id, ts=obs.ts, state="escalated", risk=obs.risk))
        _notify(session, alert, now)
    return alert


def resolve(session: Session, *, job: str, node: str, gpu: int | None, peer: str | None,
            kind: str, ts: float) -> Alert | None:
    """Move the entity's firing alert to resolved and enqueue 'resolved' deliveries."""
    fp = fingerprint(job=job, node=node, gpu=gpu, peer=peer, kind=kind)
    alert = session.scalars(select(Alert).where(Alert.fingerprint == fp)).one_or_none()
    if alert is None or alert.state != "firing":
        return None
    now = time.time()
    alert.state, alert.ends_at, alert.updated_at = "resolved", ts, now
    session.add(AlertHistory(alert_id=alert.id, ts=ts, state="resolved", risk=alert.risk))
    session.flush()
    _notify(session, alert, now)
    return alert


def firing_alerts(session: Session, *, job: str | None = None) -> list[Alert]:
    """Every firing alert (of ``job``), highest risk first."""
    query = select(Alert).where(Alert.state == "firing")
    if job is not None:
        query = query.where(Alert.job == job)
    return list(session.scalars(query.order_by(Alert.risk.desc(), Alert.id)))


def acknowledge(session: Session, alert: Alert, *, by: str) -> Alert:
    """Record that someone is on it; an acknowledged alert is not re-notified on escalation."""
    now = time.time()
    alert.acked_at, alert.acked_by = now, by
    session.add(AlertHistory(alert_id=alert.id, ts=now, state="acknowledged", risk=alert.risk))
    return alert
