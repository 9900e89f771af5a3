"""Optional push of alerts to a Prometheus Alertmanager's ``POST /api/v2/alerts``.

Alertmanager expects its clients to keep re-sending what fires (it resolves an alert whose
``endsAt`` passes unrenewed), so this is a reconciler, not an outbox: whenever the alert table
changes, and every ``alertmanager_resend_s`` besides, it posts every firing alert (``endsAt``
four resend periods ahead, as Prometheus does) and the recently resolved ones (``endsAt`` their
end). A push that fails is repeated on the next round, so nothing is lost while it is down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import func, or_, select

from api.alert_state import Alert, iso
from api.prom import service_metrics
from api.settings import Settings
from collector.store import Store

log = logging.getLogger("foreshock.alertmanager")


def _mark(store: Store) -> tuple[float | None, int]:
    """Changes whenever an alert is added or updated."""
    with store.session() as session:
        row = session.execute(select(func.max(Alert.updated_at), func.count(Alert.id))).one()
        return row[0], int(row[1])


def postable_alerts(store: Store, settings: Settings, now: float) -> list[dict[str, Any]]:
    """Firing alerts and those resolved within the last resend periods, in API v2 form."""
    horizon = 4 * settings.alertmanager_resend_s
    with store.session() as session:
        alerts = session.scalars(select(Alert).where(or_(
            Alert.state == "firing", Alert.updated_at >= now - horizon))).all()
        base = settings.external_url.rstrip("/")
        return [{
            "labels": a.labels(),
            "annotations": a.annotations(),
            "startsAt": iso(a.starts_at),
            "endsAt": iso(now + horizon if a.state == "firing" else (a.ends_at or now)),
            "generatorURL": f"{base}/api/v1/alerts/{a.id}",
        } for a in alerts]


async def run(app: FastAPI) -> None:
    """Keep the Alertmanager at ``settings.alertmanager_url`` in step with the alert table."""
    settings: Settings = app.state.settings
    if not settings.alertmanager_url:
        return
    url = settings.alertmanager_url.rstrip("/") + "/api/v2/alerts"
    store: Store = app.state.store
    http: httpx.AsyncClient = app.state.http
    metrics = service_metrics(app)
    pushed_mark: tuple[float | None, int] | None = None
    pushed_at = 0.0
    failures = 0
    while True:
        try:
            mark = await asyncio.to_thread(_mark, store)
            now = time.time()
            if mark != pushed_mark or now - pushed_at >= settings.alertmanager_resend_s:
                alerts = await asyncio.to_thread(postable_alerts, store, settings, now)
                if alerts:
                    response = await http.post(url, json=alerts, timeout=settings.webhook_timeout_s)
                    response.raise_for_status()
                pushed_mark, pushed_at, failures = mark, now, 0
                metrics.alertmanager_pushes.labels("ok").inc()
        except Exception as exc:  # Alertmanager down or store hiccup: the next round resends
            failures += 1
            metrics.alertmanager_pushes.labels("error").inc()
            log.warning("push to %s failed (%s); retrying", url, exc)
            await asyncio.sleep(min(settings.webhook_backoff_max_s,
                                    settings.webhook_backoff_base_s * 2 ** min(failures, 16)))
        await asyncio.sleep(settings.webhook_poll_interval_s)
