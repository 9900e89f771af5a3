"""The canonical metric catalogue of ../shared/metrics.md: names, units, kinds, columns."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

MAX_ABS_VALUE = 3.4e38
"""Largest magnitude a stored value may have, from OTLP or a fleet trace: no telemetry comes near
it, and PostgreSQL keeps the bounded GPU gauges as float4, which would turn a larger value into
infinity."""
ANY_VALUE: tuple[float, float] = (-MAX_ABS_VALUE, MAX_ABS_VALUE)
"""The bounds of a metric the catalogue bounds no further: whatever the store keeps."""
MAX_INT = 2**31 - 1
"""Largest rank or GPU index the store's integer columns hold (a GPU index at all, in practice)."""

Kind = Literal["gauge", "cumulative", "event", "histogram", "counter"]
Family = Literal["gpu", "train", "net", "foreshock"]


@dataclass(frozen=True, kw_only=True, slots=True)
class MetricSpec:
    """One canonical metric."""

    name: str
    """Canonical dotted name, e.g. ``gpu.ecc.sbe``."""
    unit: str
    """Unit as metrics.md gives it (``s``, ``bytes``, ``C``, ``W``, ``MHz``, ``count``, ``1``)."""
    kind: Kind
    """How the value behaves over time."""
    help: str
    """One line for humans (Prometheus HELP, panel descriptions)."""
    bounds: tuple[float, float] = ANY_VALUE
    """The values a working sensor or probe can report, both ends inclusive. A value outside is
    no reading (a sentinel such as DCGM's blanks, 2**47 for a float field and 2**31 - 16 for a
    32-bit one, or garbage): OTLP ingest rejects the point and a fleet trace reads it as
    missing, since the predictor would read it as the worst GPU it ever saw."""

    @property
    def family(self) -> Family:
        return self.name.split(".", 1)[0]  # type: ignore[return-value]

    @property
    def column(self) -> str:
        """Column name in the wide per-family tables: ``gpu.ecc.sbe`` -> ``ecc_sbe``."""
        return self.name.split(".", 1)[1].replace(".", "_")


COUNT_MAX = float(2**53)
"""Largest count a cumulative error counter reads, either way: the last whole number a float keeps
exactly, and far beyond any GPU's errors (DCGM's blank for a 64-bit field, 2**63 - 16, lies
beyond). Below zero is allowed: only a counter's changes mean anything, and an exporter that
counts from a baseline it took at the job's start reads below zero after a reset."""
DURATION_MAX = 7 * 86400.0
"""Longest step, collective or kernel: a week (a hung one times out long before)."""

_BOUNDS: dict[str, tuple[float, float]] = {
    "1": (0.0, 100.0),  # ratios and 0/1 flags, or percent
    "C": (-273.15, 1000.0),  # below absolute zero, or hotter than any die survives, in C or K
    "W": (0.0, 1e7),  # a GB300 superchip draws 1.4 kW: 1.4e6 in NVML's milliwatts
    "MHz": (0.0, 1e5),  # SM clocks run near 2 GHz
    "count": (-COUNT_MAX, COUNT_MAX),
    "s": (0.0, DURATION_MAX),
    "bytes/s": (0.0, 1e14),  # 100 TB/s, 50x an NVLink 5 GPU's (or 12x, read as bits)
}
"""Bounds by unit (``MetricSpec.bounds``). Loose enough for any hardware of the next years and
for the unit a writer most often confuses with the one metrics.md gives (percent for a ratio,
kelvin for Celsius, milliwatts for watts, as NVML reports them): the features read changes and
peers, which such a trace keeps, so its values are kept too. DCGM's blanks (2**31 - 16 and up)
for a temperature, a power, a clock or a ratio lie beyond them."""


def _m(name: str, unit: str, kind: Kind, help_: str,
       bounds: tuple[float, float] | None = None) -> MetricSpec:
    if bounds is None:
        bounds = _BOUNDS.get(unit, ANY_VALUE)
    return MetricSpec(name=name, unit=unit, kind=kind, help=help_, bounds=bounds)


GPU_METRICS: tuple[MetricSpec, ...] = (
    _m("gpu.utilization", "1", "gauge", "fraction of time a kernel ran"),
    _m("gpu.memory.used", "bytes", "gauge", "framebuffer in use", (0.0, float(2**50))),
    _m("gpu.temperature", "C", "gauge", "GPU core temperature"),
    _m("gpu.memory.temperature", "C", "gauge", "HBM temperature"),
    _m("gpu.power", "W", "gauge", "board power draw"),
    _m("gpu.clock.sm", "MHz", "gauge", "SM clock"),
    _m("gpu.throttle.thermal", "1", "gauge", "a thermal clock-event reason is active"),
    _m("gpu.throttle.power", "1", "gauge", "a power clock-event reason is active"),
    _m("gpu.ecc.sbe", "count", "cumulative", "corrected (single-bit) ECC errors, volatile"),
    _m("gpu.ecc.dbe", "count", "cumulative", "uncorrected (double-bit) ECC errors, volatile"),
    _m("gpu.rows.remapped.correctable", "count", "cumulative",
       "rows remapped after correctable errors"),
    _m("gpu.rows.remapped.uncorrectable", "count", "cumulative",
       "rows remapped after uncorrectable errors"),
    _m("gpu.rows.remap.pending", "1", "gauge", "a row remap waits for a GPU reset"),
    _m("gpu.pcie.replay", "count", "cumulative", "PCIe replay counter"),
    _m("gpu.nvlink.crc_errors", "count", "cumulative", "NVLink CRC flit errors, all links"),
)
"""Sampled GPU metrics, stored one column each in the wide ``gpu_samples`` table."""

# Its value is a code, not a ratio: where one is read, it must be a whole number from 0.
XID = _m("gpu.xid", "1", "event", "an XID event reported by the driver", ANY_VALUE)

SBE_RATE_XID_PER_MIN = 10.0
"""Corrected (single-bit) ECC errors within ``SBE_RATE_WINDOW_S`` at which the driver logs XID
92, "high single bit ECC error rate": read from the counter alone, whatever the errors' cause.
The generator (``predictor.signatures``) and the simulated GPU (``trainer.simulated_gpu``) both
follow it."""
SBE_RATE_WINDOW_S = 60.0

TRAIN_METRICS: tuple[MetricSpec, ...] = (
    _m("train.step.duration", "s", "gauge", "wall time of one optimizer step on a rank"),
    _m("train.compute.duration", "s", "gauge", "part of the step not spent waiting in collectives"),
    _m("train.collective.duration", "s", "histogram",
       "time of one collective from issue to completion as this rank saw it"),
    _m("train.collective.bytes", "bytes", "counter", "payload moved by collectives",
       (0.0, MAX_ABS_VALUE)),
    _m("train.kernel.duration", "s", "gauge", "total time of a kernel in a profiled window"),
)

NET_METRICS: tuple[MetricSpec, ...] = (
    _m("net.link.bandwidth", "bytes/s", "gauge", "point-to-point probe throughput node -> peer"),
    _m("net.link.latency", "s", "gauge", "point-to-point probe latency", (0.0, 3600.0)),
)

RISK = _m("foreshock.risk", "1", "gauge", "predicted probability of failure within the horizon")

CANONICAL: dict[str, MetricSpec] = {
    m.name: m for m in (*GPU_METRICS, XID, *TRAIN_METRICS, *NET_METRICS, RISK)
}
GPU_COLUMNS: dict[str, str] = {m.name: m.column for m in GPU_METRICS}
"""Canonical GPU metric name -> column of ``gpu_samples``."""


def bounds(name: str) -> tuple[float, float]:
    """The values metric ``name`` may take: its ``MetricSpec.bounds``, or the store's whole range
    for a metric the catalogue does not name."""
    spec = CANONICAL.get(name)
    return spec.bounds if spec is not None else ANY_VALUE


def range_text(name: str) -> str:
    """``bounds(name)`` for a message: ``-273.15 to 1000 C``."""
    lo, hi = bounds(name)
    spec = CANONICAL.get(name)
    unit = f" {spec.unit}" if spec is not None and spec.unit != "1" else ""
    return f"{lo:g} to {hi:g}{unit}"

NODE_TRACE_METRICS: tuple[str, ...] = (
    "train.step.duration",
    "train.compute.duration",
    "train.collective.duration",
)
"""The columns of a fleet trace's ``node.csv.gz`` after ``ts,node``."""

LINK_TRACE_METRICS: tuple[str, ...] = ("net.link.bandwidth", "net.link.latency")

DCGM_FIELDS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu.utilization", "name the column gpu.utilization, a ratio: "
                             "DCGM's percent over 100"),
    "DCGM_FI_DEV_FB_USED": ("gpu.memory.used", "name the column gpu.memory.used, in bytes: "
                            "DCGM's MiB times 1048576"),
    "DCGM_FI_DEV_GPU_TEMP": ("gpu.temperature", ""),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gpu.memory.temperature", ""),
    "DCGM_FI_DEV_POWER_USAGE": ("gpu.power", ""),
    "DCGM_FI_DEV_SM_CLOCK": ("gpu.clock.sm", ""),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": (
        "gpu.throttle.thermal", "a bit mask: write gpu.throttle.thermal as 1 where 0x20 or 0x40 "
        "is set, gpu.throttle.power where 0x04 or 0x80 is"),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("gpu.ecc.sbe", ""),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("gpu.ecc.dbe", ""),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("gpu.rows.remapped.correctable", ""),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("gpu.rows.remapped.uncorrectable", ""),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("gpu.rows.remap.pending", ""),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("gpu.pcie.replay", ""),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": ("gpu.nvlink.crc_errors", ""),
    "DCGM_FI_DEV_XID_ERRORS": ("gpu.xid", "events, not a column: one row of events.csv per XID, "
                               "kind xid"),
}
"""dcgm-exporter's field -> the canonical metric carrying the same quantity (metrics.md's DCGM
column), and what to do where more than a rename is needed."""


def _spelling(name: str) -> str:
    return name.lower().replace("_", ".").replace("-", ".")


def suggest(column: str, among: Iterable[str]) -> str | None:
    """Advice for a column no reader uses that most likely meant a metric of ``among`` (those
    its file could have and lacks): DCGM's name for it, or a near spelling; None otherwise."""
    among = list(among)
    dcgm = DCGM_FIELDS.get(column.upper())
    if dcgm is not None and (dcgm[0] in among or dcgm[0] == XID.name):
        return f"DCGM's field for {dcgm[0]}: {dcgm[1] or f'name the column {dcgm[0]}'}"
    keys: dict[str, str] = {}
    for name in among:  # the whole name first, then without its family, then its last part
        keys.setdefault(_spelling(name), name)
    for part in (lambda n: n.split(".", 1)[-1], lambda n: n.rsplit(".", 1)[-1]):
        for name in among:
            keys.setdefault(_spelling(part(name)), name)
    found = difflib.get_close_matches(_spelling(column), list(keys), n=1, cutoff=0.8)
    return f"did you mean {keys[found[0]]}?" if found else None


# Entity attributes (metrics.md): every point carries job and node, the rest where they apply.
ENTITY_ATTRIBUTES: tuple[str, ...] = ("job", "node", "rank", "gpu", "gpu.uuid", "peer")
