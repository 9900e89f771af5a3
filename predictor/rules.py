"""The DCGM-style threshold baseline (``--model rules``): alarm once a counter or gauge has
already crossed a fixed line, as DCGM health watches, dcgm-exporter alert rules and NVSentinel
do. It reads the same features as the learned model, so side-by-side figures compare policies,
not plumbing.

Two severities, as a DCGM deployment treats them: a hardware fault (double-bit error,
uncorrectable or pending row remap, a hardware XID) alarms at once (risk 1.0); a soft threshold
(error rate, temperature, throttling, straggler, link bandwidth) is a warning (risk
``SOFT_RISK``) that alarms only once it has held for 10 minutes, like a Prometheus alert rule on
dcgm-exporter with ``for: 10m`` (``RULES_POLICY``). Without that persistence a threshold flaps
on every noisy sample and the baseline would be a straw man."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.hysteresis import PolicyConfig
from predictor.signals import describe

RULES_VERSION = "rules-2"

SOFT_RISK = 0.9
"""Risk of a soft threshold: above ``RULES_POLICY.fire_at``, below its ``fire_now_at``."""

RULES_POLICY = PolicyConfig(fire_at=0.5, fire_now_at=0.95, persist_s=600.0, quick_at=None,
                            slow_at=None, mid_at=None, resolve_below=0.5, resolve_after_s=900.0)
"""Hard faults alarm at once; soft thresholds must hold 10 min (``for: 10m``); an alert clears
15 min after its last rule stopped matching."""

HARD_FAULTS: frozenset[str] = frozenset({
    "dbe_rate_1h", "remap_unc_rate_1h", "remap_pending_5m", "xid_mem_1h", "xid_nvlink_1h",
    "xid_bus_1h", "xid_node_1h"})
"""Rules that report a fault that has already happened rather than a threshold crossing."""

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
        # A NIC check: the node's median link runs at about half the fleet's median probe
        # bandwidth (one slow path is congestion; all of a node's links slow is its NIC).
        ("node_bw_med_z", "<", -14.0),
    ),
}


@dataclass(kw_only=True)
class RulesModel:
    """Same ``score`` interface as ``RiskModel``: risk 1 when a hard-fault rule matches,
    ``SOFT_RISK`` when only soft thresholds do, else 0."""

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
        hard = np.array([rule[0] in HARD_FAULTS for rule in rules], dtype=bool)
        risk = np.where(hits[:, hard].any(axis=1), 1.0,
                        np.where(hits.any(axis=1), SOFT_RISK, 0.0)).astype(np.float64)
        signals: list[tuple[str, ...]] = [() for _ in range(len(x))]
        for i in np.flatnonzero(risk > 0):
            fired = np.flatnonzero(hits[i])[:top]
            signals[i] = tuple(describe(rules[j][0], float(x[rules[j][0]].to_numpy()[i]))
                               for j in fired)
        # Rules give no lead estimate: a threshold says "now", not "in how long".
        return risk, np.full(len(x), np.nan), signals
