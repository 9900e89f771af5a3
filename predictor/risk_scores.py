"""The ``risk_scores`` table (migration 0002): what the service's scorer concluded, per entity
and instant, with the model version and the top signals behind each score."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pandas as pd
from sqlalchemy import (
    Float,
    Index,
    Integer,
    String,
    Text,
    and_,
    func,
    insert,
    literal_column,
    select,
)
from sqlalchemy.orm import Mapped, Session, mapped_column
from sqlalchemy.sql.elements import ColumnElement

from collector.schema import NAME_LEN, Base


class RiskScore(Base):
    """One entity's risk at one scoring instant."""

    __tablename__ = "risk_scores"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ts: Mapped[float] = mapped_column(Float)
    job: Mapped[str] = mapped_column(String(NAME_LEN))
    node: Mapped[str] = mapped_column(String(NAME_LEN))
    gpu: Mapped[int | None] = mapped_column(Integer)
    peer: Mapped[str | None] = mapped_column(String(NAME_LEN))
    kind: Mapped[str] = mapped_column(String(8))
    """``gpu``, ``link`` or ``node``."""
    risk: Mapped[float] = mapped_column(Float)
    """Probability of failure within the model's horizon, 0-1."""
    lead_s: Mapped[float | None] = mapped_column(Float)
    """Estimated seconds until the failure, if one comes."""
    signals: Mapped[str] = mapped_column(Text, default="[]")
    """JSON list of short strings, top signal first."""
    model_version: Mapped[str] = mapped_column(String(64))

    __table_args__ = (
        Index("ix_risk_scores_job_ts", "job", "ts"),
        Index("ix_risk_scores_node_ts", "node", "ts"),
    )

    def to_json(self) -> dict[str, object]:
        return {
            "ts": self.ts, "job": self.job, "node": self.node, "gpu": self.gpu, "peer": self.peer,
            "kind": self.kind, "risk": self.risk, "lead_s": self.lead_s,
            "signals": json.loads(self.signals or "[]"), "model_version": self.model_version,
        }


def write_scores(session: Session, *, job: str, ts: float, risks: pd.DataFrame,
                 model_version: str) -> int:
    """Insert one row per row of a scorer risk frame; returns the rows written."""
    if not len(risks):
        return 0
    gpu = risks["gpu"].to_numpy(dtype=np.int64)
    lead = risks["lead_s"].to_numpy(dtype=np.float64)
    rows = [
        {"ts": ts, "job": job, "node": str(node), "gpu": int(g) if g >= 0 else None,
         "peer": str(peer) or None, "kind": str(kind), "risk": float(risk),
         "lead_s": float(ld) if np.isfinite(ld) else None, "signals": json.dumps(list(sig)),
         "model_version": model_version}
        for node, g, peer, kind, risk, ld, sig in zip(
            risks["node"], gpu, risks["peer"], risks["kind"], risks["risk"], lead,
            risks["signals"], strict=True)
    ]
    session.execute(insert(RiskScore), rows)
    return len(rows)


def latest(session: Session, *, job: str | None = None, node: str | None = None,
           kind: str | None = None, min_risk: float = 0.0, limit: int = 1000
           ) -> Sequence[RiskScore]:
    """The newest row of every entity matching the filters, riskiest first."""
    filters = []
    if job is not None:
        filters.append(RiskScore.job == job)
    if node is not None:
        filters.append(RiskScore.node == node)
    if kind is not None:
        filters.append(RiskScore.kind == kind)
    # Inline constants: PostgreSQL only matches GROUP BY expressions that render identically.
    def gpu_of() -> ColumnElement[int]:
        return func.coalesce(RiskScore.gpu, literal_column("-1"))

    def peer_of() -> ColumnElement[str]:
        return func.coalesce(RiskScore.peer, literal_column("''"))

    newest = (
        select(RiskScore.job, RiskScore.node, RiskScore.kind, gpu_of().label("g"),
               peer_of().label("p"), func.max(RiskScore.ts).label("ts"))
        .where(*filters)
        .group_by(RiskScore.job, RiskScore.node, RiskScore.kind, gpu_of(), peer_of())
        .subquery()
    )
    stmt = (
        select(RiskScore)
        .join(newest, and_(RiskScore.job == newest.c.job, RiskScore.node == newest.c.node,
                           RiskScore.kind == newest.c.kind,
                           gpu_of() == newest.c.g, peer_of() == newest.c.p,
                           RiskScore.ts == newest.c.ts))
        .where(RiskScore.risk >= min_risk)
        .order_by(RiskScore.risk.desc(), RiskScore.node, RiskScore.id)
        .limit(limit)
    )
    return session.scalars(stmt).all()


def history(session: Session, *, job: str | None = None, node: str | None = None,
            gpu: int | None = None, kind: str | None = None, start: float | None = None,
            end: float | None = None, limit: int = 10000) -> Sequence[RiskScore]:
    """Rows in time order matching the filters."""
    stmt = select(RiskScore)
    for col, value in ((RiskScore.job, job), (RiskScore.node, node), (RiskScore.gpu, gpu),
                       (RiskScore.kind, kind)):
        if value is not None:
            stmt = stmt.where(col == value)
    if start is not None:
        stmt = stmt.where(RiskScore.ts >= start)
    if end is not None:
        stmt = stmt.where(RiskScore.ts <= end)
    return session.scalars(stmt.order_by(RiskScore.ts, RiskScore.id).limit(limit)).all()


def prune(session: Session, *, before: float) -> int:
    """Delete rows older than ``before``; returns how many."""
    from sqlalchemy import delete

    result = session.execute(delete(RiskScore).where(RiskScore.ts < before))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
