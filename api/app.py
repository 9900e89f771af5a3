"""The app factory: ``create_app(settings)`` builds the whole service; nothing runs at import."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import httpx
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from api import (
    alerts,
    decisions,
    ingest,
    maintenance,
    prom,
    queries,
    risk,
    scoring,
    subscriptions,
    webhooks,
)
from api.loop_lease import LoopLease
from api.settings import Settings
from collector.store import Store

if TYPE_CHECKING:
    from predictor.scorer import Model

log = logging.getLogger("foreshock")

BackgroundLoop = Callable[[FastAPI], Coroutine[Any, Any, None]]

# Each loop runs for the service's lifetime; each logs and carries on after its own errors.
BACKGROUND_LOOPS: tuple[BackgroundLoop, ...] = (maintenance.run, scoring.run, webhooks.run)
LEASE_RETRY_S = 2.0


async def _run_loops_when_leader(app: FastAPI) -> None:
    """Run the background loops in the one process that holds the store's loop lease."""
    lease = LoopLease(app.state.store)
    app.state.loop_lease = lease
    try:
        if not await asyncio.to_thread(lease.try_acquire):
            log.info("another worker runs the background loops on this store; standing by")
            while not await asyncio.to_thread(lease.try_acquire):
                await asyncio.sleep(LEASE_RETRY_S)
        # return_exceptions: one loop failing must not stop the others.
        await asyncio.gather(*(loop(app) for loop in BACKGROUND_LOOPS), return_exceptions=True)
    finally:
        lease.release()


def _as_json(value: Any) -> Any:
    """``value`` with every float JSON cannot hold (NaN, +-inf) replaced by its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_json(v) for v in value]
    return value


def create_app(settings: Settings | None = None, *, store: Store | None = None,
               model: Model | None = None) -> FastAPI:
    """Build the service. ``store`` lets a caller (a test, the demo) hand over an open store,
    ``model`` a model already loaded (``foreshock serve`` loads a user's model first, to refuse a
    bad file before serving)."""
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_store = store is None
        app.state.store = store or Store.open(settings.db_url)
        app.state.http = httpx.AsyncClient(timeout=httpx.Timeout(10.0))
        tasks = [asyncio.create_task(_run_loops_when_leader(app), name="background-loops")]
        log.info("foreshock serving with store %s", app.state.store.engine.url.render_as_string())
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await app.state.http.aclose()
            if own_store:
                app.state.store.close()

    app = FastAPI(
        title="Foreshock",
        version="0.1.0",
        summary="Predictive-failure monitoring for GPU training fleets.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.model = model
    for module in (ingest, queries, risk, alerts, subscriptions, decisions, prom):
        app.include_router(module.router)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """FastAPI's 422, with a NaN or infinite input it echoes written as text: JSON has no
        such number, and echoing one (a body saying NaN) failed the answer with a 500."""
        return JSONResponse(status_code=422,
                            content={"detail": _as_json(jsonable_encoder(exc.errors()))})

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    return app
