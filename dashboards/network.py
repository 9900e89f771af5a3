"""Network: probe bandwidth and latency per (node, peer), the node x peer matrix, bad links."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models

from dashboards import variables
from dashboards.panels import Board
from dashboards.telemetry import SERIES_POINTS, link_mean

UID = "foreshock-network"

RECENT_S = 900
"""'Now' is the mean of the last 15 minutes of the range."""

_MATRIX = f"""
SELECT e.node, e.peer, avg(p.value) AS bandwidth
FROM series s
JOIN entities e ON e.id = s.entity_id
{SERIES_POINTS}
WHERE s.job = '$job' AND s.name = 'net.link.bandwidth' AND $__unixEpochFilter(p.ts)
  AND e.node IN ($node)
GROUP BY 1, 2
ORDER BY 1, 2
"""

_TO_MATRIX = models.DataTransformerConfig(
    id_val="groupingToMatrix",
    options={"columnField": "peer", "rowField": "node", "valueField": "bandwidth"},
)

_DEGRADED = f"""
WITH per_link AS (
  SELECT e.node, e.peer,
         avg(p.value) FILTER (WHERE s.name = 'net.link.bandwidth'
                              AND p.ts > $__unixEpochTo() - {RECENT_S}) AS bw_now,
         avg(p.value) FILTER (WHERE s.name = 'net.link.bandwidth') AS bw_mean,
         avg(p.value) FILTER (WHERE s.name = 'net.link.latency'
                              AND p.ts > $__unixEpochTo() - {RECENT_S}) AS lat_now,
         avg(p.value) FILTER (WHERE s.name = 'net.link.latency') AS lat_mean
  FROM series s
  JOIN entities e ON e.id = s.entity_id
  {SERIES_POINTS}
  WHERE s.job = '$job' AND $__unixEpochFilter(p.ts) AND e.node IN ($node)
    AND s.name IN ('net.link.bandwidth', 'net.link.latency')
  GROUP BY 1, 2
), fleet AS (
  SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY bw_mean) AS bw FROM per_link
)
SELECT node, peer, bw_now AS "bandwidth now", bw_now / nullif(bw_mean, 0) AS "vs own mean",
       bw_now / nullif(fleet.bw, 0) AS "vs fleet median", lat_now AS "latency now",
       lat_now / nullif(lat_mean, 0) AS "latency vs own mean"
FROM per_link, fleet
WHERE bw_now < 0.8 * bw_mean OR bw_now < 0.8 * fleet.bw OR lat_now > 1.5 * lat_mean
ORDER BY bw_now / nullif(fleet.bw, 0) ASC NULLS LAST
LIMIT 50
"""


def build() -> models.Dashboard:
    """The Network dashboard."""
    return (
        Board(
            uid=UID,
            title="Foreshock / Network",
            description="Point-to-point probe bandwidth and latency between nodes, as a "
            "matrix, and the links that degraded.",
            tags=["network"],
        )
        .variable(variables.job())
        .variable(variables.node(having="e.peer IS NOT NULL"))
        .timeseries("Link bandwidth", link_mean("net.link.bandwidth"), unit="Bps",
                    description="Probe throughput from node to peer.")
        .timeseries("Link latency", link_mean("net.link.latency"), unit="s",
                    description="Probe latency from node to peer.")
        .table("Bandwidth matrix (node × peer)", _MATRIX, span=12, height=10,
               transformation=_TO_MATRIX,
               description="Mean probe bandwidth over the range, rows are senders.")
        .table("Degraded links", _DEGRADED, span=12, height=10,
               description="Links whose bandwidth in the last 15 minutes fell under 80% of "
               "their mean over the range or of the fleet's median link, or whose latency rose "
               "above 150% of its mean.")
        .build()
    )
