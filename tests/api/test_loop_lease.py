"""Several workers on one store: exactly one runs scoring, delivery and maintenance."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from api import app as app_module
from api.app import create_app
from api.settings import Settings


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_one_worker_runs_the_loops_and_another_takes_over(store_url: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(app_module, "LEASE_RETRY_S", 0.1)
    settings = Settings(db_url=store_url, maintenance_interval_s=3600)
    leader = TestClient(create_app(settings)).__enter__()
    standby = TestClient(create_app(settings)).__enter__()
    try:
        assert _wait_for(lambda: leader.app.state.loop_lease.held)  # type: ignore[attr-defined]
        time.sleep(0.5)
        # The stand-by worker serves requests but does not score or deliver a second time.
        assert standby.get("/healthz").status_code == 200
        assert not standby.app.state.loop_lease.held  # type: ignore[attr-defined]
        leader.__exit__(None, None, None)  # the leading worker goes away
        assert _wait_for(lambda: standby.app.state.loop_lease.held)  # type: ignore[attr-defined]
    finally:
        standby.__exit__(None, None, None)
