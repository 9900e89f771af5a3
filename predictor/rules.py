"""The DCGM-style threshold baseline (``--model rules``): alarm once a counter or gauge has
already crossed a fixed line, as DCGM health watches, dcgm-exporter alert rules and NVSentinel
do. It reads the same features as the learned model, so side-by-side figures compare policies,
not plumbing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.signals import describe

RULES_VERSION = "rules-1"

_PER_HOUR_100 = float(np.log1p(100.0))
_PER_HOUR_480 = float(np.log1p(480.0))
_RECENT_EVENT = 0.3
"""A decayed (1 h) event count above this means an event within about the last hour."""

RULES: dict[str, tuple[tuple[str, str, float], ...]] = {
    "gpu": (
        ("dbe_rate_1h", ">", 0.0),  # any double-bit error
        ("remap_unc_rate_1h", ">", 0.0),  # any uncorrectable row remap
        ("remap_pending_5m", ">", 0.0),  # remap waiting for a reset
        ("xid_mem_1h", ">", _RECENT_EVENT),  # XID 48/63/64/92/94/95
        ("xid_nvlink_1h", ">", _RECENT_EVENT),  # XID 74
        ("xid_bus_1h", ">", _RECENT_EVENT),  # XID 79
        ("sbe_rate_1h", ">", _PER_HOUR_100),  # a high single-bit rate (what XID 92 reports)
        ("pcie_rate_1h", ">", _PER_HOUR_480),  # DCGM's PCIe watch: > 8 replays a minute
        ("nvlink_rate_1h", ">", _PER_HOUR_100),  # NVLink CRC flit errors
        ("temp_5m", ">", 85.0),
        ("throttle_thermal_5m", ">", 0.5),
    ),
    "node": (
        ("compute_z", ">", 20.0),  # straggler: ~50% slower than the job's median node
        ("xid_node_1h", ">", _RECENT_EVENT),
    ),
    "link": (
        ("bw_z", "<", -14.0),  # probe bandwidth about half the other links' median
    ),
}


@dataclass(kw_only=True)
class RulesModel:
    """Same ``score`` interface as ``RiskModel``: risk 1 when any rule fires, else 0."""

    version: str = RULES_VERSION
    horizon_s: float = 6 * 3600.0

    def score(self, kind: str, x: pd.DataFrame, *, explain_above: float = 0.2,
              top: int = 3) -> tuple[np.ndarray, np.ndarray, list[tuple[str, ...]]]:
        rules = RULES.get(kind, ())
        hits = np.zeros((len(x), len(rules)), dtype=bool)
        for j, (feature, op, line) in enumerate(rules):
            if feature not in x.columns:
                continue
            v = x[feature].to_numpy(dtype=np.float64)
            hits[:, j] = {"<": v < line, ">": v > line, ">=": v >= line}[op]
        risk = np.asarray(hits.any(axis=1), dtype=np.float64)
        signals: list[tuple[str, ...]] = [() for _ in range(len(x))]
        for i in np.flatnonzero(risk > 0):
            fired = np.flatnonzero(hits[i])[:top]
            signals[i] = tuple(describe(rules[j][0], float(x[rules[j][0]].to_numpy()[i]))
                               for j in fired)
        # Rules give no lead estimate: a threshold says "now", not "in how long".
        return risk, np.full(len(x), np.nan), signals
