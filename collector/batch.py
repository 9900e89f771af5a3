"""One request's points sorted by table: the :class:`Batch` flattening makes, the writer stores.

Points refer to entities and series by their position in the batch, so the store resolves each
distinct one once per batch, not once per point.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collector.metrics import GPU_METRICS

GPU_INDEX: dict[str, int] = {m.name: i for i, m in enumerate(GPU_METRICS)}
"""Canonical gpu.* name -> position in a wide row (the order of ``GPU_METRICS``)."""
N_GPU = len(GPU_METRICS)

_MAX_ERRORS = 5

Entity = tuple[str, str, int | None, int | None, str | None, str | None]
"""``(job, node, rank, gpu, peer, gpu_uuid)``; the first five identify it."""
SeriesRef = tuple[Entity, str, str, str, str, str]
"""``(entity, name, stat, kind, unit, attrs_json)``."""


def entity_key(e: Entity) -> str:
    """The unique ``job|node|rank|gpu|peer`` key of an entity (empty parts where absent)."""
    job, node, rank, gpu, peer, _ = e
    return (f"{job}|{node}|{'' if rank is None else rank}|{'' if gpu is None else gpu}"
            f"|{peer or ''}")


def series_key(r: SeriesRef) -> str:
    """The unique ``entity key|name|stat|attrs`` of a series."""
    return f"{entity_key(r[0])}|{r[1]}|{r[2]}|{r[5]}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Columns:
    """A batch's wide and narrow rows column by column (what a layout match produces).

    Each entity position appears in one GPU row at most and each series position in one point
    at most, so there is nothing to deduplicate.
    """

    gpu_entity: list[int]
    """Entity position of each GPU row."""
    gpu_ts: list[float]
    gpu_values: list[list[float | None]]
    """One list per ``GPU_METRICS`` column, a value per GPU row (None where not sent)."""
    point_series: list[int]
    """Series position of each narrow point."""
    point_ts: list[float]
    point_values: list[float]


@dataclass(slots=True)
class Batch:
    """One request's accepted points, grouped by table; rejected ones only counted."""

    entities: list[Entity] = field(default_factory=list)
    entity_index: dict[Entity, int] = field(default_factory=dict)
    series: list[SeriesRef] = field(default_factory=list)
    series_index: dict[SeriesRef, int] = field(default_factory=dict)
    gpu: dict[tuple[int, float], list[float | None]] = field(default_factory=dict)
    """(GPU entity position, ts) -> values in ``GPU_METRICS`` order (None where not sent)."""
    points: dict[tuple[int, float], float] = field(default_factory=dict)
    """(series position, ts) -> value; a repeated key keeps the last value (idempotent)."""
    events: set[tuple[int, float, str, int | None]] = field(default_factory=set)
    """(entity position, ts, kind, code)."""
    columns: Columns | None = None
    """Set by a layout match instead of ``gpu`` and ``points``: the same rows, by column."""
    accepted: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def entity(self, e: Entity) -> int:
        """The position of entity ``e`` (added if new)."""
        i = self.entity_index.get(e)
        if i is None:
            i = self.entity_index[e] = len(self.entities)
            self.entities.append(e)
        return i

    def series_ref(self, r: SeriesRef) -> int:
        """The position of series ``r`` (added if new)."""
        i = self.series_index.get(r)
        if i is None:
            i = self.series_index[r] = len(self.series)
            self.series.append(r)
        return i

    def rows_by_key(self) -> tuple[dict[object, object], dict[object, float]]:
        """The GPU rows and points keyed by entity and series (not positions), whichever form
        the batch holds them in: two batches with equal results store the same data."""
        ents, series = self.entities, self.series
        gpu: dict[object, object] = {(ents[e], ts): tuple(v) for (e, ts), v in self.gpu.items()}
        points: dict[object, float] = {(series[s], ts): v for (s, ts), v in self.points.items()}
        if self.columns is not None:
            c = self.columns
            gpu.update({(ents[e], ts): tuple(v) for e, ts, *v in
                        zip(c.gpu_entity, c.gpu_ts, *c.gpu_values, strict=True)})
            points.update({(series[s], ts): v for s, ts, v in
                           zip(c.point_series, c.point_ts, c.point_values, strict=True)})
        return gpu, points

    def reject(self, message: str, count: int = 1) -> None:
        self.rejected += count
        if len(self.errors) < _MAX_ERRORS and message not in self.errors:
            self.errors.append(message)

    def error_message(self) -> str:
        return "; ".join(self.errors)
