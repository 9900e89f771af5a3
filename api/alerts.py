"""Alerts and silences over HTTP: list and inspect alerts (open), acknowledge them and manage
silences (admin token)."""

from __future__ import annotations

import json
import time
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Query, status
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.alert_state import Alert, AlertHistory, Silence, acknowledge, is_silenced
from api.deps import get_store, require_admin
from api.outbox import Delivery
from collector.store import Store

router = APIRouter(tags=["alerts"])
StoreDep = Annotated[Store, Depends(get_store)]
Admin = [Depends(require_admin)]
MATCHER_LABELS = ("alertname", "severity", "job", "node", "gpu", "peer", "kind")


class AlertOut(BaseModel):
    """An alert with what on-call needs: risk, lead time, signals and what to do."""

    id: int
    fingerprint: str
    state: str
    severity: str
    job: str
    node: str
    gpu: int | None
    peer: str | None
    kind: str
    risk: float
    lead_s: float | None
    signals: list[str]
    action: str
    model_version: str
    starts_at: float
    ends_at: float | None
    updated_at: float
    acked_at: float | None
    acked_by: str | None
    silenced: bool
    labels: dict[str, str]

    @classmethod
    def of(cls, a: Alert, *, silenced: bool) -> AlertOut:
        return cls(id=a.id, fingerprint=a.fingerprint, state=a.state, severity=a.severity,
                   job=a.job, node=a.node, gpu=a.gpu, peer=a.peer, kind=a.kind, risk=a.risk,
                   lead_s=a.lead_s, signals=a.signal_list, action=a.action,
                   model_version=a.model_version, starts_at=a.starts_at, ends_at=a.ends_at,
                   updated_at=a.updated_at, acked_at=a.acked_at, acked_by=a.acked_by,
                   silenced=silenced, labels=a.labels())


class HistoryOut(BaseModel):
    ts: float
    state: str
    risk: float


class DeliveryOut(BaseModel):
    """One webhook notification of the alert (the receiver's secret is never shown)."""

    key: str
    subscription_id: int
    status: str
    state: str
    attempts: int
    created_at: float
    delivered_at: float | None
    last_error: str | None


class AlertDetail(AlertOut):
    history: list[HistoryOut]
    deliveries: list[DeliveryOut]


class AckIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field(min_length=1, max_length=128, description="Who is handling the alert.")


class SilenceIn(BaseModel):
    """Mute alerts whose labels equal all ``matchers`` from ``starts_at`` (default now) until
    ``ends_at`` or for ``duration_s``."""

    # JSON bodies may say NaN or Infinity: NaN failed with a 500, Infinity muted for ever and
    # read back as null.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    matchers: dict[str, str] = Field(min_length=1)
    starts_at: float | None = None
    ends_at: float | None = None
    duration_s: float | None = Field(None, gt=0)
    created_by: str = Field(min_length=1, max_length=128)
    comment: str = ""

    @model_validator(mode="after")
    def _check(self) -> SilenceIn:
        unknown = sorted(set(self.matchers) - set(MATCHER_LABELS))
        if unknown:
            raise ValueError(f"matchers: unknown label(s) {unknown}; use {list(MATCHER_LABELS)}")
        if (self.ends_at is None) == (self.duration_s is None):
            raise ValueError("give exactly one of ends_at and duration_s")
        start = self.starts_at if self.starts_at is not None else time.time()
        if self.ends_at is not None and self.ends_at <= start:
            raise ValueError("ends_at must be after starts_at")
        return self


class SilenceOut(BaseModel):
    id: int
    matchers: dict[str, str]
    starts_at: float
    ends_at: float
    created_by: str
    comment: str
    created_at: float
    active: bool

    @classmethod
    def of(cls, s: Silence, now: float) -> SilenceOut:
        return cls(id=s.id, matchers=json.loads(s.matchers), starts_at=s.starts_at,
                   ends_at=s.ends_at, created_by=s.created_by, comment=s.comment,
                   created_at=s.created_at, active=s.starts_at <= now < s.ends_at)


def _alert(session: Session, alert_id: int) -> Alert:
    alert = session.get(Alert, alert_id)
    if alert is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no alert with id {alert_id}")
    return alert


@router.get("/api/v1/alerts")
def list_alerts(
    store: StoreDep,
    state: Literal["firing", "resolved"] | None = None,
    job: str | None = None,
    node: str | None = None,
    kind: Literal["gpu", "link", "node"] | None = None,
    limit: Annotated[int, Query(gt=0, le=10_000)] = 500,
) -> list[AlertOut]:
    """Alerts, firing first, then most recently updated."""
    query = select(Alert)
    for column, value in ((Alert.state, state), (Alert.job, job), (Alert.node, node),
                          (Alert.kind, kind)):
        if value is not None:
            query = query.where(column == value)
    query = query.order_by((Alert.state == "firing").desc(), Alert.updated_at.desc())
    with store.session() as session:
        silences = session.scalars(select(Silence).where(Silence.ends_at > time.time())).all()
        now = time.time()
        return [AlertOut.of(a, silenced=any(s.matches(a.labels(), now) for s in silences))
                for a in session.scalars(query.limit(limit))]


@router.get("/api/v1/alerts/{alert_id}")
def get_alert(alert_id: int, store: StoreDep) -> AlertDetail:
    """One alert with its history and its webhook deliveries."""
    with store.session() as session:
        alert = _alert(session, alert_id)
        history = session.scalars(select(AlertHistory).where(AlertHistory.alert_id == alert_id)
                                  .order_by(AlertHistory.ts, AlertHistory.id))
        deliveries = session.scalars(select(Delivery).where(Delivery.alert_id == alert_id)
                                     .order_by(Delivery.id))
        return AlertDetail(
            **AlertOut.of(alert, silenced=is_silenced(session, alert)).model_dump(),
            history=[HistoryOut(ts=h.ts, state=h.state, risk=h.risk) for h in history],
            deliveries=[DeliveryOut(key=d.key, subscription_id=d.subscription_id,
                                    status=d.status, state=d.state, attempts=d.attempts,
                                    created_at=d.created_at, delivered_at=d.delivered_at,
                                    last_error=d.last_error) for d in deliveries])


@router.post("/api/v1/alerts/{alert_id}/ack", dependencies=Admin)
def ack_alert(alert_id: int, body: AckIn, store: StoreDep) -> AlertOut:
    """Acknowledge a firing alert: someone is on it; escalations are not re-notified."""
    with store.session() as session:
        alert = _alert(session, alert_id)
        if alert.state != "firing":
            raise HTTPException(status.HTTP_409_CONFLICT,
                                f"alert {alert_id} is {alert.state}; only firing alerts are acked")
        acknowledge(session, alert, by=body.by)
        return AlertOut.of(alert, silenced=is_silenced(session, alert))


@router.get("/api/v1/silences", dependencies=Admin, tags=["silences"])
def list_silences(store: StoreDep, active: bool | None = None) -> list[SilenceOut]:
    now = time.time()
    with store.session() as session:
        out = [SilenceOut.of(s, now)
               for s in session.scalars(select(Silence).order_by(Silence.id.desc()))]
    return [s for s in out if active is None or s.active == active]


@router.post("/api/v1/silences", dependencies=Admin, tags=["silences"],
             status_code=status.HTTP_201_CREATED)
def create_silence(body: SilenceIn, store: StoreDep) -> SilenceOut:
    """Mute matching alerts' notifications (their state is still kept and listed)."""
    now = time.time()
    start = body.starts_at if body.starts_at is not None else now
    end = body.ends_at if body.ends_at is not None else start + (body.duration_s or 0.0)
    with store.session() as session:
        silence = Silence(matchers=json.dumps(body.matchers), starts_at=start, ends_at=end,
                          created_by=body.created_by, comment=body.comment, created_at=now)
        session.add(silence)
        session.flush()
        return SilenceOut.of(silence, now)


@router.get("/api/v1/silences/{silence_id}", dependencies=Admin, tags=["silences"])
def get_silence(silence_id: int, store: StoreDep) -> SilenceOut:
    with store.session() as session:
        silence = session.get(Silence, silence_id)
        if silence is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no silence with id {silence_id}")
        return SilenceOut.of(silence, time.time())


@router.delete("/api/v1/silences/{silence_id}", dependencies=Admin, tags=["silences"])
def expire_silence(silence_id: int, store: StoreDep) -> SilenceOut:
    """End a silence now (it stays listed, inactive)."""
    now = time.time()
    with store.session() as session:
        silence = session.get(Silence, silence_id)
        if silence is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no silence with id {silence_id}")
        silence.ends_at = min(silence.ends_at, now)
        return SilenceOut.of(silence, now)
