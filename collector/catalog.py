"""The catalogue of entities and series: their ids, cached, created on first sight.

A steady stream of samples finds every id in process memory; new ones are upserted in bulk,
and new non-canonical series are counted against the job's cardinality limit first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection, text

from collector.batch import Entity, SeriesRef, entity_key, series_key
from collector.metrics import CANONICAL

_CHUNK = 500  # keys per IN (...) lookup, well under every driver's parameter limit
_MAX_SHARED = 4096  # remembered id lists of shared entity/series lists (request layouts)
_ENTITY_UPSERT = (
    "INSERT INTO entities (key, job, node, rank, gpu, peer, gpu_uuid) "
    "VALUES (:key, :job, :node, :rank, :gpu, :peer, :gpu_uuid) "
    "ON CONFLICT (key) DO UPDATE SET gpu_uuid = excluded.gpu_uuid "
    "WHERE excluded.gpu_uuid IS NOT NULL")
_SERIES_UPSERT = (
    "INSERT INTO series (key, job, name, entity_id, stat, kind, unit, attrs) "
    "VALUES (:key, :job, :name, :entity_id, :stat, :kind, :unit, :attrs) "
    "ON CONFLICT (key) DO NOTHING")


def upsert_keys(conn: Connection, insert_sql: str, table: str, rows: list[dict[str, Any]]
                ) -> dict[str, int]:
    """Insert ``rows`` (unique ``key``) unless present, in ``conn``'s transaction; the ids of
    all their keys."""
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


class Catalog:
    """Entity and series ids of one store; ``transaction`` opens a write transaction on it."""

    def __init__(self, transaction: Callable[[], AbstractContextManager[Connection]]) -> None:
        self.transaction = transaction
        self.entity_ids: dict[Entity, int] = {}
        self.series_ids: dict[SeriesRef, int] = {}
        # id(entities list) -> (entities, series, their ids): the lists are kept, so an id
        # found here is never that of a list since freed.
        self._by_lists: dict[int, tuple[list[Entity], list[SeriesRef], list[int], list[int]]] = {}

    def entity_id_map(self, entities: Iterable[Entity]) -> dict[Entity, int]:
        """Ids of ``entities``, creating the ones the store lacks (committed)."""
        missing = [e for e in dict.fromkeys(entities) if e not in self.entity_ids]
        if missing:
            rows = [{"key": entity_key(e), "job": e[0], "node": e[1], "rank": e[2], "gpu": e[3],
                     "peer": e[4], "gpu_uuid": e[5]} for e in missing]
            with self.transaction() as conn:
                ids = upsert_keys(conn, _ENTITY_UPSERT, "entities", rows)
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
        with self.transaction() as conn:
            if max_series_per_job is not None:
                refused = _over_limit(conn, missing, max_series_per_job)
                missing = [r for r in missing if r not in refused]
            rows = [{"key": series_key(r), "job": r[0][0], "name": r[1],
                     "entity_id": eids[r[0]], "stat": r[2], "kind": r[3], "unit": r[4],
                     "attrs": r[5]} for r in missing]
            ids = upsert_keys(conn, _SERIES_UPSERT, "series", rows)
        for r in missing:
            self.series_ids[r] = ids[series_key(r)]
        return self.series_ids, refused

    def ids(self, entities: list[Entity], series: list[SeriesRef], *,
            max_series_per_job: int | None, shared: bool = False
            ) -> tuple[list[int], list[int], set[SeriesRef]]:
        """The id of each entity and series (-1 where refused), and the refused series.

        ``shared``: the lists are reused by later batches (a request layout's), so their ids
        are remembered by the lists' identity once every one of them has an id.
        """
        if shared:
            memo = self._by_lists.get(id(entities))
            if memo is not None and memo[0] is entities and memo[1] is series:
                return memo[2], memo[3], set()
        eids, sids, refused = self._ids(entities, series, max_series_per_job=max_series_per_job)
        if shared and -1 not in sids:
            if len(self._by_lists) >= _MAX_SHARED:
                self._by_lists.clear()
            self._by_lists[id(entities)] = (entities, series, eids, sids)
        return eids, sids, refused

    def _ids(self, entities: list[Entity], series: list[SeriesRef], *,
             max_series_per_job: int | None) -> tuple[list[int], list[int], set[SeriesRef]]:
        # Steady state: every id is cached, and one dict lookup per entity and series is all.
        known_e, known_s = self.entity_ids, self.series_ids
        eids = [known_e.get(e, -1) for e in entities]
        if -1 in eids:
            ids = self.entity_id_map(entities)
            eids = [ids[e] for e in entities]
        sids = [known_s.get(r, -1) for r in series]
        refused: set[SeriesRef] = set()
        if -1 in sids:
            sid_map, refused = self.series_id_map(series, max_series_per_job=max_series_per_job)
            sids = [sid_map.get(r, -1) if r not in refused else -1 for r in series]
        return eids, sids, refused


def _over_limit(conn: Connection, refs: Sequence[SeriesRef], limit: int) -> set[SeriesRef]:
    new_by_job: dict[str, list[SeriesRef]] = {}
    for r in refs:
        if r[1] not in CANONICAL:
            new_by_job.setdefault(r[0][0], []).append(r)
    refused: set[SeriesRef] = set()
    canonical = list(CANONICAL)
    for job, new in new_by_job.items():
        have = conn.execute(
            text("SELECT count(*) FROM series WHERE job = :job AND kind != 'rollup' "
                 "AND name NOT IN (" + ", ".join(f":c{i}" for i in range(len(canonical))) + ")"),
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
