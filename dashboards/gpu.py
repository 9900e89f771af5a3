"""GPU detail: everything NVML says about the picked GPUs, their XIDs and their risk."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as models

from dashboards import variables
from dashboards.panels import RISK_THRESHOLDS, Board
from dashboards.telemetry import GPU_FILTER, GPU_LABEL, gpu_counter_rate, gpu_gauge, signals

UID = "foreshock-gpu"

_RISK_FILTER = "r.job = '$job' AND r.node IN ($node) AND r.gpu IN ($gpu) AND r.kind = 'gpu'"

_XID_ANNOTATION = f"""
SELECT to_timestamp(ev.ts) AS "time", 'XID ' || ev.code || ' on ' || {GPU_LABEL} AS text,
       'xid' AS tags
FROM events ev
JOIN entities e ON e.id = ev.entity_id
WHERE $__unixEpochFilter(ev.ts) AND ev.kind = 'xid' AND {GPU_FILTER}
ORDER BY 1
"""

_XIDS = f"""
SELECT to_timestamp(ev.ts) AS "time", e.node, e.gpu, ev.code AS xid
FROM events ev
JOIN entities e ON e.id = ev.entity_id
WHERE $__unixEpochFilter(ev.ts) AND ev.kind = 'xid' AND {GPU_FILTER}
ORDER BY ev.ts DESC
LIMIT 200
"""

_RISK = f"""
SELECT $__unixEpochGroupAlias(r.ts, $__interval), r.node || ' gpu ' || r.gpu AS metric,
       max(r.risk) AS "value"
FROM risk_scores r
WHERE $__unixEpochFilter(r.ts) AND {_RISK_FILTER}
GROUP BY 1, 2
ORDER BY 1, 2
"""

_SIGNALS = f"""
SELECT DISTINCT ON (r.node, r.gpu)
       r.node, r.gpu, r.risk, r.lead_s AS "lead (s)", {signals("r.signals")} AS signals,
       r.model_version AS model,
       to_timestamp(r.ts) AS "scored at"
FROM risk_scores r
WHERE $__unixEpochFilter(r.ts) AND {_RISK_FILTER}
ORDER BY r.node, r.gpu, r.ts DESC
"""


def build() -> models.Dashboard:
    """The GPU detail dashboard."""
    return (
        Board(
            uid=UID,
            title="Foreshock / GPU detail",
            description="Temperatures, power, clocks, throttling, ECC, remapped rows, PCIe "
            "and NVLink errors, XIDs and predicted risk of the picked GPUs.",
            tags=["gpu"],
        )
        .variable(variables.job())
        .variable(variables.node(having="e.gpu IS NOT NULL"))
        .variable(variables.gpu())
        .annotation("XID errors", _XID_ANNOTATION, color="red")
        .row("Thermals, power and clocks")
        .timeseries("Temperature", gpu_gauge({"core": "temperature",
                                              "HBM": "memory_temperature"}),
                    unit="celsius", description="GPU core and HBM temperature.")
        .timeseries("Power", gpu_gauge({"power": "power"}), unit="watt",
                    description="Board power draw.")
        .timeseries("SM clock", gpu_gauge({"sm": "clock_sm"}), unit="rotmhz",
                    description="SM clock; a drop under load with throttling active "
                    "means the GPU is being slowed down.")
        .timeseries("Throttle reasons active", gpu_gauge({"thermal": "throttle_thermal",
                                                          "power": "throttle_power"}),
                    unit="percentunit",
                    description="Share of samples with a thermal or power clock-event "
                    "reason active.")
        .timeseries("Utilization", gpu_gauge({"util": "utilization"}), unit="percentunit",
                    description="Fraction of time a kernel ran.")
        .timeseries("Memory used", gpu_gauge({"used": "memory_used"}), unit="bytes",
                    description="Framebuffer in use.")
        .row("Memory errors")
        .timeseries("ECC error rate", gpu_counter_rate({"SBE": "ecc_sbe", "DBE": "ecc_dbe"},
                                                       per_s=60.0),
                    unit="cpm", description="Corrected (SBE) and uncorrected (DBE) ECC errors "
                    "per minute; counter resets are handled.")
        .timeseries("Remapped rows", gpu_gauge({"correctable": "rows_remapped_correctable",
                                                "uncorrectable": "rows_remapped_uncorrectable",
                                                "pending": "rows_remap_pending"}, agg="max"),
                    unit="none", description="Rows remapped after correctable and "
                    "uncorrectable errors, and whether a remap waits for a GPU reset.")
        .row("Interconnect")
        .timeseries("PCIe replay rate", gpu_counter_rate({"replay": "pcie_replay"}, per_s=60.0),
                    unit="cpm", description="PCIe replays per minute.")
        .timeseries("NVLink CRC error rate",
                    gpu_counter_rate({"crc": "nvlink_crc_errors"}, per_s=60.0),
                    unit="cpm", description="NVLink CRC flit errors per minute, all links.")
        .row("XIDs and risk")
        .timeseries("Predicted risk", _RISK, unit="percentunit", thresholds=RISK_THRESHOLDS,
                    description="Probability of failure within the horizon, per GPU.")
        .table("Risk signals", _SIGNALS, span=12, gauge_columns=("risk",),
               description="Latest score of each picked GPU and the signals behind it.")
        .table("XID events", _XIDS, span=12, description="XIDs of the picked GPUs.")
        .build()
    )
