"""The store's tables (SQLAlchemy 2.0). Other packages add theirs to the same ``Base``.

Canonical GPU metrics live in one wide table, a column each, because every sample of a GPU
carries all of them at once: one row holds ~15 points, which keeps disk per point small and
lets the predictor and the dashboards read a GPU's history with one indexed range scan.
Everything else (training, network, arbitrary OTel metrics) is a narrow ``points`` table keyed
by ``series``.
"""

from __future__ import annotations

from sqlalchemy import (
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from collector.metrics import GPU_METRICS


class Base(DeclarativeBase):
    """Declarative base shared by every table of the store."""


class Entity(Base):
    """Something measured: a GPU, a rank, a link (node -> peer) or a node of a job."""

    __tablename__ = "entities"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(512), unique=True)
    """``job|node|rank|gpu|peer`` with empty parts for what does not apply."""
    job: Mapped[str] = mapped_column(String(128), index=True)
    node: Mapped[str] = mapped_column(String(128))
    rank: Mapped[int | None] = mapped_column(Integer)
    gpu: Mapped[int | None] = mapped_column(Integer)
    gpu_uuid: Mapped[str | None] = mapped_column(String(128))
    peer: Mapped[str | None] = mapped_column(String(128))


def _gpu_columns() -> dict[str, Mapped[float | None]]:
    return {m.column: mapped_column(Float, nullable=True) for m in GPU_METRICS}


class GpuSample(Base):
    """One NVML sample of one GPU: every canonical ``gpu.*`` metric as a column."""

    __tablename__ = "gpu_samples"

    entity_id: Mapped[int] = mapped_column(ForeignKey("entities.id"), primary_key=True)
    ts: Mapped[float] = mapped_column(Float, primary_key=True)
    locals().update(_gpu_columns())


class Series(Base):
    """A narrow time series: a metric name, an entity and the point's other attributes."""

    __tablename__ = "series"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(1024), unique=True)
    """``entity key|name|stat|sorted attrs`` for deduplication."""
    job: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str] = mapped_column(String(256), index=True)
    entity_id: Mapped[int] = mapped_column(ForeignKey("entities.id"), index=True)
    stat: Mapped[str] = mapped_column(String(16), default="")
    """'' for gauges and sums; ``sum``, ``count``, ``min`` or ``max`` for histogram parts."""
    kind: Mapped[str] = mapped_column(String(16))
    """``gauge``, ``cumulative``, ``delta`` or ``histogram``."""
    unit: Mapped[str] = mapped_column(String(32), default="")
    attrs: Mapped[str] = mapped_column(Text, default="{}")
    """JSON object of the point attributes that are not entity attributes (``op``, ``kernel``)."""


class Point(Base):
    """One point of a narrow series."""

    __tablename__ = "points"

    series_id: Mapped[int] = mapped_column(ForeignKey("series.id"), primary_key=True)
    ts: Mapped[float] = mapped_column(Float, primary_key=True)
    value: Mapped[float] = mapped_column(Float)


class Event(Base):
    """A discrete event such as an XID (``kind='xid'``, ``code`` the XID number)."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ts: Mapped[float] = mapped_column(Float)
    entity_id: Mapped[int] = mapped_column(ForeignKey("entities.id"))
    kind: Mapped[str] = mapped_column(String(32))
    code: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (Index("ix_events_ts", "ts"), Index("ix_events_entity_ts", "entity_id", "ts"))
