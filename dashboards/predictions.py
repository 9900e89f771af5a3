"""Predictions: risk over time, the alerts it raised with their lead times, the model in use."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models

from dashboards import variables
from dashboards.panels import RISK_THRESHOLDS, Board
from dashboards.telemetry import signals

UID = "foreshock-predictions"

_ENTITY = (
    "{t}.node || coalesce(' gpu ' || {t}.gpu, '') || coalesce(' → ' || {t}.peer, '')"
    " || ' (' || {t}.kind || ')'"
)

_ALERT_ANNOTATION = f"""
SELECT to_timestamp(a.starts_at) AS "time", to_timestamp(a.ends_at) AS timeend,
       a.severity || ': ' || {_ENTITY.format(t="a")} || ' risk ' || round(a.risk::numeric, 2)
         AS text,
       'alert,' || a.severity AS tags
FROM alerts a
WHERE a.job = '$job' AND a.starts_at <= $__unixEpochTo()
  AND coalesce(a.ends_at, $__unixEpochTo()) >= $__unixEpochFrom()
ORDER BY 1
"""

_RISK = f"""
WITH top AS (
  SELECT node, gpu, peer, kind FROM risk_scores
  WHERE job = '$job' AND $__unixEpochFilter(ts)
  GROUP BY 1, 2, 3, 4 ORDER BY max(risk) DESC LIMIT 10
)
SELECT $__unixEpochGroupAlias(r.ts, $__interval), {_ENTITY.format(t="r")} AS metric,
       max(r.risk) AS "value"
FROM risk_scores r
JOIN top t ON t.node = r.node AND t.kind = r.kind
  AND coalesce(t.gpu, -1) = coalesce(r.gpu, -1) AND coalesce(t.peer, '') = coalesce(r.peer, '')
WHERE r.job = '$job' AND $__unixEpochFilter(r.ts)
GROUP BY 1, 2
ORDER BY 1, 2
"""

_FIRED = """
SELECT $__unixEpochGroupAlias(starts_at, $__interval), severity AS metric, count(*) AS "value"
FROM alerts
WHERE job = '$job' AND $__unixEpochFilter(starts_at)
GROUP BY 1, 2
ORDER BY 1, 2
"""

_HISTORY = f"""
SELECT to_timestamp(a.starts_at) AS started, to_timestamp(a.ends_at) AS ended, a.state,
       a.severity, a.node, a.gpu, a.peer, a.kind, a.risk, a.lead_s AS "predicted lead (s)",
       (SELECT min(ev.ts) FROM events ev JOIN entities e ON e.id = ev.entity_id
        WHERE e.job = a.job AND e.node = a.node AND ev.kind = 'xid'
          AND ev.ts >= a.starts_at) - a.starts_at AS "first XID after (s)",
       {signals("a.signals")} AS signals, a.model_version AS model, a.acked_by AS "acked by"
FROM alerts a
WHERE a.job = '$job' AND a.starts_at <= $__unixEpochTo()
  AND coalesce(a.ends_at, $__unixEpochTo()) >= $__unixEpochFrom()
ORDER BY a.starts_at DESC
LIMIT 200
"""

_TRANSITIONS = """
SELECT to_timestamp(h.ts) AS "time", a.node, a.gpu, a.peer, a.kind, h.state, h.risk
FROM alert_history h
JOIN alerts a ON a.id = h.alert_id
WHERE a.job = '$job' AND $__unixEpochFilter(h.ts)
ORDER BY h.ts DESC
LIMIT 200
"""

_MODELS = """
SELECT model_version AS model, to_timestamp(min(ts)) AS "first score",
       to_timestamp(max(ts)) AS "last score", count(*) AS scores
FROM risk_scores
WHERE job = '$job' AND $__unixEpochFilter(ts)
GROUP BY 1
ORDER BY max(ts) DESC
"""


def build() -> models.Dashboard:
    """The Predictions dashboard."""
    return (
        Board(
            uid=UID,
            title="Foreshock / Predictions",
            description="Predicted risk per entity over time, the alerts it raised with their "
            "lead times, and the model versions that scored.",
            tags=["predictions"],
        )
        .variable(variables.job())
        .annotation("Alerts", _ALERT_ANNOTATION, color="orange")
        .timeseries("Risk of the ten riskiest entities", _RISK, unit="percentunit", span=24,
                    thresholds=RISK_THRESHOLDS,
                    description="Probability of failure within the horizon, per GPU, link "
                    "or node.")
        .timeseries("Alerts raised", _FIRED, unit="none", bars=True,
                    description="Alerts that started firing, by severity.")
        .table("Model versions", _MODELS, span=12,
               description="Which model versions scored in the range.")
        .table("Alert history", _HISTORY, height=10, gauge_columns=("risk",),
               description="Alerts of the range with the predicted lead time and the time to "
               "the first XID that followed on the node.")
        .table("Alert state changes", _TRANSITIONS,
               description="Every firing and resolved transition.")
        .build()
    )
