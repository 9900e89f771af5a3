"""Webhook subscriptions: a URL, a secret and filters, managed through the admin API or
declared in ``settings.webhooks_file`` (YAML or JSON), which is applied at start-up.

Secrets are stored so deliveries can be signed; no response and no log line ever holds one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from fastapi import APIRouter, Depends, HTTPException, status
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from sqlalchemy import Boolean, Float, Integer, String, Text, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from api.deps import get_store, require_admin
from collector.schema import Base
from collector.store import Store

MIN_SECRET_CHARS = 16


class Subscription(Base):
    """A receiver of alert webhooks."""

    __tablename__ = "subscriptions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    url: Mapped[str] = mapped_column(Text)
    secret: Mapped[str] = mapped_column(Text)
    filters: Mapped[str] = mapped_column(Text, default="{}")
    """JSON object: ``severity``, ``job``, ``kind`` -> list of accepted values (empty: any)."""
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    source: Mapped[str] = mapped_column(String(16), default="api")
    """``api`` or ``file`` (declared in ``webhooks_file``; the API will not edit it)."""
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    def matches(self, labels: dict[str, str]) -> bool:
        return all(not accepted or labels.get(key) in accepted
                   for key, accepted in json.loads(self.filters or "{}").items())


class Filters(BaseModel):
    """Which alerts a subscription receives; an empty list accepts everything."""

    model_config = ConfigDict(extra="forbid")
    severity: list[Literal["critical", "warning"]] = Field(default_factory=list)
    job: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    kind: list[Literal["gpu", "link", "node"]] = Field(default_factory=list)


def _check_url(v: str) -> str:
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"url must be an http:// or https:// URL with a host, got {v!r}")
    return v


def _weak_secret(secret: SecretStr | None) -> str | None:
    """Why ``secret`` is too weak, or None. Checked outside pydantic so that a 422 never
    echoes the offered secret back as its ``input``."""
    if secret is not None and len(secret.get_secret_value()) < MIN_SECRET_CHARS:
        return f"secret must be at least {MIN_SECRET_CHARS} characters"
    return None


def _require_strong(secret: SecretStr | None) -> None:
    problem = _weak_secret(secret)
    if problem:
        raise HTTPException(422,
                            [{"type": "value_error", "loc": ["body", "secret"], "msg": problem}])


class SubscriptionIn(BaseModel):
    """A new subscription."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")
    url: str = Field(max_length=2048)
    secret: SecretStr = Field(description="HMAC-SHA256 key for the X-Foreshock-Signature header.")
    filters: Filters = Field(default_factory=Filters)
    enabled: bool = True

    _url = field_validator("url")(_check_url)


class SubscriptionPatch(BaseModel):
    """Fields to change; the others stay."""

    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(None, max_length=2048)
    secret: SecretStr | None = None
    filters: Filters | None = None
    enabled: bool | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else _check_url(v)


class SubscriptionOut(BaseModel):
    """A subscription as the API shows it: never its secret."""

    id: int
    name: str
    url: str
    filters: Filters
    enabled: bool
    source: str
    secret_set: bool = True
    created_at: float
    updated_at: float

    @classmethod
    def of(cls, s: Subscription) -> SubscriptionOut:
        return cls(id=s.id, name=s.name, url=s.url, filters=Filters(**json.loads(s.filters)),
                   enabled=s.enabled, source=s.source, created_at=s.created_at,
                   updated_at=s.updated_at)


class SubscriptionFileError(ValueError):
    """``webhooks_file`` cannot be read or holds an invalid subscription."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"webhooks_file {path}: {problem}")
        self.path, self.problem = path, problem


def load_file(path: Path) -> list[SubscriptionIn]:
    """Subscriptions declared in ``path``: a list, or ``{subscriptions: [...]}``, YAML or JSON.

    Each entry has ``name``, ``url``, ``secret`` (or ``secret_file``), optional ``filters``.
    """
    try:
        raw: Any = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SubscriptionFileError(path, f"cannot be read: {exc}") from exc
    entries = raw.get("subscriptions") if isinstance(raw, dict) else raw
    if not isinstance(entries, list):
        raise SubscriptionFileError(path, "expected a list of subscriptions (or 'subscriptions:')")
    specs = []
    for i, entry in enumerate(entries):
        if isinstance(entry, dict) and "secret_file" in entry:
            entry = dict(entry)
            try:
                entry["secret"] = Path(entry.pop("secret_file")).read_text().strip()
            except OSError as exc:
                raise SubscriptionFileError(path, f"subscriptions[{i}].secret_file: {exc}") from exc
        try:
            spec = SubscriptionIn.model_validate(entry)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise SubscriptionFileError(path, f"subscriptions[{i}].{where}: {err['msg']}") from exc
        if problem := _weak_secret(spec.secret):
            raise SubscriptionFileError(path, f"subscriptions[{i}].{problem}")
        specs.append(spec)
    return specs


def _apply(sub: Subscription, spec: SubscriptionIn | SubscriptionPatch) -> None:
    if spec.url is not None:
        sub.url = spec.url
    if spec.secret is not None:
        sub.secret = spec.secret.get_secret_value()
    if spec.filters is not None:
        sub.filters = spec.filters.model_dump_json()
    if spec.enabled is not None:
        sub.enabled = spec.enabled
    sub.updated_at = time.time()


def sync_file(session: Session, specs: list[SubscriptionIn]) -> None:
    """Make the file-declared subscriptions exactly ``specs`` (by name)."""
    wanted = {s.name: s for s in specs}
    for sub in session.scalars(select(Subscription)).all():
        if sub.name in wanted:
            _apply(sub, wanted.pop(sub.name))
            sub.source = "file"
        elif sub.source == "file":
            session.delete(sub)  # its pending deliveries are cancelled by the delivery loop
    for spec in wanted.values():
        sub = Subscription(name=spec.name, source="file", created_at=time.time())
        _apply(sub, spec)
        session.add(sub)


router = APIRouter(prefix="/api/v1/subscriptions", tags=["subscriptions"],
                   dependencies=[Depends(require_admin)])
StoreDep = Annotated[Store, Depends(get_store)]


def _get(session: Session, sub_id: int, *, editable: bool = False) -> Subscription:
    sub = session.get(Subscription, sub_id)
    if sub is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no subscription with id {sub_id}")
    if editable and sub.source == "file":
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"subscription {sub.name!r} is declared in webhooks_file: edit that")
    return sub


@router.post("", status_code=status.HTTP_201_CREATED)
def create_subscription(spec: SubscriptionIn, store: StoreDep) -> SubscriptionOut:
    """Add a receiver; it gets alerts that fire from now on."""
    _require_strong(spec.secret)
    with store.session() as session:
        if session.scalars(select(Subscription).where(Subscription.name == spec.name)).first():
            raise HTTPException(status.HTTP_409_CONFLICT,
                                f"a subscription named {spec.name!r} exists")
        sub = Subscription(name=spec.name, source="api", created_at=time.time())
        _apply(sub, spec)
        session.add(sub)
        session.flush()
        return SubscriptionOut.of(sub)


@router.get("")
def list_subscriptions(store: StoreDep) -> list[SubscriptionOut]:
    with store.session() as session:
        return [SubscriptionOut.of(s)
                for s in session.scalars(select(Subscription).order_by(Subscription.id))]


@router.get("/{sub_id}")
def get_subscription(sub_id: int, store: StoreDep) -> SubscriptionOut:
    with store.session() as session:
        return SubscriptionOut.of(_get(session, sub_id))


@router.patch("/{sub_id}")
def update_subscription(sub_id: int, patch: SubscriptionPatch, store: StoreDep) -> SubscriptionOut:
    _require_strong(patch.secret)
    with store.session() as session:
        sub = _get(session, sub_id, editable=True)
        _apply(sub, patch)
        return SubscriptionOut.of(sub)


@router.delete("/{sub_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_subscription(sub_id: int, store: StoreDep) -> None:
    """Remove a receiver; the delivery loop cancels what it was still owed."""
    with store.session() as session:
        session.delete(_get(session, sub_id, editable=True))
