"""Webhook delivery: Alertmanager-format payloads, signed, from the durable outbox.

Each POST carries, as GitHub and Stripe do:

- ``X-Foreshock-Timestamp``: Unix seconds when this attempt was signed;
- ``X-Foreshock-Signature``: ``v1=<hex HMAC-SHA256(secret, f"{timestamp}.{body}")>``;
- ``X-Foreshock-Delivery``: the idempotency key, the same on every retry of one delivery.

A receiver verifies with ``verify_signature`` (or its own three lines of HMAC): recompute the
HMAC over the timestamp, a dot and the raw body bytes, compare in constant time, and reject
timestamps further than a tolerance from its clock (replays); it drops keys it has seen.

Delivery is at least once: each subscription has its own worker that sends its deliveries in
order, retries failures with exponential backoff and jitter, and never waits on another
receiver. Rows live in the store, so a restart resumes where the last process stopped.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI

from api import alertmanager
from api.outbox import CANCELLED, DELIVERED, PENDING, REJECTED, Delivery, due_subscriptions, head
from api.prom import service_metrics
from api.settings import Settings
from api.subscriptions import Subscription, SubscriptionFileError, load_file, sync_file
from collector.store import Store

log = logging.getLogger("foreshock.webhooks")

TIMESTAMP_HEADER = "X-Foreshock-Timestamp"
SIGNATURE_HEADER = "X-Foreshock-Signature"
DELIVERY_HEADER = "X-Foreshock-Delivery"
RETRYABLE = frozenset({408, 425, 429})


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Foreshock-Signature`` value of ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"v1={mac.hexdigest()}"


def verify_signature(secret: str, timestamp: str | int, body: bytes, signature: str,
                     tolerance_s: float = 300.0, *, now: float | None = None) -> bool:
    """True if ``signature`` (the header value) signs ``body`` at a ``timestamp`` no further than
    ``tolerance_s`` from now. Pass the raw body bytes, before any JSON parsing."""
    try:
        ts = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((time.time() if now is None else now) - ts) > tolerance_s:
        return False
    expected = sign(secret, ts, body)
    return any(hmac.compare_digest(expected, part.strip()) for part in signature.split(","))


def build_message(alerts: list[dict[str, Any]], *, receiver: str,
                  external_url: str) -> dict[str, Any]:
    """Alertmanager's webhook body (``version`` 4) for one group of alerts."""
    common_labels = _common([a["labels"] for a in alerts])
    common_annotations = _common([a["annotations"] for a in alerts])
    group_labels = {k: v for k, v in common_labels.items() if k in ("alertname", "job", "node")}
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    group_key = "{}:{" + ", ".join(f'{k}="{v}"' for k, v in sorted(group_labels.items())) + "}"
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": status,
        "receiver": receiver,
        "groupLabels": group_labels,
        "commonLabels": common_labels,
        "commonAnnotations": common_annotations,
        "externalURL": external_url,
        "alerts": alerts,
    }


def _common(dicts: list[dict[str, str]]) -> dict[str, str]:
    first = dicts[0] if dicts else {}
    return {k: v for k, v in first.items() if all(d.get(k) == v for d in dicts)}


def backoff_s(attempts: int, settings: Settings) -> float:
    """Delay before attempt ``attempts + 1``: doubling from the base, capped, half jittered."""
    delay = min(settings.webhook_backoff_max_s,
                settings.webhook_backoff_base_s * 2 ** max(attempts - 1, 0))
    return delay * random.uniform(0.5, 1.0)


@dataclass(frozen=True, kw_only=True)
class _Attempt:
    delivery_id: int
    key: str
    created_at: float
    next_attempt_at: float
    attempts: int
    url: str
    secret: str
    body: bytes


def _next_attempt(store: Store, sub_id: int, external_url: str) -> _Attempt | None:
    """The subscription's next delivery, with its body; cancels what a deleted one was owed."""
    with store.session() as session:
        delivery = head(session, sub_id)
        if delivery is None:
            return None
        sub = session.get(Subscription, sub_id)
        if sub is None or not sub.enabled:
            for row in session.query(Delivery).filter_by(subscription_id=sub_id, state=PENDING):
                row.state = CANCELLED
                row.last_error = "subscription deleted" if sub is None else "subscription disabled"
            return None
        alert = delivery.alert_payload()
        alert["generatorURL"] = f"{external_url.rstrip('/')}/api/v1/alerts/{delivery.alert_id}"
        body = json.dumps(build_message([alert], receiver=sub.name, external_url=external_url),
                          separators=(",", ":")).encode()
        return _Attempt(delivery_id=delivery.id, key=delivery.key,
                        created_at=delivery.created_at, next_attempt_at=delivery.next_attempt_at,
                        attempts=delivery.attempts, url=sub.url, secret=sub.secret, body=body)


def _record(store: Store, delivery_id: int, *, state: str, error: str | None,
            retry_at: float | None) -> None:
    with store.session() as session:
        row = session.get(Delivery, delivery_id)
        if row is None or row.state != PENDING:
            return
        row.attempts += 1
        row.state, row.last_error = state, error
        if state == DELIVERED:
            row.delivered_at = time.time()
        if retry_at is not None:
            row.next_attempt_at = retry_at


async def _post(http: httpx.AsyncClient, attempt: _Attempt, timeout_s: float) -> tuple[str, str]:
    """POST one attempt; (outcome, error) with outcome delivered, retry or rejected."""
    ts = int(time.time())
    headers = {"Content-Type": "application/json", "User-Agent": "Foreshock-Webhook/1",
               TIMESTAMP_HEADER: str(ts), SIGNATURE_HEADER: sign(attempt.secret, ts, attempt.body),
               DELIVERY_HEADER: attempt.key}
    try:
        response = await http.post(attempt.url, content=attempt.body, headers=headers,
                                   timeout=timeout_s)
    except httpx.HTTPError as exc:
        return "retry", f"{type(exc).__name__}: {exc}"
    if response.is_success:
        return "delivered", ""
    error = f"HTTP {response.status_code}"
    if response.status_code >= 500 or response.status_code in RETRYABLE:
        return "retry", error
    return "rejected", error


async def _drain(app: FastAPI, sub_id: int) -> None:
    """Deliver one subscription's pending rows in order until none is left."""
    settings: Settings = app.state.settings
    store: Store = app.state.store
    metrics = service_metrics(app)
    while True:
        attempt = await asyncio.to_thread(_next_attempt, store, sub_id, settings.external_url)
        if attempt is None:
            return
        wait = attempt.next_attempt_at - time.time()
        if wait > 0:
            # Re-read after a short nap rather than the full wait: the row may be cancelled.
            await asyncio.sleep(min(wait, 1.0))
            continue
        outcome, error = await _post(app.state.http, attempt, settings.webhook_timeout_s)
        metrics.deliveries.labels(outcome).inc()
        if outcome == "delivered":
            metrics.delivery_latency.observe(max(time.time() - attempt.created_at, 0.0))
            await asyncio.to_thread(_record, store, attempt.delivery_id, state=DELIVERED,
                                    error=None, retry_at=None)
        elif outcome == "rejected":
            # The receiver refuses this body; retrying the same bytes cannot change its mind.
            log.error("webhook delivery %s to subscription %d rejected: %s; not retrying",
                      attempt.key, sub_id, error)
            await asyncio.to_thread(_record, store, attempt.delivery_id, state=REJECTED,
                                    error=error, retry_at=None)
        else:
            delay = backoff_s(attempt.attempts + 1, settings)
            log.warning("webhook delivery %s to subscription %d failed (%s); retry in %.1f s",
                        attempt.key, sub_id, error, delay)
            await asyncio.to_thread(_record, store, attempt.delivery_id, state=PENDING,
                                    error=error, retry_at=time.time() + delay)


def _load_declared(settings: Settings, store: Store) -> None:
    if settings.webhooks_file is None:
        return
    try:
        specs = load_file(settings.webhooks_file)
    except SubscriptionFileError as exc:
        log.error("%s; declared subscriptions left as they were", exc)
        return
    with store.session() as session:
        sync_file(session, specs)
    log.info("webhooks_file %s: %d subscription(s) applied", settings.webhooks_file, len(specs))


async def run(app: FastAPI) -> None:
    """The delivery loop: a worker per receiver with due deliveries, for the app's lifetime."""
    settings: Settings = app.state.settings
    store: Store = app.state.store
    try:
        await asyncio.to_thread(_load_declared, settings, store)
    except Exception:  # a bad file or store hiccup must not stop deliveries of the others
        log.exception("applying webhooks_file failed")
    tasks: dict[int, asyncio.Task[None]] = {}
    side = [asyncio.create_task(alertmanager.run(app), name="alertmanager")]
    try:
        while True:
            try:
                due = await asyncio.to_thread(_due, store)
                for sub_id in due:
                    if sub_id not in tasks or tasks[sub_id].done():
                        tasks[sub_id] = asyncio.create_task(_guarded(app, sub_id))
            except Exception:  # the store may be briefly unavailable; the outbox keeps the work
                log.exception("webhook delivery loop failed; retrying")
            await asyncio.sleep(settings.webhook_poll_interval_s)
    finally:
        for task in [*tasks.values(), *side]:
            task.cancel()
        await asyncio.gather(*tasks.values(), *side, return_exceptions=True)


def _due(store: Store) -> list[int]:
    with store.session() as session:
        return due_subscriptions(session, time.time())


async def _guarded(app: FastAPI, sub_id: int) -> None:
    try:
        await _drain(app, sub_id)
    except asyncio.CancelledError:
        raise
    except Exception:  # a worker's crash must not stop the loop; the row stays pending
        log.exception("webhook worker for subscription %d failed; it restarts on next poll",
                      sub_id)
