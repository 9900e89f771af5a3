"""The store's write path: a :class:`~collector.otlp.Batch` into the tables, in bulk.

Entity and series ids are cached in process memory, so a steady stream of samples costs one
bulk statement per table: ``sqlite3.executemany`` on SQLite, ``COPY`` into a temporary table
then ``INSERT ... ON CONFLICT`` on PostgreSQL. Every write is an upsert, so a retried request
stores nothing twice, and a request's points are committed in one transaction before it returns.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine

from collector.group_commit import GroupCommit
from collector.metrics import CANONICAL, GPU_METRICS
from collector.otlp import Batch, Entity, SeriesRef, entity_key

_COLS = [m.column for m in GPU_METRICS]
_CHUNK = 500  # keys per IN (...) lookup, well under every driver's parameter limit
# Pages of WAL before the writer checkpoints (SQLite's default is 1,000). Each request rewrites
# the last page of each of its series, so a larger WAL lets a checkpoint copy a page once for
# many commits instead of once per commit; durability is the WAL's either way.
_WAL_AUTOCHECKPOINT = 16384
Rows = tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[tuple[Any, ...]]]
"""``(gpu_rows, point_rows, event_rows)`` of one request."""


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


def _is_canonical(name: str) -> bool:
    return name in CANONICAL


class Writer:
    """Bulk, idempotent writes of batches into one store's engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sqlite = engine.dialect.name == "sqlite"
        self.entity_ids: dict[Entity, int] = {}
        self.series_ids: dict[SeriesRef, int] = {}
        self._lock = threading.RLock()
        self._depth = 0
        self._lock_fd: int | None = None
        database = engine.url.database if self.sqlite else None
        if database and database != ":memory:":
            self._lock_path: str | None = database + ".write-lock"
        else:
            self._lock_path = None
        self._commit: GroupCommit[Rows] = GroupCommit(self._flush, self.exclusive)

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

    # --- ids -------------------------------------------------------------------------------

    def entity_id_map(self, entities: Iterable[Entity]) -> dict[Entity, int]:
        """Ids of ``entities``, creating the ones the store lacks (committed)."""
        missing = [e for e in dict.fromkeys(entities) if e not in self.entity_ids]
        if missing:
            rows = [{"key": entity_key(e), "job": e[0], "node": e[1], "rank": e[2], "gpu": e[3],
                     "peer": e[4], "gpu_uuid": e[5]} for e in missing]
            ids = self.upsert_keys(
                "INSERT INTO entities (key, job, node, rank, gpu, peer, gpu_uuid) "
                "VALUES (:key, :job, :node, :rank, :gpu, :peer, :gpu_uuid) "
                "ON CONFLICT (key) DO UPDATE SET gpu_uuid = excluded.gpu_uuid "
                "WHERE excluded.gpu_uuid IS NOT NULL",
                "entities", rows)
            for e in missing:
                self.entity_ids[e] = ids[entity_key(e)]
        return self.entity_ids

    def series_id_map(self, refs: Iterable[SeriesRef], *, max_series_per_job: int | None
                      ) -> tuple[dict[SeriesRef, int], set[SeriesRef]]:
        """Ids of ``refs`` (created as needed) and the refs refused by the cardinality limit."""
        missing = [r for r in dict.fromkeys(refs) if r not in self.series_ids]
        refused: set[SeriesRef] = set()
        if not missing:
            return self.series_ids, refused
        eids = self.entity_id_map(r[0] for r in missing)
        if max_series_per_job is not None:
            refused = self._over_limit(missing, max_series_per_job)
            missing = [r for r in missing if r not in refused]
        rows = [{"key": series_key(r), "job": r[0][0], "name": r[1], "entity_id": eids[r[0]],
                 "stat": r[2], "kind": r[3], "unit": r[4], "attrs": r[5]} for r in missing]
        ids = self.upsert_keys(
            "INSERT INTO series (key, job, name, entity_id, stat, kind, unit, attrs) "
            "VALUES (:key, :job, :name, :entity_id, :stat, :kind, :unit, :attrs) "
            "ON CONFLICT (key) DO NOTHING", "series", rows)
        for r in missing:
            self.series_ids[r] = ids[series_key(r)]
        return self.series_ids, refused

    def _over_limit(self, refs: Sequence[SeriesRef], limit: int) -> set[SeriesRef]:
        from sqlalchemy import text

        new_by_job: dict[str, list[SeriesRef]] = {}
        for r in refs:
            if not _is_canonical(r[1]):
                new_by_job.setdefault(r[0][0], []).append(r)
        refused: set[SeriesRef] = set()
        if not new_by_job:
            return refused
        canonical = list(CANONICAL)
        with self.engine.connect() as conn:
            for job, new in new_by_job.items():
                have = conn.execute(
                    text("SELECT count(*) FROM series WHERE job = :job AND kind != 'rollup' "
                         "AND name NOT IN (" + ", ".join(f":c{i}" for i in range(len(canonical)))
                         + ")"),
                    {"job": job, **{f"c{i}": c for i, c in enumerate(canonical)}},
                ).scalar_one()
                room = max(0, limit - int(have))
                # A histogram's stat rows are one series for the user: keep or refuse them together.
                groups: dict[tuple[object, ...], list[SeriesRef]] = {}
                for r in new:
                    groups.setdefault((r[0], r[1], r[5]), []).append(r)
                for group in groups.values():
                    if len(group) <= room:
                        room -= len(group)
                    else:
                        refused.update(group)
        return refused

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
                return self.upsert_keys(insert_sql, table, rows, conn=own)
        from sqlalchemy import text

        # Key order: concurrent writers then lock rows in the same order and never deadlock.
        rows = sorted(rows, key=lambda r: str(r["key"]))
        keys = [r["key"] for r in rows]
        ids: dict[str, int] = {}
        if rows:
            conn.execute(text(insert_sql), rows)
        for i in range(0, len(keys), _CHUNK):
            chunk = keys[i:i + _CHUNK]
            params = {f"k{j}": k for j, k in enumerate(chunk)}
            sql = (f"SELECT key, id FROM {table} WHERE key IN ("
                   + ", ".join(f":k{j}" for j in range(len(chunk))) + ")")
            ids.update({k: int(v) for k, v in conn.execute(text(sql), params)})
        return ids

    # --- data ------------------------------------------------------------------------------

    def write(self, batch: Batch, *, max_series_per_job: int | None = None) -> WriteResult:
        """Store ``batch`` in one transaction, committed before this returns."""
        # Steady state: every id is cached, and one dict lookup per entity and series is all.
        eids = [self.entity_ids.get(e, -1) for e in batch.entities]
        if -1 in eids:
            ids = self.entity_id_map(batch.entities)
            eids = [ids[e] for e in batch.entities]
        sids = [self.series_ids.get(r, -1) for r in batch.series]
        refused: set[SeriesRef] = set()
        if -1 in sids:
            sid_map, refused = self.series_id_map(batch.series,
                                                  max_series_per_job=max_series_per_job)
            sids = [sid_map.get(r, -1) if r not in refused else -1 for r in batch.series]
        gpu_rows = [(eids[e], ts, *vals) for (e, ts), vals in batch.gpu.items()]
        if refused:
            point_rows = [(sids[s], ts, v) for (s, ts), v in batch.points.items()
                          if sids[s] >= 0]
            dropped = sum(1 for (s, _ts) in batch.points
                          if sids[s] < 0 and batch.series[s][2] in ("", "count"))
        else:
            point_rows = [(sids[s], ts, v) for (s, ts), v in batch.points.items()]
            dropped = 0
        event_rows = [(ts, eids[e], kind, code) for e, ts, kind, code in batch.events]
        # Two spellings of one entity (e.g. a GPU whose uuid changed within the request) share
        # an id; merge their rows, since PostgreSQL refuses to upsert one key twice per statement.
        if len(set(eids)) < len(eids):
            gpu_rows = _merge_gpu_rows(gpu_rows)
        if len(set(sids)) < len(sids):
            point_rows = list({(r[0], r[1]): r for r in point_rows}.values())
        dbapi_unavailable = self.engine.dialect.dbapi.OperationalError  # type: ignore[union-attr]
        try:
            self._commit.submit((gpu_rows, point_rows, event_rows))
        except dbapi_unavailable as exc:
            raise StoreUnavailableError(str(exc)) from exc
        errors = list(batch.errors)
        if refused:
            jobs = sorted({s[0][0] for s in refused})
            errors.insert(0, str(CardinalityError(", ".join(jobs), max_series_per_job or 0)))
        return WriteResult(accepted=batch.accepted - dropped, rejected=batch.rejected + dropped,
                           error_message="; ".join(errors))

    def _flush(self, items: list[Rows]) -> None:
        """Write the rows of one or more requests in one transaction (see ``GroupCommit``)."""
        if len(items) == 1:
            gpu_rows, point_rows, event_rows = items[0]
        else:
            gpu_rows = [r for item in items for r in item[0]]
            point_rows = [r for item in items for r in item[1]]
            event_rows = [r for item in items for r in item[2]]
        if self.sqlite:
            # Rows are upserted one by one, so a key repeated by two requests is merged as if
            # the requests had been written one after the other.
            self._write_sqlite(gpu_rows, point_rows, event_rows)
            return
        if len(items) > 1:  # PostgreSQL refuses to upsert one key twice per statement
            gpu_rows = _merge_gpu_rows(gpu_rows)
            point_rows = list({(r[0], r[1]): r for r in point_rows}.values())
        self._write_pg(gpu_rows, point_rows, event_rows)

    def _write_sqlite(self, gpu_rows: list[tuple[Any, ...]], point_rows: list[tuple[Any, ...]],
                      event_rows: list[tuple[Any, ...]]) -> None:
        raw = self.engine.raw_connection()
        try:
            if not raw.info.get("foreshock_wal"):
                raw.cursor().execute(f"PRAGMA wal_autocheckpoint={_WAL_AUTOCHECKPOINT}")
                raw.info["foreshock_wal"] = True
            with self.exclusive():  # already held when called through the group commit
                self._insert_sqlite(raw, gpu_rows, point_rows, event_rows)
        except BaseException:
            raw.rollback()
            raise
        finally:
            raw.close()

    @staticmethod
    def _insert_sqlite(raw: Any, gpu_rows: list[tuple[Any, ...]],
                       point_rows: list[tuple[Any, ...]], event_rows: list[tuple[Any, ...]]
                       ) -> None:
        cur = raw.cursor()
        # IMMEDIATE takes the write lock up front, so another writer (the maintenance pass,
        # another program) makes this one wait (busy_timeout) instead of failing mid-way.
        cur.execute("BEGIN IMMEDIATE")
        if gpu_rows:
            cur.executemany(_GPU_UPSERT_SQLITE, gpu_rows)
        if point_rows:
            cur.executemany(_POINT_UPSERT_SQLITE, point_rows)
        if event_rows:
            cur.executemany(_EVENT_INSERT_SQLITE, event_rows)
        cur.execute("COMMIT")
        cur.close()

    def _write_pg(self, gpu_rows: list[tuple[Any, ...]], point_rows: list[tuple[Any, ...]],
                  event_rows: list[tuple[Any, ...]]) -> None:
        raw = self.engine.raw_connection()
        try:
            conn: Any = raw.driver_connection
            with conn.cursor() as cur:
                if not raw.info.get("foreshock_tmp"):
                    cur.execute("CREATE TEMP TABLE IF NOT EXISTS _in_gpu (LIKE gpu_samples) "
                                "ON COMMIT DELETE ROWS")
                    cur.execute("CREATE TEMP TABLE IF NOT EXISTS _in_points (LIKE points) "
                                "ON COMMIT DELETE ROWS")
                    raw.info["foreshock_tmp"] = True
                if gpu_rows:
                    _copy(cur, "_in_gpu", ["entity_id", "ts", *_COLS], gpu_rows,
                          ["int4", "float8", *("float8" for _ in _COLS)])
                    cur.execute(_GPU_UPSERT_PG)
                if point_rows:
                    _copy(cur, "_in_points", ["series_id", "ts", "value"], point_rows,
                          ["int4", "float8", "float8"])
                    cur.execute("INSERT INTO points SELECT * FROM _in_points "
                                "ON CONFLICT (series_id, ts) DO UPDATE SET value = excluded.value")
                if event_rows:
                    cur.executemany(_EVENT_INSERT, event_rows)
            conn.commit()
        except BaseException:
            raw.rollback()
            raise
        finally:
            raw.close()


def _merge_gpu_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    merged: dict[tuple[Any, Any], list[Any]] = {}
    for row in rows:
        have = merged.get(row[:2])
        if have is None:
            merged[row[:2]] = list(row)
        else:
            have[2:] = [new if new is not None else old
                        for old, new in zip(have[2:], row[2:], strict=True)]
    return [tuple(r) for r in merged.values()]


def _copy(cur: Any, table: str, columns: list[str], rows: list[tuple[Any, ...]],
          types: list[str]) -> None:
    # Binary COPY with declared types: about 4x faster than text COPY from Python rows.
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)


def series_key(r: SeriesRef) -> str:
    """The unique ``entity key|name|stat|attrs`` of a series."""
    return f"{entity_key(r[0])}|{r[1]}|{r[2]}|{r[5]}"


_MERGE = ", ".join(f"{c} = COALESCE(excluded.{c}, gpu_samples.{c})" for c in _COLS)
_GPU_UPSERT_SQLITE = (
    f"INSERT INTO gpu_samples (entity_id, ts, {', '.join(_COLS)}) "
    f"VALUES ({', '.join('?' for _ in range(len(_COLS) + 2))}) "
    f"ON CONFLICT (entity_id, ts) DO UPDATE SET {_MERGE}"
)
_GPU_UPSERT_PG = (
    f"INSERT INTO gpu_samples (entity_id, ts, {', '.join(_COLS)}) "
    f"SELECT entity_id, ts, {', '.join(_COLS)} FROM _in_gpu "
    f"ON CONFLICT (entity_id, ts) DO UPDATE SET {_MERGE}"
)
_POINT_UPSERT = ("INSERT INTO points (series_id, ts, value) VALUES (%s, %s, %s) "
                 "ON CONFLICT (series_id, ts) DO UPDATE SET value = excluded.value")
_EVENT_INSERT = ("INSERT INTO events (ts, entity_id, kind, code) VALUES (%s, %s, %s, %s) "
                 "ON CONFLICT DO NOTHING")
_POINT_UPSERT_SQLITE = _POINT_UPSERT.replace("%s", "?")
_EVENT_INSERT_SQLITE = _EVENT_INSERT.replace("%s", "?")
