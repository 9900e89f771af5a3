"""Checkpoint-and-drain decisions in the store: derived from firing alerts under a policy,
then moved pending -> acknowledged -> done | failed by the trainer, or cancelled by an admin.
An admin marks a done drain repaired once its node was fixed: a node back in the job drains again
only after a wait, unless its last drain is marked repaired.

A decision is taken once per node and alert episode: an alert that keeps firing does not
produce a second decision, and one cancelled by an admin is not re-created behind their back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Float, Index, Integer, String, Text, select, text
from sqlalchemy.orm import Mapped, Session, mapped_column

from api.alert_state import Alert, firing_alerts
from collector.compact import points_join
from collector.schema import NAME_LEN, Base

DecisionState = Literal["pending", "acknowledged", "done", "failed", "cancelled", "repaired"]
STATES: tuple[str, ...] = ("pending", "acknowledged", "done", "failed", "cancelled", "repaired")
OPEN_STATES: tuple[str, ...] = ("pending", "acknowledged")
DRAINED_STATES: tuple[str, ...] = ("done", "repaired")
"""The node left the job; "repaired" also says it was fixed, so its next alert need not wait."""
ACTION = "checkpoint_drain"
ACTIVITY_METRIC = "train.step.duration"
"""A node hosts ranks of a running job while its ranks report step times."""

# Which state each transition may start from; a repeat of the same transition is a no-op.
_ALLOWED_FROM: dict[str, tuple[str, ...]] = {
    "acknowledged": ("pending",),
    "done": OPEN_STATES,
    "failed": OPEN_STATES,
    "cancelled": OPEN_STATES,
    "repaired": ("done",),
}


class Decision(Base):
    """One decision: checkpoint job ``job`` and drain node ``node``."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job: Mapped[str] = mapped_column(String(NAME_LEN))
    node: Mapped[str] = mapped_column(String(NAME_LEN))
    alert_id: Mapped[int | None] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    action: Mapped[str] = mapped_column(String(32), default=ACTION)
    step: Mapped[int | None] = mapped_column(Integer)
    """The step after which every rank checkpoints and the node leaves."""
    reason: Mapped[str] = mapped_column(Text)
    """Why it was taken, then one line per transition."""
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        Index("ix_decisions_job_state", "job", "state"),
        Index("ix_decisions_job_node", "job", "node"),
    )


class DecisionStateError(ValueError):
    """A transition the decision's current state does not allow."""

    def __init__(self, decision: Decision, to: str) -> None:
        self.decision, self.to = decision, to
        super().__init__(f"decision {decision.id} is {decision.state}; it cannot become {to}")


@dataclass(frozen=True, kw_only=True)
class DrainPolicy:
    """When a firing alert becomes a decision to checkpoint and drain its node."""

    risk_threshold: float = 0.5
    """Alerts below this risk stay alerts."""
    min_lead_s: float = 0.0
    """Act only if the predicted lead time leaves at least this long to checkpoint and drain."""
    max_drains_per_hour: int = 2
    """At most this many drains of one job per rolling hour."""
    min_nodes: int = 1
    """Never drain a job below this many nodes (then alert only)."""
    active_window_s: float = 120.0
    """A node hosts a running job's ranks if they reported a step within this window."""
    drain_again_after_s: float = 21600.0
    """A node drained and back in the job drains again no sooner than this after its last
    drain; until then its alerts only alert. Six hours, the catch window of fleet-trace.md:
    a failure alerted on for longer is still drained within 6 h of it, and a standing false
    alarm does not drain its healthy node every time it comes back."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.risk_threshold <= 1.0:
            raise ValueError(f"policy.risk_threshold={self.risk_threshold} must be within [0, 1]")
        if self.min_lead_s < 0:
            raise ValueError(f"policy.min_lead_s={self.min_lead_s} must be >= 0")
        if self.max_drains_per_hour < 0:
            raise ValueError(f"policy.max_drains_per_hour={self.max_drains_per_hour} must be >= 0")
        if self.min_nodes < 1:
            raise ValueError(f"policy.min_nodes={self.min_nodes} must be >= 1")
        if self.active_window_s <= 0:
            raise ValueError(f"policy.active_window_s={self.active_window_s} must be > 0")
        if self.drain_again_after_s < 0:
            raise ValueError(
                f"policy.drain_again_after_s={self.drain_again_after_s} must be >= 0")


@dataclass(frozen=True, kw_only=True)
class Held:
    """A firing alert the policy did not turn into a decision, and why."""

    alert_id: int
    node: str
    reason: str


def active_nodes(session: Session, *, job: str, since: float) -> set[str]:
    """Nodes whose ranks of ``job`` reported a step at or after ``since``."""
    # Per rank series, a short range of the points' (series_id, ts) key, raw or compacted.
    points = points_join(sqlite=session.get_bind().dialect.name == "sqlite", lo=":since")
    query = text(
        f"SELECT DISTINCT e.node FROM entities e JOIN series s ON s.entity_id = e.id {points} "
        "WHERE e.job = :job AND e.rank IS NOT NULL AND s.name = :name")
    return set(session.scalars(query, {"job": job, "name": ACTIVITY_METRIC, "since": since}))


def _alert_text(alert: Alert) -> str:
    where = f"GPU {alert.gpu}" if alert.gpu is not None else (
        f"link to {alert.peer}" if alert.peer else "node")
    lead = "unknown lead" if alert.lead_s is None else f"lead ~{alert.lead_s:.0f} s"
    signals = ", ".join(alert.signal_list[:3]) or "no signals"
    return (f"alert {alert.id}: {where} on {alert.node} at risk {alert.risk:.2f}, {lead} "
            f"({signals})")


def derive(session: Session, *, job: str, policy: DrainPolicy,
           now: float | None = None) -> list[Held]:
    """Open decisions for ``job``'s firing alerts as the policy allows; return those held back."""
    now = time.time() if now is None else now
    nodes = active_nodes(session, job=job, since=now - policy.active_window_s)
    decisions = list(session.scalars(select(Decision).where(Decision.job == job)))
    held: list[Held] = []
    for alert in firing_alerts(session, job=job):
        if alert.node not in nodes:
            continue  # not a node of this running job (any more)
        if any(d.node == alert.node and d.created_at >= alert.starts_at for d in decisions):
            continue  # already decided for this node in this alert episode
        reason = _refusal(alert, policy=policy, nodes=nodes, decisions=decisions, now=now)
        if reason is not None:
            held.append(Held(alert_id=alert.id, node=alert.node, reason=reason))
            continue
        decision = Decision(job=job, node=alert.node, alert_id=alert.id, state="pending",
                            action=ACTION, reason=f"{_alert_text(alert)}; checkpoint and drain",
                            created_at=now, updated_at=now)
        session.add(decision)
        decisions.append(decision)
    session.flush()
    return held


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{round(seconds / 3600, 1):g} h"


def _refusal(alert: Alert, *, policy: DrainPolicy, nodes: set[str], decisions: list[Decision],
             now: float) -> str | None:
    if alert.risk < policy.risk_threshold:
        return f"risk {alert.risk:.2f} is below the policy's {policy.risk_threshold:.2f}"
    if alert.lead_s is not None and alert.lead_s < policy.min_lead_s:
        return (f"predicted lead {alert.lead_s:.0f} s is shorter than the policy's "
                f"{policy.min_lead_s:.0f} s")
    last = max((d for d in decisions if d.node == alert.node and d.state == "done"),
               key=lambda d: d.created_at, default=None)
    if last is not None and now - last.created_at < policy.drain_again_after_s:
        return (f"{alert.node} was drained {_duration(now - last.created_at)} ago (decision "
                f"{last.id}) and is back; the policy drains a node again no sooner than "
                f"{_duration(policy.drain_again_after_s)} after its last drain: alert only "
                f"until then, or until an admin marks that drain repaired (POST "
                f"/api/v1/jobs/{last.job}/decisions/{last.id}/repaired)")
    recent = [d for d in decisions
              if d.state in (*OPEN_STATES, *DRAINED_STATES) and d.created_at >= now - 3600.0]
    if len(recent) >= policy.max_drains_per_hour:
        return f"job already had {len(recent)} drain(s) in the last hour (policy max " \
               f"{policy.max_drains_per_hour})"
    # A node drained moments ago still looks active until its last steps age out of the window.
    leaving = {d.node for d in decisions if d.state in OPEN_STATES
               or (d.state == "done" and d.updated_at >= now - policy.active_window_s)}
    remaining = len(nodes - leaving - {alert.node})
    if remaining < policy.min_nodes:
        return (f"draining {alert.node} would leave {remaining} node(s), below the minimum of "
                f"{policy.min_nodes}: alert only")
    return None


def open_decisions(session: Session, *, job: str) -> list[Decision]:
    """The job's pending and acknowledged decisions, oldest first."""
    query = select(Decision).where(Decision.job == job, Decision.state.in_(OPEN_STATES))
    return list(session.scalars(query.order_by(Decision.id)))


def transition(decision: Decision, to: DecisionState, *, step: int | None = None,
               note: str = "", now: float | None = None) -> bool:
    """Move ``decision`` to ``to``; False if it already was there (idempotent retry)."""
    if decision.state == to:
        return False
    if decision.state not in _ALLOWED_FROM.get(to, ()):
        raise DecisionStateError(decision, to)
    decision.state = to
    decision.updated_at = time.time() if now is None else now
    if step is not None:
        decision.step = step
    decision.reason = f"{decision.reason}\n{to}: {note}" if note else f"{decision.reason}\n{to}"
    return True
