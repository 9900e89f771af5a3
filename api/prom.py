"""``GET /metrics`` in the Prometheus exposition format, from a registry owned by each app.

Gauges that describe the store (``foreshock_risk`` per entity, active alerts, the outbox
backlog) are read from it at scrape time, so every replica serving the same store agrees.
Counters of what this process did (ingest, deliveries) live on ``service_metrics(app)``:

    service_metrics(request.app).ingest_points.inc(n)

Scrape with ``honor_labels: true``: the series carry the training ``job`` as a label, which
Prometheus would otherwise rename to ``exported_job``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import exc, func, select, text

from api.alert_state import Alert
from api.outbox import PENDING, Delivery
from collector.store import Store

RISK_MAX_AGE_S = 3600.0
"""Entities whose newest score is older than this (behind the newest score) are not exported."""

_LATEST_RISK = text("""
SELECT r.job, r.node, r.gpu, r.peer, r.kind, r.risk FROM risk_scores r
JOIN (SELECT job, node, COALESCE(gpu, -1) AS g, COALESCE(peer, '') AS p, kind, MAX(ts) AS mts
      FROM risk_scores WHERE ts >= (SELECT MAX(ts) FROM risk_scores) - :max_age
      GROUP BY job, node, COALESCE(gpu, -1), COALESCE(peer, ''), kind) l
  ON r.job = l.job AND r.node = l.node AND COALESCE(r.gpu, -1) = l.g
 AND COALESCE(r.peer, '') = l.p AND r.kind = l.kind AND r.ts = l.mts
""")


class StoreCollector(Collector):
    """Reads the store's current risk and alert state at each scrape."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def collect(self) -> Iterator[Metric]:
        store: Store | None = getattr(self.app.state, "store", None)
        if store is None:
            return
        risk = GaugeMetricFamily(
            "foreshock_risk", "Predicted probability of failure within the horizon (newest score).",
            labels=["job", "node", "gpu", "peer", "kind"])
        try:
            with store.engine.connect() as conn:
                rows = conn.execute(_LATEST_RISK, {"max_age": RISK_MAX_AGE_S}).all()
        except exc.DBAPIError:
            rows = []  # risk_scores not created yet (an older schema): export no risk
        seen: set[tuple[str, ...]] = set()
        for job, node, gpu, peer, kind, value in rows:
            labels = (job, node, "" if gpu is None else str(gpu), peer or "", kind)
            if labels not in seen:  # two scores with the same newest ts: keep one
                seen.add(labels)
                risk.add_metric(list(labels), float(value))
        yield risk

        active = GaugeMetricFamily("foreshock_alerts_active", "Firing alerts.",
                                   labels=["severity", "kind"])
        with store.session() as session:
            counts = session.execute(
                select(Alert.severity, Alert.kind, func.count())
                .where(Alert.state == "firing").group_by(Alert.severity, Alert.kind)).all()
            pending = session.scalar(
                select(func.count()).select_from(Delivery).where(Delivery.state == PENDING))
        for severity, kind, n in counts:
            active.add_metric([severity, kind], float(n))
        yield active
        backlog = GaugeMetricFamily("foreshock_webhook_outbox_pending",
                                    "Webhook deliveries not yet accepted by their receiver.")
        backlog.add_metric([], float(pending or 0))
        yield backlog


class ServiceMetrics:
    """This process's counters, registered in the app's own registry."""

    def __init__(self, app: FastAPI) -> None:
        self.registry = CollectorRegistry()
        self.ingest_requests = Counter(
            "foreshock_ingest_requests", "OTLP export requests, by result (ok, rejected).",
            ["result"], registry=self.registry)
        self.ingest_points = Counter(
            "foreshock_ingest_points", "Data points written to the store.",
            registry=self.registry)
        self.deliveries = Counter(
            "foreshock_webhook_deliveries",
            "Webhook delivery attempts, by result (delivered, retry, rejected, cancelled).",
            ["result"], registry=self.registry)
        self.delivery_latency = Histogram(
            "foreshock_webhook_delivery_latency_seconds",
            "From an alert's transition to its receiver accepting the webhook.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600),
            registry=self.registry)
        self.alertmanager_pushes = Counter(
            "foreshock_alertmanager_pushes", "Pushes to Alertmanager, by result (ok, error).",
            ["result"], registry=self.registry)
        self.registry.register(StoreCollector(app))


_lock = threading.Lock()


def service_metrics(app: FastAPI) -> ServiceMetrics:
    """The app's metrics, made on first use (an app's registry is its own: no globals)."""
    with _lock:
        metrics: ServiceMetrics | None = getattr(app.state, "metrics", None)
        if metrics is None:
            metrics = app.state.metrics = ServiceMetrics(app)
        return metrics


router = APIRouter(tags=["service"])


@router.get("/metrics", response_class=Response)
def metrics(request: Request) -> Response:
    """Prometheus exposition: risk per entity, active alerts, ingest and delivery counters."""
    return Response(generate_latest(service_metrics(request.app).registry),
                    media_type=CONTENT_TYPE_LATEST)
