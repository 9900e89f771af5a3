"""Background maintenance: rollups and retention every ``settings.maintenance_interval_s``."""

from __future__ import annotations

import asyncio
import logging
import time

from fastapi import FastAPI

from collector.rollup import roll_up_and_expire

log = logging.getLogger("foreshock.maintenance")


async def run(app: FastAPI) -> None:
    """Runs for the service's lifetime: one retention pass per interval."""
    settings = app.state.settings
    while True:
        try:
            await asyncio.to_thread(
                roll_up_and_expire, app.state.store, now=time.time(),
                raw_retention_s=settings.raw_retention_s,
                rollup_retention_s=settings.rollup_retention_s)
        except Exception:
            # A failed pass (locked database, lost connection) is retried next interval;
            # ingest and queries must keep working meanwhile.
            log.exception("maintenance pass failed; retrying in %.0f s",
                          settings.maintenance_interval_s)
        await asyncio.sleep(settings.maintenance_interval_s)
