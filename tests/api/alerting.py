"""Helpers the alert tests share: observations, fast delivery settings, subscriptions."""

from __future__ import annotations

import time
from typing import Any

from api.alert_state import RiskObservation
from api.settings import Settings
from api.subscriptions import Subscription
from collector.store import Store

ADMIN = "admin-token-for-tests"
SECRET = "s3cret-for-the-webhook-tests"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
FAST = {"webhook_poll_interval_s": 0.05, "webhook_timeout_s": 0.5,
        "webhook_backoff_base_s": 0.1, "webhook_backoff_max_s": 0.4}
"""Delivery settings that keep retry tests short."""


def observation(**overrides: Any) -> RiskObservation:
    fields: dict[str, Any] = {
        "job": "llama", "node": "node-07", "gpu": 3, "peer": None, "kind": "gpu",
        "risk": 0.91, "lead_s": 720.0, "signals": ("ecc.sbe rising", "temp 91C"),
        "model_version": "m-test", "ts": time.time()}
    return RiskObservation(**{**fields, **overrides})


def settings(db_url: str, **overrides: Any) -> Settings:
    return Settings(db_url=db_url, **{"admin_token": ADMIN, **FAST, **overrides})


def subscribe(store: Store, url: str, *, name: str = "oncall", secret: str = SECRET,
              filters: str = "{}") -> int:
    with store.session() as session:
        sub = Subscription(name=name, url=url, secret=secret, filters=filters, enabled=True,
                           source="api", created_at=time.time(), updated_at=time.time())
        session.add(sub)
        session.flush()
        return sub.id
