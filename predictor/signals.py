"""Top signals behind a risk score: which features, set back to their healthy baseline, would
lower the risk the most. Short human-readable strings, top signal first."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from predictor.feature_frames import RISING_COUNTERS
from predictor.sustained import SHORT_WINDOWS_S, SUSTAINED, WINDOW_S

_COUNTER_LABELS = {
    "sbe": "ECC single-bit errors", "dbe": "ECC double-bit errors",
    "remap_corr": "rows remapped (correctable)", "remap_unc": "rows remapped (uncorrectable)",
    "pcie": "PCIe replays", "nvlink": "NVLink CRC errors",
}
_LABELS = {
    "temp_5m": "temperature {v:.0f} C", "temp_dev": "temperature {v:+.1f} C vs node peers",
    "temp_trend_dev": "temperature rising {v:+.1f} C vs 6 h (peers excluded)",
    "clock_dev": "SM clock {v:+.0%} vs node peers", "clock_trend_dev": "SM clock {v:+.0%} vs 6 h",
    "throttle_thermal_5m": "thermal throttling {v:.0%} of last 5 min",
    "throttle_thermal_1h": "thermal throttling {v:.0%} of last hour",
    "throttle_thermal_dev": "thermal throttling {v:+.0%} vs node peers",
    "remap_pending_5m": "row remap pending",
    "xid_mem_5m": "{v:.1f} memory XIDs (63/64/92/48/94/95) in 5 min",
    "xid_mem_1h": "{v:.1f} memory XIDs in 1 h", "xid_mem_6h": "{v:.0f} memory XIDs in 6 h",
    "xid_nvlink_1h": "{v:.0f} NVLink XID 74 in 1 h",
    "xid_nvlink_6h": "{v:.0f} NVLink XID 74 in 6 h",
    "xid_bus_1h": "{v:.0f} XID 79 (fell off bus) in 1 h",
    "xid_other_1h": "{v:.0f} other hardware XIDs in 1 h",
    "err_rise_5m": "{counter} at {x:.3g}x {its} 6-h rate over 5m",
    "err_rise_1h": "{counter} at {x:.3g}x {its} 6-h rate over 1h",
    "err_held_1h": "{counter} above {r:.3g}/h all of the last hour",
    "err_fall_1h": "15-min error rate {x:.3g}x down from its highest of the last hour",
    "gap_frac_1h": "telemetry gaps {v:.0%} of last hour",
    "stale_intervals": "no sample for {v:.0f} intervals",
    "node_compute_z": "node compute time z={v:.1f} vs job (straggler)",
    "node_compute_trend_z": "node compute time rising z={v:.1f}",
    "step_z": "step time z={v:.1f} vs job",
    "compute_z": "compute time z={v:.1f} vs job (straggler)",
    "collective_z": "collective time z={v:.1f} vs job",
    "step_trend_z": "step time rising z={v:.1f}",
    "compute_trend_z": "compute time rising z={v:.1f}",
    "compute_z_6h": "compute time z={v:.1f} over 6 h",
    "link_bw_med_z": "link bandwidth z={v:.1f} (median of node's links)",
    "link_bw_min_z": "worst link bandwidth z={v:.1f}",
    "link_bw_trend_med_z": "link bandwidth falling z={v:.1f}",
    "link_bw_trend_min_z": "worst link bandwidth falling z={v:.1f}",
    "link_lat_med_z": "link latency z={v:.1f}", "link_lat_max_z": "worst link latency z={v:.1f}",
    "link_lat_trend_med_z": "link latency rising z={v:.1f}",
    "xid_node_1h": "{v:.0f} node hardware XIDs in 1 h",
    "xid_node_6h": "{v:.0f} node hardware XIDs in 6 h",
    "node_stale_intervals": "no training sample for {v:.0f} intervals",
    "node_temp_dev": "node's GPUs {v:+.1f} C vs other nodes at the same power",
    "node_temp_trend_dev": "node's GPUs warming {v:+.1f} C vs 6 h beyond their power, more than "
                           "other nodes",
    "node_throttle_power_rise": "node's GPUs power-throttled {v:+.0%} more than over 6 h",
    "node_power_cv_rise": "node's GPU power swinging {v:+.0%} more than over 6 h",
    "fleet_hot_frac": "{v:.0%} of nodes hot",
    "fleet_bw_low_frac": "{v:.0%} of nodes with slow links",
    "hot_nodes_besides": "{v:.0f} other nodes hot too",
    "slow_link_nodes_besides": "{v:.0f} other nodes with slow links too",
    "slow_lat_nodes_besides": "{v:.0f} other nodes with high link latency too",
    "slow_probes_elsewhere": "{v:.0%} of links between other nodes slow",
    "bw_z": "bandwidth z={v:.1f} vs all links", "bw_trend_z": "bandwidth falling z={v:.1f}",
    "lat_z": "latency z={v:.1f} vs all links", "lat_trend_z": "latency rising z={v:.1f}",
    "node_bw_med_z": "node's links bandwidth z={v:.1f}",
    "node_bw_trend_med_z": "node's links bandwidth falling z={v:.1f}",
    "node_lat_med_z": "node's links latency z={v:.1f}",
    "peer_bw_med_z": "peer's links bandwidth z={v:.1f}",
}


_POOLED: dict[str, tuple[str, str | None]] = {
    "err_rise_5m": ("rate_5m", "rate_6h"), "err_rise_1h": ("rate_1h", "rate_6h"),
    "err_held_1h": ("held_1h", None),
}
"""Features pooled over ``RISING_COUNTERS``: the largest over the counters of ``{counter}_{a}``
(less ``{counter}_{b}`` where there is one), read back from the same row to name the counter."""

MIN_DROP = 0.01
"""A feature is a signal when setting it back to its baseline lowers the risk by more."""

_HELD = {name: source for kind in SUSTAINED.values() for name, (source, _) in kind.items()}


def describe(feature: str, value: float, row: Mapping[str, float] | None = None) -> str:
    """``ECC single-bit errors 42/h over 1h`` and the like. ``row`` (the entity's other
    features) names the counter behind a feature pooled over several: "PCIe replays at 14x
    their 6-h rate", not "an error counter". A held one names the counter that sets its source
    now; the floor it held may have been set by another earlier (two counters rising in turn)."""
    if feature in _HELD:
        held_s = SHORT_WINDOWS_S.get(feature, WINDOW_S)
        span = "hour" if held_s == WINDOW_S else f"{held_s / 60:.0f} minutes"
        return f"{describe(_HELD[feature], value, row)}, held for the last {span}"
    for key, label in _COUNTER_LABELS.items():
        prefix = f"{key}_rate_"
        if feature.startswith(prefix):
            return f"{label} {np.expm1(value):.3g}/h over {feature[len(prefix):]}"
    template = _LABELS.get(feature)
    if template is None or not np.isfinite(value):
        return f"{feature}={value:.3g}"
    counter = _counter_behind(feature, row)
    # Error rates are log1p per hour: x is a ratio of (1 + rate)s, r a rate back in errors/h.
    return template.format(v=value, x=np.exp(value), r=np.expm1(value),
                           counter=counter or "an error counter (ECC/PCIe/NVLink)",
                           its="their" if counter else "its")


def _counter_behind(feature: str, row: Mapping[str, float] | None) -> str | None:
    """The label of the counter that sets pooled ``feature`` in ``row``; None where it is not
    pooled or the row lacks the per-counter values."""
    if feature not in _POOLED or row is None:
        return None
    a, b = _POOLED[feature]
    best, label = -np.inf, None
    for c in RISING_COUNTERS:
        value = row.get(f"{c}_{a}", np.nan) - (row.get(f"{c}_{b}", np.nan) if b else 0.0)
        if np.isfinite(value) and value > best:
            best, label = value, _COUNTER_LABELS[c]
    return label


def explain(risk_fn: Callable[[pd.DataFrame], np.ndarray], x: pd.DataFrame, risk: np.ndarray,
            baseline: np.ndarray, *, above: float, top: int,
            direction: np.ndarray | None = None) -> list[tuple[str, ...]]:
    """Top signals of rows with risk >= ``above`` (empty tuples for the others).

    ``direction`` (per column: +1 where more is worse, -1 where less is, 0 for context such as
    how stale a sample is) names a feature only on its bad side of the baseline; context counts
    only above it. The model may still lean on a fresh sample, but "no sample for 0
    intervals" is no reason to drain a node."""
    out: list[tuple[str, ...]] = [() for _ in range(len(x))]
    rows = np.flatnonzero(risk >= above)
    if not len(rows):
        return out
    cols = list(x.columns)
    base = x.to_numpy(dtype=np.float64)[rows]
    # A value the fleet does not export (NaN), or one on its good side, is not a signal behind
    # the flag, whatever the model makes of it (NaN compares False, so it is never worse).
    if direction is None:
        worse = np.isfinite(base)
    else:
        worse = (base - baseline) * np.where(direction == 0, 1.0, direction) > 0
    nf = len(cols)
    probe = np.repeat(base, nf, axis=0)
    j = np.tile(np.arange(nf), len(rows))
    probe[np.arange(len(probe)), j] = baseline[j]
    drop = risk[rows][:, None] - risk_fn(pd.DataFrame(probe, columns=cols)).reshape(len(rows), nf)
    drop[~worse] = -np.inf
    alone: list[int] = []
    for i, r in enumerate(rows):
        order = np.argsort(-drop[i])
        picked = _readable(cols, base[i], baseline, [k for k in order if drop[i, k] > MIN_DROP],
                           top)
        if picked:
            out[r] = tuple(picked)
        else:
            alone.append(i)
    if alone:
        # No readable feature lowers the risk on its own (several each suffice, or those that
        # do read like healthy): set them back together instead (see ``_jointly``).
        for i, joint in zip(alone, _jointly(risk_fn, cols, base[alone], risk[rows[alone]],
                                             baseline, drop[alone], worse[alone], top=top),
                            strict=True):
            out[rows[i]] = joint
    return out


def _jointly(risk_fn: Callable[[pd.DataFrame], np.ndarray], cols: list[str], base: np.ndarray,
             risk: np.ndarray, baseline: np.ndarray, drop: np.ndarray, worse: np.ndarray, *,
             top: int) -> list[tuple[str, ...]]:
    """Signals of rows where several features each suffice. The features that differ from
    their baseline are set back one after another, in order of their single drop and then in
    the reverse order (two antithetic paths of a Shapley estimate, so that of two features
    either of which suffices both are named); each is credited with the mean fall of the risk
    at its turn, and those credited more than ``MIN_DROP`` are named, largest first. A feature
    at its baseline or on its good side, or not exported, is never named; a row whose risk none
    explains gets no signals."""
    moved = np.isfinite(base) & (base != baseline) & worse
    probes: list[np.ndarray] = []
    paths: list[np.ndarray] = []
    for i in range(len(base)):
        ks = np.flatnonzero(moved[i])
        ks = ks[np.argsort(-drop[i, ks], kind="stable")]
        for path in (ks, ks[::-1]):
            row = base[i].copy()
            for k in path:
                row[k] = baseline[k]
                probes.append(row.copy())
        paths.append(ks)
    if not probes:
        return [() for _ in range(len(base))]
    after = risk_fn(pd.DataFrame(np.vstack(probes), columns=cols))
    out: list[tuple[str, ...]] = []
    at = 0
    for i, ks in enumerate(paths):
        n = len(ks)
        fwd = np.r_[risk[i], after[at:at + n]]
        rev = np.r_[risk[i], after[at + n:at + 2 * n]]
        at += 2 * n
        credit = ((fwd[:-1] - fwd[1:]) + (rev[:-1] - rev[1:])[::-1]) / 2.0
        best = np.argsort(-credit, kind="stable")
        out.append(tuple(_readable(cols, base[i], baseline,
                                   [ks[j] for j in best if credit[j] > MIN_DROP], top)))
    return out


def _readable(cols: list[str], row: np.ndarray, baseline: np.ndarray, ranked: list[int],
              top: int) -> list[str]:
    """The first ``top`` of ``ranked`` that read differently from their healthy baseline and
    from nothing at all: a decayed trace of one XID half an hour ago moves the model, but "0.0
    memory XIDs in 5 min" or "step time z=0.0" tells the person on call nothing. A signal and
    the same reading held for a while are named once, as held ("PCIe replays at 14x their 6-h
    rate over 5m, held for the last 15 minutes" says all that the two would)."""
    values = dict(zip(cols, row.tolist(), strict=True))
    out: list[str] = []
    for k in ranked:
        text = describe(cols[k], row[k], values)
        if _unsigned_zero(text) in {_unsigned_zero(describe(cols[k], v, values))
                                    for v in (baseline[k], 0.0)}:
            continue
        if any(named.startswith(f"{text}, held") for named in out):
            continue
        out = [text if text.startswith(f"{named}, held") else named for named in out]
        if text not in out:
            out.append(text)
            if len(out) == top:
                break
    return out


def _unsigned_zero(text: str) -> str:
    """``text`` with the sign of every zero dropped ("z=-0.0" reads as "z=0.0")."""
    return re.sub(r"[-+](0(?:\.0+)?)(?![\d.])", r"\1", text)
