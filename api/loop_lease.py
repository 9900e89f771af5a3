"""The loop lease: with several service workers on one store, exactly one runs the loops.

Scoring, webhook delivery and maintenance must not run once per uvicorn worker: two scorers
would race to open the same alert and two deliverers would send each outbox row twice.
SQLite stores use an flock beside the database file; PostgreSQL stores a session-level
advisory lock. Both are released by the operating system or the server if the holder dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import IO

from sqlalchemy import Connection, text

from collector.store import Store

_PG_LOCK_KEY = 0x466F7265  # "Fore": one lock per database, shared by every worker on it.


class LoopLease:
    """Held by at most one process per store at a time."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._file: IO[bytes] | None = None
        self._conn: Connection | None = None
        self.held = False

    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it; never blocks."""
        if self.held:
            return True
        if self._store.is_sqlite:
            path = self._store.engine.url.database
            if not path or path == ":memory:":
                self.held = True  # a private in-memory store has no other workers
                return True
            handle = open(f"{os.path.abspath(path)}.loops-lock", "ab")  # noqa: SIM115
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                return False
            self._file, self.held = handle, True
            return True
        conn = self._store.engine.connect()
        got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
                   .scalar())
        conn.commit()
        if not got:
            conn.close()
            return False
        self._conn, self.held = conn, True
        return True

    def release(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
        if self._conn is not None:
            with contextlib.suppress(Exception):  # the connection may already be gone
                self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK_KEY})
                self._conn.commit()
            self._conn.close()
            self._conn = None
        self.held = False
