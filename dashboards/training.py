"""Training: step time per rank, where it goes (compute or collectives), stragglers, kernels."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models

from dashboards import variables
from dashboards.panels import Board
from dashboards.telemetry import MEAN, RANK_LABEL, SERIES_POINTS, series_points, train_mean_by

UID = "foreshock-training"

_NODES = " AND e.node IN ($node)"

_SPLIT = f"""
SELECT $__unixEpochGroupAlias(p.ts, $__interval),
       CASE s.name WHEN 'train.compute.duration' THEN 'compute' ELSE 'collective' END AS metric,
       {MEAN} AS "value"
FROM series s
JOIN entities e ON e.id = s.entity_id
{SERIES_POINTS}
WHERE s.job = '$job' AND $__unixEpochFilter(p.ts){_NODES}
  AND s.name IN ('train.compute.duration', 'train.collective.duration')
GROUP BY 1, 2
ORDER BY 1, 2
"""

_BY_OP = train_mean_by(
    "train.collective.duration",
    "coalesce(s.attrs::json ->> 'op', 'all')",
    extra_filter=_NODES,
)

_STRAGGLERS = f"""
WITH per_rank AS (
  SELECT e.node, e.rank, {MEAN} AS step_s
  {series_points("train.step.duration", extra_filter=_NODES).strip()}
  GROUP BY e.node, e.rank
), typical AS (
  SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY step_s) AS median_s FROM per_rank
)
SELECT node, rank, step_s AS "mean step (s)", median_s AS "job median (s)",
       step_s / nullif(median_s, 0) AS "vs median"
FROM per_rank, typical
ORDER BY 5 DESC NULLS LAST
LIMIT 20
"""

_KERNELS = f"""
SELECT coalesce(s.attrs::json ->> 'kernel', '?') AS kernel, sum(p.value) AS "time (s)",
       count(DISTINCT s.entity_id) AS ranks
{series_points("train.kernel.duration", extra_filter=_NODES).strip()}
GROUP BY 1
ORDER BY 2 DESC
LIMIT 15
"""


def build() -> models.Dashboard:
    """The Training dashboard."""
    return (
        Board(
            uid=UID,
            title="Foreshock / Training",
            description="Step time per rank, compute versus collective time, stragglers and "
            "top kernels of one job.",
            tags=["training"],
        )
        .variable(variables.job())
        .variable(variables.node(having="e.rank IS NOT NULL OR (e.gpu IS NULL AND e.peer IS NULL)"))
        .timeseries("Step time per rank",
                    train_mean_by("train.step.duration", RANK_LABEL, extra_filter=_NODES),
                    unit="s", span=24, description="Wall time of one optimizer step.")
        .timeseries("Compute vs collective", _SPLIT, unit="s", stacked=True,
                    description="Mean time per step computing and waiting in collectives.")
        .timeseries("Collective time by op", _BY_OP, unit="s",
                    description="Mean duration of a collective as the ranks saw it, per op.")
        .table("Stragglers", _STRAGGLERS, span=12,
               description="Ranks whose mean step time is furthest above the job's median.")
        .table("Top kernels", _KERNELS, span=12,
               description="Kernels with the most time in profiled windows.")
        .build()
    )
