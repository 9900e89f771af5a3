"""The service's settings: one pydantic-settings class, read once at start-up, passed down."""

from __future__ import annotations

import shlex
from pathlib import Path

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def drain_argv(template: str, *, node: str, job: str) -> list[str]:
    """The drain command for ``node``: ``template`` split as a shell would, then each argument
    filled, so that a node name is one argument whatever its spaces or quotes (filled first,
    "n1 n2" drained two nodes, and a quote stopped the split)."""
    return [part.format(node=node, job=job) for part in shlex.split(template)]


class Settings(BaseSettings):
    """Every knob of ``foreshock serve``; each can be set as ``FORESHOCK_<NAME>``."""

    # inf would pass every bound here and stall a loop for ever (sleep(inf), no scoring)
    model_config = SettingsConfigDict(env_prefix="FORESHOCK_", frozen=True, extra="forbid",
                                      allow_inf_nan=False)

    # --- store and HTTP (collector issue) ---
    db_url: str = Field("sqlite:///foreshock.db", description="SQLAlchemy URL of the store.")
    host: str = Field("127.0.0.1", description="Address to bind; loopback unless told otherwise.")
    port: int = Field(4318, ge=0, le=65535, description="Port (4318 is OTLP/HTTP's).")
    ingest_token: SecretStr | None = Field(
        None, description="If set, POST /v1/metrics requires 'Authorization: Bearer <token>'.")
    max_body_bytes: int = Field(
        16 * 1024 * 1024, gt=0, description="Largest OTLP body accepted, after decompression.")
    max_series_per_job: int = Field(
        200_000, gt=0, description="Series-cardinality limit per job for non-canonical metrics.")
    max_future_s: float = Field(
        300.0, ge=0, description="Points stamped further than this in the future are rejected.")
    raw_retention_s: float = Field(
        7 * 86400.0, gt=0, description="How long raw points are kept before only rollups remain.")
    rollup_retention_s: float = Field(
        90 * 86400.0, gt=0, description="How long 1-minute rollups are kept; OTLP points older "
        "than this are refused (the next pass would drop them), so a sender whose clock is off "
        "is told.")
    maintenance_interval_s: float = Field(
        60.0, gt=0, description="How often rollups and retention run.")
    compact_after_s: float = Field(
        3600.0, ge=0, description="PostgreSQL: narrow points (train.*, net.*) older than this "
        "move into per-series hour chunks (~95 bytes a point down to ~1-13).")

    # --- predictor (predictor issue) ---
    score_interval_s: float = Field(
        30.0, gt=0, description="How often the service scores entities with fresh data.")
    model_path: Path | None = Field(
        None, description="skops model file; None uses the model shipped with Foreshock.")
    score_window_s: float = Field(
        6 * 3600.0, gt=0, description="History read at start-up to warm the feature windows.")
    alert_fire_at: float | None = Field(
        None, ge=0, le=1, description="Risk that opens an alert; None: the predictor's default.")
    alert_persist_s: float | None = Field(
        None, ge=0, description="Seconds a risk must persist before an alert opens; None: default.")
    alert_time_compression: float = Field(
        1.0, gt=0, description="Divide every alert lane's hold and the wait to resolve by this, "
        "for telemetry that compresses hours into minutes (foreshock demo: 150). "
        "alert_persist_s, when set, is taken as given.")

    # --- alerts (alerts issue) ---
    admin_token: SecretStr | None = Field(
        None, description="Bearer token for admin endpoints (subscriptions, silences, decisions).")
    external_url: str = Field(
        "http://127.0.0.1:4318", description="URL of this service, put in alert payloads.")
    webhooks_file: Path | None = Field(
        None, description="YAML/JSON file of declarative webhook subscriptions.")
    alertmanager_url: str | None = Field(
        None, description="If set, alerts are also pushed to <url>/api/v2/alerts.")
    webhook_poll_interval_s: float = Field(
        0.25, gt=0, description="How often the delivery loop looks for due webhook deliveries.")
    webhook_timeout_s: float = Field(
        5.0, gt=0, description="A receiver that has not answered within this is retried later.")
    webhook_backoff_base_s: float = Field(
        1.0, gt=0, description="First retry delay; doubles each failed attempt (with jitter).")
    webhook_backoff_max_s: float = Field(
        60.0, gt=0, description="Longest delay between two attempts to one receiver.")
    alertmanager_resend_s: float = Field(
        60.0, gt=0, description="How often firing alerts are re-sent to Alertmanager.")

    # --- decisions (checkpoint-and-drain issue) ---
    drain_risk_threshold: float = Field(
        0.5, ge=0, le=1, description="Firing alerts at or above this risk become drain decisions.")
    drain_min_lead_s: float = Field(
        0.0, ge=0, description="Drain only if the predicted lead time is at least this long.")
    drain_max_per_hour: int = Field(
        2, ge=0, description="At most this many drains of one job per rolling hour.")
    drain_min_nodes: int = Field(
        1, ge=1, description="Never drain a job below this many nodes (alert only instead).")
    drain_active_window_s: float = Field(
        120.0, gt=0, description="A node hosts a running job if its ranks stepped within this.")
    drain_again_after_s: float = Field(
        21600.0, ge=0, description="A drained node back in the job drains again no sooner than "
        "this after its last drain (alert only until then).")
    drain_command: str | None = Field(
        None, description="Run when a node is drained, e.g. 'scontrol update NodeName={node} "
        "State=DRAIN Reason=foreshock'; {node} and {job} are filled in.")
    drain_command_timeout_s: float = Field(
        30.0, gt=0, description="The drain command is killed after this long.")

    @field_validator("drain_command")
    @classmethod
    def _fillable(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None  # blank: no command (a bare FORESHOCK_DRAIN_COMMAND= in a .env file)
        try:
            drain_argv(v, node="n", job="j")
        except (ValueError, KeyError, IndexError) as exc:  # a lone quote, {rack}, {0}
            raise ValueError(f"drain_command={v!r} cannot be run: {exc!r}; give a command whose "
                             "only fields are {node} and {job}") from exc
        return v

    @field_validator("db_url")
    @classmethod
    def _known_scheme(cls, v: str) -> str:
        if not (v.startswith("sqlite") or v.startswith("postgresql")):
            raise ValueError(
                f"db_url={v!r}: use sqlite:///path.db or postgresql+psycopg://user@host/db")
        return v


def settings_error(exc: ValidationError) -> str:
    """What was wrong with the settings, one line per setting, named as a user sets it
    (``FORESHOCK_<NAME>``), with the value given where it is a known setting's and no secret
    (an unknown name may be a token's, misspelt)."""
    lines = []
    for e in exc.errors():
        key = str(e["loc"][0]) if e["loc"] else ""
        name = key.upper() if key.upper().startswith("FORESHOCK_") else f"FORESHOCK_{key.upper()}"
        field = Settings.model_fields.get(key)
        shown = field is not None and "SecretStr" not in str(field.annotation) and "input" in e
        lines.append(f"{name}{'=' + repr(e['input']) if shown else ''}: {e['msg']}")
    return "\n".join(lines)
