"""The durable webhook outbox: one row per (alert transition, subscription), written in the
same transaction as the alert, delivered at least once by ``api.webhooks``.

Rows of one subscription are delivered in id order (a receiver sees 'firing' before the
'resolved' of the same alert); a failing receiver backs off alone.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from sqlalchemy import Float, Index, Integer, String, Text, func, select, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from api.subscriptions import Subscription
from collector.schema import Base

PENDING, DELIVERED, REJECTED, CANCELLED = "pending", "delivered", "rejected", "cancelled"


class Delivery(Base):
    """One notification owed to one receiver."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(36), unique=True)
    """Idempotency key, sent as ``X-Foreshock-Delivery``; the same on every retry."""
    subscription_id: Mapped[int] = mapped_column(Integer)
    alert_id: Mapped[int] = mapped_column(Integer, index=True)
    status: Mapped[str] = mapped_column(String(16))
    """``firing`` or ``resolved``: the alert's state when this was enqueued."""
    alert: Mapped[str] = mapped_column(Text)
    """JSON of the Alertmanager-format alert as it was when enqueued."""
    state: Mapped[str] = mapped_column(String(16), default=PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    delivered_at: Mapped[float | None] = mapped_column(Float)
    last_error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_outbox_state_sub_id", "state", "subscription_id", "id"),)

    def alert_payload(self) -> dict[str, Any]:
        return dict(json.loads(self.alert))


def enqueue(session: Session, *, alert_id: int, status: str, labels: dict[str, str],
            alert: dict[str, Any]) -> list[Delivery]:
    """Owe ``alert`` to every enabled subscription whose filters match ``labels``."""
    now = time.time()
    subs = session.scalars(select(Subscription).where(Subscription.enabled.is_(True))).all()
    rows = [
        Delivery(key=str(uuid.uuid4()), subscription_id=s.id, alert_id=alert_id, status=status,
                 alert=json.dumps(alert), state=PENDING, attempts=0, next_attempt_at=now,
                 created_at=now)
        for s in subs if s.matches(labels)
    ]
    session.add_all(rows)
    return rows


def due_subscriptions(session: Session, now: float) -> list[int]:
    """Subscriptions with a pending delivery whose next attempt is due."""
    query = (select(Delivery.subscription_id)
             .where(Delivery.state == PENDING, Delivery.next_attempt_at <= now).distinct())
    return list(session.scalars(query))


def head(session: Session, subscription_id: int) -> Delivery | None:
    """The oldest pending delivery of a subscription: the next one it must receive."""
    query = (select(Delivery)
             .where(Delivery.state == PENDING, Delivery.subscription_id == subscription_id)
             .order_by(Delivery.id).limit(1))
    return session.scalars(query).first()


def cancel_for(session: Session, subscription_id: int) -> None:
    """A deleted subscription is owed nothing more."""
    session.execute(update(Delivery)
                    .where(Delivery.subscription_id == subscription_id, Delivery.state == PENDING)
                    .values(state=CANCELLED, last_error="subscription deleted"))


def pending_count(session: Session) -> int:
    return int(session.scalar(select(func.count()).where(Delivery.state == PENDING)) or 0)
