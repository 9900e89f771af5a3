"""The store's tables (SQLAlchemy 2.0). Other packages add theirs to the same ``Base``.

Canonical GPU metrics live in one wide table, a column each, because every sample of a GPU
carries all of them at once: one row holds ~15 points, which keeps disk per point small and
lets the predictor and the dashboards read a GPU's history with one indexed range scan.
Everything else (training, network, arbitrary OTel metrics) is a narrow ``points`` table keyed
by ``series``; on PostgreSQL, settled points move into ``point_chunks`` (collector/compact.py)
and readers see both through the view ``points_all``.
"""

from __future__ import annotations

from sqlalchemy import (
    REAL,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from collector.metrics import GPU_COLUMNS, GPU_METRICS

NAME_LEN = 128
"""Longest job, node, peer or GPU UUID the store keeps, in every table that names one (OTLP
points and imported traces naming longer are refused)."""
METRIC_NAME_LEN = 256
UNIT_LEN = 32
SERIES_KEY_LEN = 1024


class Base(DeclarativeBase):
    """Declarative base shared by every table of the store."""


class Entity(Base):
    """Something measured: a GPU, a rank, a link (node -> peer) or a node of a job."""

    __tablename__ = "entities"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(512), unique=True)
    """``job|node|rank|gpu|peer`` with empty parts for what does not apply."""
    job: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    node: Mapped[str] = mapped_column(String(NAME_LEN))
    rank: Mapped[int | None] = mapped_column(Integer)
    gpu: Mapped[int | None] = mapped_column(Integer)
    gpu_uuid: Mapped[str | None] = mapped_column(String(NAME_LEN))
    peer: Mapped[str | None] = mapped_column(String(NAME_LEN))


FLOAT4_GPU_METRICS: tuple[str, ...] = (
    "gpu.utilization", "gpu.temperature", "gpu.memory.temperature", "gpu.power", "gpu.clock.sm",
    "gpu.throttle.thermal", "gpu.throttle.power", "gpu.rows.remap.pending",
)
"""Bounded gauges stored as ``real`` (float4) on PostgreSQL (migration 0006).

NVML reports them in whole degrees, MHz and percent, in mW, or as 0/1 flags: float4 holds such
a value exactly below 2**24 and to 7 significant digits otherwise, and PostgreSQL prints it in
its shortest float4 digits (``61.3``, not ``61.29999923706055``), which is what readers receive
as long as they select the column itself rather than an expression that widens it to float8.
Counters and byte counts stay float8, exact to 2**53. SQLite stores every column in 8 bytes.
"""
FLOAT4_GPU_COLUMNS: frozenset[str] = frozenset(GPU_COLUMNS[n] for n in FLOAT4_GPU_METRICS)


def _gpu_columns() -> dict[str, Mapped[float | None]]:
    return {m.column: mapped_column(REAL if m.column in FLOAT4_GPU_COLUMNS else Float,
                                    nullable=True) for m in GPU_METRICS}


class GpuSample(Base):
    """One NVML sample of one GPU: every canonical ``gpu.*`` metric as a column.

    On PostgreSQL a row is a 24-byte header, a 4-byte line pointer and its data: 104 bytes
    since migration 0006 stores the bounded gauges of :data:`FLOAT4_GPU_COLUMNS` in 4 bytes
    and places them after ``entity_id``, ahead of the 8-byte columns (136 bytes before, 8 of
    them alignment padding). Writers and readers name the columns; their order is free.
    """

    __tablename__ = "gpu_samples"

    # No foreign key on the hot tables (gpu_samples, points, rollups): the write path takes ids
    # from entities/series it has just created, and a per-row check would halve PostgreSQL's
    # insert rate.
    entity_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ts: Mapped[float] = mapped_column(Float, primary_key=True)
    locals().update(_gpu_columns())

    # The primary key is the row's only index; on SQLite the rows live in it (no rowid copy).
    __table_args__ = {"sqlite_with_rowid": False}  # noqa: RUF012


class Series(Base):
    """A narrow time series: a metric name, an entity and the point's other attributes."""

    __tablename__ = "series"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(SERIES_KEY_LEN), unique=True)
    """``entity key|name|stat|sorted attrs`` for deduplication."""
    job: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    name: Mapped[str] = mapped_column(String(METRIC_NAME_LEN), index=True)
    entity_id: Mapped[int] = mapped_column(ForeignKey("entities.id"), index=True)
    stat: Mapped[str] = mapped_column(String(16), default="")
    """'' for gauges and sums; ``sum``, ``count``, ``min`` or ``max`` for histogram parts."""
    kind: Mapped[str] = mapped_column(String(16))
    """``gauge``, ``cumulative``, ``delta``, ``histogram`` (cumulative), ``delta_histogram``,
    ``summary``, or ``rollup`` for the per-column series of ``gpu_samples`` that rollups use."""
    unit: Mapped[str] = mapped_column(String(UNIT_LEN), default="")
    attrs: Mapped[str] = mapped_column(Text, default="{}")
    """JSON object of the point attributes that are not entity attributes (``op``, ``kernel``)."""


class Point(Base):
    """One point of a narrow series."""

    __tablename__ = "points"

    series_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ts: Mapped[float] = mapped_column(Float, primary_key=True)
    value: Mapped[float] = mapped_column(Float)

    __table_args__ = {"sqlite_with_rowid": False}  # noqa: RUF012


class PointChunk(Base):
    """Settled points of one series in one hour, compacted (PostgreSQL only).

    Written by collector/compact.py (which documents the encoding) and read with ``points``
    through the view ``points_all``; SQLite stores have no such table.
    """

    __tablename__ = "point_chunks"

    series_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    t0: Mapped[float] = mapped_column(Float, primary_key=True)
    """Start of the window (Unix seconds, a multiple of ``compact.WINDOW_S``)."""
    t1: Mapped[float] = mapped_column(Float)
    """Timestamp of the chunk's last point."""
    ts_deltas: Mapped[list[int]] = mapped_column(ARRAY(BigInteger))
    """Ticks of 2**-22 s from ``t0`` to the first point, then from each point to the next."""
    vals: Mapped[list[float]] = mapped_column(ARRAY(Float))
    """The values, in time order."""


class Event(Base):
    """A discrete event such as an XID (``kind='xid'``, ``code`` the XID number)."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ts: Mapped[float] = mapped_column(Float)
    entity_id: Mapped[int] = mapped_column(ForeignKey("entities.id"))
    kind: Mapped[str] = mapped_column(String(32))
    code: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        Index("ix_events_ts", "ts"),
        # Unique so that a retried OTLP request does not record the same XID twice.
        Index("ix_events_entity_ts", "entity_id", "ts", "kind", "code", unique=True),
    )


class Rollup(Base):
    """One minute of one series after raw retention: min, max, mean and last value.

    ``gpu_samples`` columns roll up into series of kind ``rollup`` (one per GPU and column), so
    every rolled-up minute, wide or narrow, is found the same way.
    """

    __tablename__ = "rollups"

    series_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ts: Mapped[float] = mapped_column(Float, primary_key=True)
    """Start of the minute (Unix seconds, a multiple of 60)."""
    min: Mapped[float] = mapped_column(Float)
    max: Mapped[float] = mapped_column(Float)
    mean: Mapped[float] = mapped_column(Float)
    last: Mapped[float] = mapped_column(Float)
    count: Mapped[int] = mapped_column(Integer)

    __table_args__ = {"sqlite_with_rowid": False}  # noqa: RUF012


class MaintenanceState(Base):
    """Watermarks of the maintenance loop: ``rolled_up_to`` and ``raw_kept_from`` (Unix s)."""

    __tablename__ = "maintenance_state"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[float] = mapped_column(Float)


class JobRecord(Base):
    """What the store knows of a job beyond its data; a job without a row exported everything.

    ``events_exported`` is false for a job loaded from a fleet trace without ``events.csv``: its
    source kept no XID log, so its XID counts are unknown, not zero (``foreshock import``).
    """

    __tablename__ = "jobs"

    job: Mapped[str] = mapped_column(String(NAME_LEN), primary_key=True)
    events_exported: Mapped[bool] = mapped_column(Boolean)
    through: Mapped[float] = mapped_column(Float)
    """End of the last trace loaded into the job (Unix s). The mark covers data up to it: data
    after it came from another source, such as a live hook, which reports XIDs."""
    updated_at: Mapped[float] = mapped_column(Float)
