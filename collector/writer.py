"""The store's write path: a :class:`~collector.batch.Batch` into the tables, in bulk.

Entity and series ids come from the :class:`~collector.catalog.Catalog`, so a steady stream of
samples costs one bulk statement per table (collector/sqlite_rows.py, collector/pg_copy.py).
Every write is an upsert, so a retried request stores nothing twice, and a request's points are
committed before it returns, in a transaction that concurrent requests share (group commit).
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine

from collector.batch import Batch
from collector.catalog import Catalog, upsert_keys
from collector.group_commit import GroupCommit
from collector.pg_copy import write_pg
from collector.rows import Rows, build_rows, concat_rows, merge_gpu_rows, merge_point_rows
from collector.sqlite_rows import write_sqlite
from collector.write_relay import RelayedWriteError, WriteRelay


class StoreUnavailableError(RuntimeError):
    """The database refused or lost the connection (locked, down, restarting): retry later."""


class CardinalityError(LookupError):
    """A job would exceed its series-cardinality limit; carries the job and the limit."""

    def __init__(self, job: str, limit: int) -> None:
        super().__init__(f"job {job!r} reached max_series_per_job={limit} (non-canonical series);"
                         " new series were refused")
        self.job = job
        self.limit = limit


@dataclass(frozen=True, kw_only=True)
class WriteResult:
    """What a write stored and what it refused."""

    accepted: int
    rejected: int
    error_message: str


class Writer:
    """Bulk, idempotent writes of batches into one store's engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sqlite = engine.dialect.name == "sqlite"
        self.catalog = Catalog(self.transaction)
        self._lock = threading.RLock()
        self._depth = 0
        self._lock_fd: int | None = None
        database = engine.url.database if self.sqlite else None
        if database and database != ":memory:":
            self._lock_path: str | None = database + ".write-lock"
        else:
            self._lock_path = None
        self._commit: GroupCommit[Rows] = GroupCommit(self._flush, self.exclusive)
        self._relay = (WriteRelay(database, self._commit.submit, self._dbapi_unavailable)
                       if self._lock_path is not None and database else None)

    def close(self) -> None:
        """Stop writing for other processes and release the file locks (SQLite)."""
        if self._relay is not None:
            self._relay.close()
        with self._lock:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    @property
    def _dbapi_unavailable(self) -> type[Exception]:
        return self.engine.dialect.dbapi.OperationalError  # type: ignore[union-attr]

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """One writer at a time across threads and worker processes (SQLite only).

        SQLite allows one writer; left to its busy handler, waiting writers sleep in growing
        steps (up to 100 ms), which collapses throughput with several workers. A blocking
        ``flock`` wakes the next writer the moment the lock is free.
        """
        if not self.sqlite:
            yield  # PostgreSQL has row locks; concurrent writers are its everyday work.
            return
        with self._lock:  # re-entrant: a transaction may create ids inside itself
            self._depth += 1
            try:
                if self._depth == 1 and self._lock_path is not None:
                    if self._lock_fd is None:
                        self._lock_fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
                    fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    if self._depth == 1 and self._lock_fd is not None:
                        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            finally:
                self._depth -= 1

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction that holds the write lock from its start (see ``exclusive``).

        On SQLite it begins IMMEDIATE: a transaction that reads first and writes later would
        otherwise fail at once if another writer committed in between.
        """
        with self.exclusive(), self.engine.connect() as conn:
            if self.sqlite:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    def upsert_keys(self, insert_sql: str, table: str, rows: list[dict[str, Any]], *,
                    conn: Connection | None = None) -> dict[str, int]:
        """Insert ``rows`` (unique ``key``) unless present; the ids of all their keys.

        Committed on its own unless ``conn``, an open transaction, is given.
        """
        if conn is None:
            with self.transaction() as own:
                return upsert_keys(own, insert_sql, table, rows)
        return upsert_keys(conn, insert_sql, table, rows)

    def write(self, batch: Batch, *, max_series_per_job: int | None = None) -> WriteResult:
        """Store ``batch`` in one transaction, committed before this returns."""
        eids, sids, refused = self.catalog.ids(batch.entities, batch.series,
                                               max_series_per_job=max_series_per_job,
                                               shared=batch.columns is not None)
        rows, dropped = build_rows(batch, eids, sids)
        try:
            if self._relay is not None:
                self._relay.write(rows)
            else:
                self._commit.submit(rows)
        except self._dbapi_unavailable as exc:
            raise StoreUnavailableError(str(exc)) from exc
        except RelayedWriteError as exc:
            if exc.unavailable:
                raise StoreUnavailableError(str(exc)) from exc
            raise
        errors = list(batch.errors)
        if refused:
            jobs = sorted({s[0][0] for s in refused})
            errors.insert(0, str(CardinalityError(", ".join(jobs), max_series_per_job or 0)))
        return WriteResult(accepted=batch.accepted - dropped, rejected=batch.rejected + dropped,
                           error_message="; ".join(errors))

    def _flush(self, items: list[Rows]) -> None:
        """Write the rows of one or more requests in one transaction (see ``GroupCommit``)."""
        gpu_rows, point_rows, event_rows = concat_rows(items)
        raw = self.engine.raw_connection()
        try:
            if self.sqlite:
                with self.exclusive():  # already held when called through the group commit
                    write_sqlite(raw, (gpu_rows, point_rows, event_rows))
                return
            if len(items) > 1:  # PostgreSQL refuses to upsert one key twice per statement
                gpu_rows = merge_gpu_rows(gpu_rows)
                point_rows = merge_point_rows(point_rows)
            write_pg(raw, (gpu_rows, point_rows, event_rows))
        finally:
            raw.close()
