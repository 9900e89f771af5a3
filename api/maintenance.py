"""Background maintenance every ``settings.maintenance_interval_s``: compaction of settled
points (PostgreSQL), then rollups and retention."""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial

from fastapi import FastAPI

from collector.compact import compact_points
from collector.rollup import roll_up_and_expire

log = logging.getLogger("foreshock.maintenance")


async def run(app: FastAPI) -> None:
    """Runs for the service's lifetime: one compaction and retention pass per interval."""
    settings, store = app.state.settings, app.state.store
    steps = (
        partial(compact_points, store, settle_s=settings.compact_after_s),
        partial(roll_up_and_expire, store, raw_retention_s=settings.raw_retention_s,
                rollup_retention_s=settings.rollup_retention_s),
    )
    while True:
        for step in steps:
            try:
                await asyncio.to_thread(step, now=time.time())
            except Exception:
                # A failed step (locked database, lost connection) is retried next interval;
                # ingest, queries and the other step must keep working meanwhile.
                log.exception("maintenance step %s failed; retrying in %.0f s",
                              step.func.__name__, settings.maintenance_interval_s)
        await asyncio.sleep(settings.maintenance_interval_s)
