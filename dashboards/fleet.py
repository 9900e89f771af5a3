"""Fleet: the first dashboard on call: who is at risk now, what fired, what was drained."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models

from dashboards import variables
from dashboards.panels import RISK_THRESHOLDS, Board
from dashboards.telemetry import SERIES_POINTS, signals

UID = "foreshock-fleet"

RECENT_S = 900
"""'Now' panels read the last 15 minutes of the range: a scorer writes every minute or so."""

_XID_ANNOTATION = """
SELECT to_timestamp(ev.ts) AS "time",
       'XID ' || ev.code || ' on ' || e.node || coalesce(' gpu ' || e.gpu, '') AS text,
       'xid,' || e.node AS tags
FROM events ev
JOIN entities e ON e.id = ev.entity_id
WHERE $__unixEpochFilter(ev.ts) AND ev.kind = 'xid' AND e.job IN ($job)
ORDER BY 1
"""

_DECISION_ANNOTATION = """
SELECT to_timestamp(d.created_at) AS "time",
       'checkpoint and drain ' || d.node || coalesce(' at step ' || d.step, '')
         || ' (' || d.state || ')' AS text,
       'drain,' || d.state AS tags
FROM decisions d
WHERE $__unixEpochFilter(d.created_at) AND d.job IN ($job)
ORDER BY 1
"""

_FIRING = "SELECT count(*) AS \"firing\" FROM alerts WHERE state = 'firing' AND job IN ($job)"

_GPUS_REPORTING = f"""
SELECT count(*) AS "gpus"
FROM entities e
WHERE e.job IN ($job) AND e.gpu IS NOT NULL
  AND EXISTS (SELECT 1 FROM gpu_samples g WHERE g.entity_id = e.id
              AND g.ts > $__unixEpochTo() - {RECENT_S} AND g.ts <= $__unixEpochTo())
"""

_GOODPUT_SELECT = f"""
       sum(p.value) FILTER (WHERE s.name = 'train.compute.duration')
         / nullif(sum(p.value) FILTER (WHERE s.name = 'train.step.duration'), 0) AS "value"
FROM series s
{SERIES_POINTS}
WHERE s.job IN ($job) AND $__unixEpochFilter(p.ts) AND s.stat IN ('', 'sum')
  AND s.name IN ('train.compute.duration', 'train.step.duration')
"""

_GOODPUT_NOW = f'SELECT {_GOODPUT_SELECT.strip()}'.replace('"value"', '"goodput"')

_GOODPUT = f"""
SELECT $__unixEpochGroupAlias(p.ts, $__interval), s.job AS metric,
{_GOODPUT_SELECT.strip()}
GROUP BY 1, 2
ORDER BY 1, 2
"""

_DRAINS = """
SELECT count(*) AS "decisions"
FROM decisions
WHERE job IN ($job) AND $__unixEpochFilter(created_at)
"""

_RISK_NOW = f"""
SELECT node, gpu, peer, kind, risk, lead_s AS "lead (s)", {signals("signals")} AS signals,
       model_version AS model,
       to_timestamp(ts) AS "scored at", job
FROM (
  SELECT DISTINCT ON (job, node, gpu, peer, kind) *
  FROM risk_scores
  WHERE job IN ($job) AND ts > $__unixEpochTo() - {RECENT_S} AND ts <= $__unixEpochTo()
  ORDER BY job, node, gpu, peer, kind, ts DESC
) latest
ORDER BY risk DESC
LIMIT 100
"""

_RISK_BY_NODE = """
WITH top AS (
  SELECT node FROM risk_scores
  WHERE job IN ($job) AND $__unixEpochFilter(ts)
  GROUP BY node ORDER BY max(risk) DESC LIMIT 10
)
SELECT $__unixEpochGroupAlias(r.ts, $__interval), r.node AS metric, max(r.risk) AS "value"
FROM risk_scores r
JOIN top ON top.node = r.node
WHERE r.job IN ($job) AND $__unixEpochFilter(r.ts)
GROUP BY 1, 2
ORDER BY 1, 2
"""

_ACTIVE_ALERTS = f"""
SELECT to_timestamp(starts_at) AS since, severity, node, gpu, peer, kind, risk,
       lead_s AS "lead (s)", {signals("signals")} AS signals, action,
       acked_by AS "acked by", job
FROM alerts
WHERE state = 'firing' AND job IN ($job)
ORDER BY risk DESC
"""

_DECISIONS = """
SELECT to_timestamp(created_at) AS created, node, action, state, step, reason,
       to_timestamp(updated_at) AS updated, job
FROM decisions
WHERE job IN ($job) AND $__unixEpochFilter(created_at)
ORDER BY created_at DESC
LIMIT 100
"""

_XIDS = """
SELECT $__unixEpochGroupAlias(ev.ts, $__interval), 'XID ' || ev.code AS metric,
       count(*) AS "value"
FROM events ev
JOIN entities e ON e.id = ev.entity_id
WHERE $__unixEpochFilter(ev.ts) AND ev.kind = 'xid' AND e.job IN ($job)
GROUP BY 1, 2
ORDER BY 1, 2
"""


def build() -> models.Dashboard:
    """The Fleet dashboard."""
    return (
        Board(
            uid=UID,
            title="Foreshock / Fleet",
            description="Predicted risk, firing alerts, XID failures, checkpoints, drains and "
            "goodput across the fleet.",
            tags=["fleet"],
        )
        .variable(variables.job(multi=True))
        .annotation("XID errors", _XID_ANNOTATION, color="red")
        .annotation("Checkpoint and drain", _DECISION_ANNOTATION, color="blue")
        .stat("Alerts firing", _FIRING, description="Alerts firing now.", unit="none")
        .stat("GPUs reporting", _GPUS_REPORTING, unit="none",
              description="GPUs with samples in the last 15 minutes of the range.")
        .stat("Goodput", _GOODPUT_NOW, unit="percentunit",
              description="Compute time over step time across the jobs' ranks in the range.")
        .stat("Checkpoint-and-drain decisions", _DRAINS, unit="none",
              description="Decisions taken in the range.")
        .row("Risk")
        .table("Risk by node and GPU, worst first", _RISK_NOW, gauge_columns=("risk",),
               description="Latest predicted failure probability per GPU, link and node "
               "(scores of the last 15 minutes of the range), with its top signals.")
        .timeseries("Highest risk per node", _RISK_BY_NODE, unit="percentunit",
                    thresholds=RISK_THRESHOLDS,
                    description="Worst score of each of the ten riskiest nodes over time.")
        .timeseries("Goodput", _GOODPUT, unit="percentunit",
                    description="Share of step time spent computing rather than waiting "
                    "in collectives, per job.")
        .row("Alerts, failures and actions")
        .table("Firing alerts", _ACTIVE_ALERTS, gauge_columns=("risk",),
               description="Alerts firing now, riskiest first, with the recommended action.")
        .timeseries("XID errors", _XIDS, unit="none", bars=True,
                    description="XID events reported by the drivers, by code.")
        .table("Checkpoint-and-drain decisions", _DECISIONS, span=12,
               description="Decisions taken in the range and their state.")
        .build()
    )
