"""Turning stream windows into feature frames: rates, trends and peer deviations.

Each feature carries a monotone prior (+1: more of it can only mean more risk, -1: less, 0: no
prior) that the model is constrained to respect, so that a generator or fleet it never saw
cannot teach it, say, that faster ECC growth is safer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from predictor.features import GAUGE, POWER_SQ
from predictor.streams import TAU_NAMES, EventCounts
from predictor.sustained import SUSTAINED

if TYPE_CHECKING:
    from predictor.features import FeatureEngine, Features

# Columns of the GPU stream's gauge windows.
TEMP, CLOCK, POWER = GAUGE["gpu.temperature"], GAUGE["gpu.clock.sm"], GAUGE["gpu.power"]
THR_T, THR_P = GAUGE["gpu.throttle.thermal"], GAUGE["gpu.throttle.power"]

COUNTER_NAMES: tuple[str, ...] = ("sbe", "dbe", "remap_corr", "remap_unc", "pcie", "nvlink")

RISING_COUNTERS: tuple[str, ...] = ("sbe", "pcie", "nvlink")
"""Counters with a steady benign rate on some GPUs (a weak DIMM row, a marginal connector)."""

GPU_FEATURES: dict[str, int] = {
    **{f"{c}_rate_{w}": 1 for c in COUNTER_NAMES for w in TAU_NAMES},
    # The fastest-rising error counter against its own 6-h rate: growth, which a steady benign
    # rate never shows (the rates alone cannot say it: their monotone priors make a higher 6-h
    # rate never safer). Pooled over the counters, so that growth on any of them counts the
    # same: per counter, a model learns how the training generator's bursts and precursors
    # differ by counter, and called 1,000 NVLink CRC errors/h, 20x up, harmless on another.
    "err_rise_5m": 1, "err_rise_1h": 1,
    "temp_5m": 1, "temp_dev": 1, "temp_trend_dev": 1, "clock_dev": -1, "clock_trend_dev": -1,
    "throttle_thermal_5m": 1, "throttle_thermal_1h": 1, "throttle_thermal_dev": 1,
    "remap_pending_5m": 1,
    "xid_mem_5m": 1, "xid_mem_1h": 1, "xid_mem_6h": 1, "xid_nvlink_1h": 1, "xid_nvlink_6h": 1,
    "xid_bus_1h": 1, "xid_other_1h": 1,
    "gap_frac_1h": 0, "stale_intervals": 0, "node_compute_z": 1, "node_compute_trend_z": 1,
}
"""GPU feature name -> monotone prior.

Left out on purpose: HBM temperature (it follows the die temperature in every trace we can train
on, so a model only learns to lean on it, and then under-rates a hot GPU on fleets that do not
export it) and a GPU's power against its peers (with no direction of risk, a model learns the
training generator's physics: "hot because it draws more power" called an overheating GPU on an
independently generated fleet healthy)."""

NODE_FEATURES: dict[str, int] = {
    "step_z": 1, "compute_z": 1, "collective_z": 0, "step_trend_z": 1, "compute_trend_z": 1,
    "compute_z_6h": 0,
    "link_bw_med_z": -1, "link_bw_min_z": -1, "link_bw_trend_med_z": -1,
    "link_bw_trend_min_z": -1, "link_lat_med_z": 1, "link_lat_max_z": 1,
    "link_lat_trend_med_z": 1, "xid_node_1h": 1, "xid_node_6h": 1, "node_stale_intervals": 0,
    "node_temp_dev": 1, "node_temp_trend_dev": 1,
    "node_throttle_power_rise": 1, "node_power_cv_rise": 1,
    "fleet_hot_frac": -1, "fleet_bw_low_frac": -1,
    "hot_nodes_besides": -1, "slow_link_nodes_besides": -1, "slow_lat_nodes_besides": -1,
    "slow_probes_elsewhere": -1,
}
LINK_FEATURES: dict[str, int] = {
    "bw_z": -1, "bw_trend_z": -1, "lat_z": 1, "lat_trend_z": 1,
    "node_bw_med_z": -1, "node_bw_trend_med_z": -1, "node_lat_med_z": 1, "peer_bw_med_z": 0,
    "fleet_bw_low_frac": -1, "slow_link_nodes_besides": -1, "slow_lat_nodes_besides": -1,
    "slow_probes_elsewhere": -1,
}
for _kind, _features in (("gpu", GPU_FEATURES), ("node", NODE_FEATURES), ("link", LINK_FEATURES)):
    _features.update({name: direction for name, (_, direction) in SUSTAINED[_kind].items()})
GPU_FEATURES["err_held_1h"] = 1  # the highest floor any error counter held for the last hour
# How far the error rate held for 15 minutes has fallen from its highest of the last hour (log, so
# 0.7 is half): a burst passing (it rose and fades) against a precursor (its rate holds or
# climbs). Less fall is worse; the peak itself is no evidence either way, only the fall from it.
GPU_FEATURES["err_fall_1h"] = -1
HOOK_FEATURES: tuple[str, ...] = (
    "step_z", "compute_z", "collective_z", "step_trend_z", "compute_trend_z", "compute_z_6h",
    "node_stale_intervals", "step_z_held_1h", "compute_z_held_1h")
"""Node features read from ``node.csv`` (the training hook's step, compute and collective
times): all NaN on a fleet that exports no compute times. Every training fleet exports them."""
LINK_LEVELS: tuple[str, ...] = (
    "link_bw_med_z", "link_bw_min_z", "link_lat_med_z", "link_lat_max_z",
    "link_bw_med_z_held_1h", "link_lat_med_z_held_1h")
"""Node features that read how slow a node's links are now against the fleet's, not how far they
moved from where the node stood (the ``link_*_trend_*`` features)."""
UNHOOKED = "node_unhooked"
"""The model kind that scores node rows when the fleet exports no compute times: trained on the
same node rows without ``HOOK_FEATURES`` or ``LINK_LEVELS``. The node model itself learned that a
node whose GPUs power-throttle more than they did is a failing supply unless its compute runs
slower as a node under a lower power limit does; with that evidence missing it read such nodes as
failing supplies for hours (predictor/ROUNDS.md, round 50). Likewise a node whose links read slow
all along (a slower NIC) is healthy when it computes no slower than its peers; without compute
times, a node model that reads link levels kept such nodes at risk for days, where a failing NIC
shows as a drop from where its node stood, which the trends read (round 52)."""
FEATURES_BY_KIND: dict[str, dict[str, int]] = {
    "gpu": GPU_FEATURES, "node": NODE_FEATURES, "link": LINK_FEATURES,
    UNHOOKED: {f: d for f, d in NODE_FEATURES.items()
               if f not in HOOK_FEATURES and f not in LINK_LEVELS}}

MEMORY_EVENTS: tuple[str, ...] = (
    *(f"{c}_rate_{w}" for c in ("remap_corr", "remap_unc") for w in TAU_NAMES),
    "remap_pending_5m", "xid_mem_5m", "xid_mem_1h", "xid_mem_6h")
"""GPU features that read row remaps and memory XIDs (63 remap, 92 high single-bit rate, ...)."""
ERROR_GROWTH: tuple[str, ...] = tuple(
    name for name in GPU_FEATURES
    if name.split("_")[0] in (*RISING_COUNTERS, "err"))
"""GPU features that read the corrected-error counters (SBE, PCIe replays, NVLink CRC): their
rates, growth and held floors."""

Z_CLIP = 50.0


def robust_z(x: np.ndarray, *, floor: float, groups: np.ndarray | None = None) -> np.ndarray:
    """(x - median) / max(1.4826 MAD, floor), over all rows or within ``groups``."""
    if len(x) == 0:
        return x
    if groups is None:
        med = np.nanmedian(x) if np.isfinite(x).any() else np.nan
        mad = np.nanmedian(np.abs(x - med)) if np.isfinite(x).any() else np.nan
    else:
        med = group_median(x, groups)
        mad = group_median(np.abs(x - med), groups)
    scale = np.maximum(np.nan_to_num(1.4826 * mad, nan=floor), floor)
    return np.clip((x - med) / scale, -Z_CLIP, Z_CLIP)


def group_median(x: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Median of ``x`` over rows with the same group, broadcast back to the rows."""
    if len(x) == 0:
        return x
    return np.asarray(pd.Series(x).groupby(groups).transform("median"), dtype=np.float64)


CLOCK_RESOLUTION = 0.01
"""SM clock deviations under 1% are exporter noise and clock-step rounding, not a signal."""


def _nanmax(x: np.ndarray) -> np.ndarray:
    """Row-wise maximum ignoring NaN; NaN where a row has no value at all."""
    out = np.full(len(x), np.nan)
    seen = np.isfinite(x).any(axis=1)
    out[seen] = np.nanmax(x[seen], axis=1)
    return out


def dead_zone(x: np.ndarray, width: float) -> np.ndarray:
    """``x`` with values within ``width`` of zero set to zero, so that no tree splits on the
    noise floor of one generator (one rounds clocks to 15 MHz, another adds 8 MHz of jitter)."""
    return np.where(np.abs(x) < width, 0.0, x)


def _log(x: np.ndarray, low: float) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log(np.maximum(x, low))


def build(engine: FeatureEngine, t: float, *, stale_s: float) -> Features:
    from predictor.features import Features

    nominal = engine.interval_s or 30.0
    node = _node_frame(engine, t, stale_s, nominal)
    gpu = _gpu_frame(engine, t, stale_s, nominal, node)
    link, aggregates, explained = _link_frame(engine, t, stale_s)
    gpu_agg = _gpu_node_aggregates(engine, t, stale_s)
    aggregates = aggregates.join(gpu_agg, how="outer") if len(aggregates) else gpu_agg
    if len(aggregates):
        node = node.drop(columns=[c for c in aggregates.columns if c in node.columns])
        node = node.merge(aggregates, how="outer", left_on="node", right_index=True)
    live_nodes = pd.Index(pd.unique(np.r_[gpu["node"].to_numpy(dtype=object),
                                          node["node"].to_numpy(dtype=object)]))
    node = node.set_index("node").reindex(live_nodes).rename_axis("node").reset_index()
    _node_xids(engine, node, t)
    # Many nodes degraded at once is a shared cause (a congested leaf switch, a rack's
    # cooling), not many parts failing together: say how widespread each pattern is.
    bw_low = _share(node.get("link_bw_med_z"), lambda z: z < -3.0)
    node["fleet_hot_frac"] = _share(node.get("node_temp_dev"), lambda d: d > 4.0)
    node["fleet_bw_low_frac"] = bw_low
    node["hot_nodes_besides"] = _others(node.get("node_temp_dev"), lambda d: d > 4.0, len(node))
    node["slow_link_nodes_besides"] = _others(node.get("link_bw_med_z"), lambda z: z < -3.0,
                                              len(node))
    # Congestion may show in latency more than in bandwidth (a leaf switch that queues).
    node["slow_lat_nodes_besides"] = _others(node.get("link_lat_med_z"), lambda z: z > 3.0,
                                             len(node))
    if len(link):
        link["fleet_bw_low_frac"] = bw_low
        # A link is judged by its worse endpoint: how many nodes besides that one degrade too.
        at = node.set_index("node")
        for name in ("slow_link_nodes_besides", "slow_lat_nodes_besides"):
            link[name] = link["node"].map(at[name]).to_numpy(dtype=np.float64)
    node = node.reindex(columns=["node", *NODE_FEATURES])
    # The highest 5-minute rate of the counters that burst, for how far it fell (err_fall_1h).
    gpu["err_rate_5m"] = _nanmax(gpu[[f"{c}_rate_5m" for c in RISING_COUNTERS]].to_numpy(
        dtype=np.float64))
    gpu = engine.sustained.add_to("gpu", gpu, t)
    gpu["err_held_1h"] = _nanmax(gpu[[f"{c}_held_1h" for c in RISING_COUNTERS]].to_numpy(
        dtype=np.float64))
    gpu = engine.peaks.add_to("gpu", gpu, t)
    gpu["err_fall_1h"] = gpu.pop("err_rate_peak_1h") - gpu.pop("err_rate_held_15m")
    del gpu["err_rate_5m"]
    node = engine.sustained.add_to("node", node, t)
    link = engine.sustained.add_to("link", link, t)
    return Features(t=t, gpu=gpu, node=node, link=link, explained=explained)


def _share(values: pd.Series | None, test: Callable[[np.ndarray], np.ndarray]) -> float:
    """Share of nodes (with a value) for which ``test`` holds."""
    if values is None:
        return float("nan")
    v = values.to_numpy(dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.mean(test(v))) if len(v) else float("nan")


def _others(values: pd.Series | None, test: Callable[[np.ndarray], np.ndarray],
            n: int) -> np.ndarray:
    """Per row: how many *other* nodes ``test`` holds for (a rack's cooling heats several nodes
    at once, a failing fan one)."""
    if values is None:
        return np.full(n, np.nan)
    v = values.to_numpy(dtype=np.float64)
    hit = np.isfinite(v) & test(np.nan_to_num(v, nan=0.0))
    return (hit.sum() - hit).astype(np.float64)


def _gpu_node_aggregates(engine: FeatureEngine, t: float, stale_s: float) -> pd.DataFrame:
    """Whole-node GPU behaviour against the other nodes: a failing fan heats every GPU of its
    node, a sagging power supply makes every GPU's power swing and throttle."""
    w = engine.gpus.windows(t)
    live = np.flatnonzero(w.last_ts >= t - stale_s)
    if not len(live):
        return pd.DataFrame(index=pd.Index([], name="node"))
    codes = np.asarray(engine.gpus.keys.index, dtype=np.int64)[live] // 4096
    m = w.mean[live]
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.maximum(m[:, 0, POWER_SQ] - m[:, 0, POWER] ** 2, 0.0)
        cv = np.sqrt(var) / m[:, 0, POWER]
        var6 = np.maximum(m[:, 2, POWER_SQ] - m[:, 2, POWER] ** 2, 0.0)
        cv6 = np.sqrt(var6) / m[:, 2, POWER]
    per_gpu = pd.DataFrame({"code": codes, "temp": m[:, 0, TEMP],
                            "trend": m[:, 0, TEMP] - m[:, 2, TEMP],
                            "power": m[:, 0, POWER], "power_trend": m[:, 0, POWER] - m[:, 2, POWER],
                            "thr_p_rise": m[:, 0, THR_P] - m[:, 2, THR_P],
                            "cv_rise": cv - cv6})
    node = per_gpu.groupby("code").median()
    # Heat is judged against what the node's power explains: a node that runs a heavier job
    # (or leaves an idle spell) is hotter for it, a failing fan is hotter at the same power.
    slope = heat_per_watt(node["power"].to_numpy(), node["temp"].to_numpy())
    temp = _unexplained(node["temp"].to_numpy(), node["power"].to_numpy(), slope)
    trend = _unexplained(node["trend"].to_numpy(), node["power_trend"].to_numpy(), slope)
    out = pd.DataFrame({
        "node_temp_dev": _centred(temp),
        "node_temp_trend_dev": _centred(trend),
        # Power throttling and power swings only count as growth against the node's own 6 h,
        # never as a level against other nodes: a node that always runs into its power cap (a
        # lower cap, the silicon lottery, a hot slot) is chronically slow but healthy.
        "node_throttle_power_rise": node["thr_p_rise"] - node["thr_p_rise"].median(),
        "node_power_cv_rise": node["cv_rise"] - node["cv_rise"].median(),
    })
    out.index = pd.Index(engine.node_names.names(node.index.to_numpy(dtype=np.int64)), name="node")
    return out


MAX_HEAT_PER_WATT = 0.3
"""C per W beyond which a fitted slope is not physics (a GPU heats by 0.05-0.1 C per W)."""


def heat_per_watt(power: np.ndarray, temp: np.ndarray) -> float:
    """Slope of node temperature on node power across the fleet (C per W), fitted twice, the
    second time without the nodes the first fit leaves more than 3 robust SDs off (the hot nodes
    that the slope must not bend towards). 0 where power does not vary or is not exported."""
    ok = np.isfinite(power) & np.isfinite(temp)
    x, y = power[ok], temp[ok]
    for _ in range(2):
        if len(x) < 4 or np.ptp(x) < 20.0:
            return 0.0
        slope, icpt = np.polyfit(x, y, 1)
        off = np.abs(_centred(y - (icpt + slope * x)))
        inside = off <= 3.0 * max(1.4826 * np.median(off), 1.0)
        x, y = x[inside], y[inside]
    return float(np.clip(slope, 0.0, MAX_HEAT_PER_WATT))


def _unexplained(temp: np.ndarray, power: np.ndarray, slope: float) -> np.ndarray:
    """``temp`` less the part that ``slope`` puts down to power (all of it where power is
    missing on a node)."""
    return temp - slope * np.nan_to_num(_centred(power), nan=0.0)


def _centred(x: np.ndarray) -> np.ndarray:
    """``x`` less its median over the values it has (all NaN stays all NaN)."""
    return x - np.nanmedian(x) if np.isfinite(x).any() else x


def _gpu_frame(engine: FeatureEngine, t: float, stale_s: float, nominal: float,
               node: pd.DataFrame) -> pd.DataFrame:
    w = engine.gpus.windows(t)
    live = np.flatnonzero(w.last_ts >= t - stale_s)
    keys = np.asarray(engine.gpus.keys.index, dtype=np.int64)[live]
    codes = keys // 4096
    f: dict[str, np.ndarray] = {}
    rate = np.log1p(w.rate_per_h[live])
    for c, name in enumerate(COUNTER_NAMES):
        for k, tn in enumerate(TAU_NAMES):
            f[f"{name}_rate_{tn}"] = rate[:, k, c]
    rising = [COUNTER_NAMES.index(name) for name in RISING_COUNTERS]
    f["err_rise_5m"] = _nanmax(rate[:, 0, rising] - rate[:, 2, rising])
    f["err_rise_1h"] = _nanmax(rate[:, 1, rising] - rate[:, 2, rising])
    m = w.mean[live]
    temp5, temp6 = m[:, 0, TEMP], m[:, 2, TEMP]
    f["temp_5m"] = temp5
    f["temp_dev"] = temp5 - group_median(temp5, codes)
    f["temp_trend_dev"] = (temp5 - temp6) - group_median(temp5 - temp6, codes)
    with np.errstate(invalid="ignore", divide="ignore"):
        clk5, clk6 = m[:, 0, CLOCK], m[:, 2, CLOCK]
        f["clock_dev"] = dead_zone(clk5 / group_median(clk5, codes) - 1.0, CLOCK_RESOLUTION)
        trend = clk5 / clk6 - 1.0
        f["clock_trend_dev"] = dead_zone(trend - group_median(trend, codes), CLOCK_RESOLUTION)
    f["throttle_thermal_5m"] = m[:, 0, THR_T]
    f["throttle_thermal_1h"] = m[:, 1, THR_T]
    f["throttle_thermal_dev"] = m[:, 0, THR_T] - group_median(m[:, 0, THR_T], codes)
    f["remap_pending_5m"] = m[:, 0, GAUGE["gpu.rows.remap.pending"]]
    xid = _xid_counts(engine, engine.gpu_events, keys, t)  # gpus x taus x (mem, nvlink, bus, other)
    f["xid_mem_5m"], f["xid_mem_1h"], f["xid_mem_6h"] = xid[:, 0, 0], xid[:, 1, 0], xid[:, 2, 0]
    f["xid_nvlink_1h"], f["xid_nvlink_6h"] = xid[:, 1, 1], xid[:, 2, 1]
    f["xid_bus_1h"], f["xid_other_1h"] = xid[:, 1, 2], xid[:, 1, 3]
    f["gap_frac_1h"] = w.gap_frac[live, 1]
    f["stale_intervals"] = (t - w.last_ts[live]) / nominal
    names = engine.node_names.names(codes)
    by_node = node.set_index("node")
    for col, src in (("node_compute_z", "compute_z"), ("node_compute_trend_z", "compute_trend_z")):
        f[col] = by_node[src].reindex(names).to_numpy(dtype=np.float64) if len(by_node) else (
            np.full(len(live), np.nan))
    frame = pd.DataFrame({"node": names, "gpu": keys % 4096, **f})
    return frame.reindex(columns=["node", "gpu", *GPU_FEATURES])


def _xid_counts(engine: FeatureEngine, events: EventCounts, keys: np.ndarray,
                t: float) -> np.ndarray:
    """XID counts of ``keys`` (keys x taus x classes); NaN where the fleet keeps no event log."""
    counts = events.counts_for(keys, t)
    return counts if engine.events_exported else np.full(counts.shape, np.nan)


def _node_frame(engine: FeatureEngine, t: float, stale_s: float,
                nominal: float) -> pd.DataFrame:
    w = engine.nodes.windows(t)
    live = np.flatnonzero(w.last_ts >= t - stale_s)
    codes = np.asarray(engine.nodes.keys.index, dtype=np.int64)[live]
    m = _log(w.mean[live], 1e-9)
    f: dict[str, np.ndarray] = {}
    for j, name in enumerate(("step", "compute", "collective")):
        f[f"{name}_z"] = robust_z(m[:, 0, j], floor=0.02)
    f["step_trend_z"] = robust_z(m[:, 0, 0] - m[:, 2, 0], floor=0.02)
    f["compute_trend_z"] = robust_z(m[:, 0, 1] - m[:, 2, 1], floor=0.02)
    f["compute_z_6h"] = robust_z(m[:, 2, 1], floor=0.02)
    f["node_stale_intervals"] = (t - w.last_ts[live]) / nominal
    frame = pd.DataFrame({"node": engine.node_names.names(codes), **f})
    # Nodes with node-level XIDs in the last 6 h but no training rows still deserve a row.
    ev_codes = np.asarray(engine.node_events.keys.index, dtype=np.int64)
    extra = np.setdiff1d(ev_codes, codes)
    if len(extra):
        extra = extra[engine.node_events.counts_for(extra, t).sum(axis=2)[:, 2] > 0.01]
        frame = pd.concat([frame, pd.DataFrame({"node": engine.node_names.names(extra)})],
                          ignore_index=True)
    return frame


def _node_xids(engine: FeatureEngine, node: pd.DataFrame, t: float) -> None:
    """Fill in ``node``'s node-level XID counts, every live node's: on a fleet that keeps an
    event log, a node whose hook exports no training rows has had none (0), not an unknown
    count (NaN, as on a fleet with no log at all)."""
    codes = engine.node_names.codes(node["node"].to_numpy(dtype=object))
    xid = _xid_counts(engine, engine.node_events, codes, t).sum(axis=2)
    node["xid_node_1h"], node["xid_node_6h"] = xid[:, 1], xid[:, 2]


RECENT_LINKS_S = 600.0
"""A node's link aggregates read the links probed in the last 10 minutes: with a rotating
probe peer, most of its live links were probed long before a NIC began to fail (round 17)."""


def _link_frame(engine: FeatureEngine, t: float,
                stale_s: float) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    w = engine.links.windows(t)
    live = np.flatnonzero(w.last_ts >= t - stale_s)
    columns = ["src", "dst", "node", "peer", *LINK_FEATURES]
    if len(live) == 0:
        return pd.DataFrame(columns=columns), pd.DataFrame(), pd.DataFrame(
            columns=[*LINK_AGGREGATES, "peer"])
    keys = np.asarray(engine.links.keys.index, dtype=np.int64)[live]
    src, dst = keys // 1_000_000, keys % 1_000_000
    bw, lat = _log(w.mean[live, :, 0], 1.0), _log(w.mean[live, :, 1], 1e-9)
    f = {
        "bw_z": robust_z(bw[:, 0], floor=0.05),
        "bw_trend_z": robust_z(bw[:, 0] - bw[:, 2], floor=0.05),
        "lat_z": robust_z(lat[:, 0], floor=0.05),
        "lat_trend_z": robust_z(lat[:, 0] - lat[:, 2], floor=0.05),
    }
    recent = w.last_ts[live] >= t - RECENT_LINKS_S
    both = pd.DataFrame({"code": np.r_[src, dst], "peer": np.r_[dst, src],
                         "recent": np.r_[recent, recent],
                         **{k: np.r_[v, v] for k, v in f.items()}})
    # A node is read on its links probed lately; one without any keeps all its live ones.
    both = both[both["recent"] | ~both.groupby("code")["recent"].transform("any")]
    agg = _link_aggregates(both)
    agg["slow_probes_elsewhere"] = _slow_elsewhere(both, agg.index)
    med_src = agg["link_bw_med_z"].reindex(src).to_numpy()
    med_dst = agg["link_bw_med_z"].reindex(dst).to_numpy()
    # A degraded NIC drags down every link of its node; point the link at the worse endpoint.
    at_src = ~(np.nan_to_num(med_dst, nan=np.inf) < np.nan_to_num(med_src, nan=np.inf))
    node_code, peer_code = np.where(at_src, src, dst), np.where(at_src, dst, src)
    f["node_bw_med_z"] = agg["link_bw_med_z"].reindex(node_code).to_numpy()
    f["node_bw_trend_med_z"] = agg["link_bw_trend_med_z"].reindex(node_code).to_numpy()
    f["node_lat_med_z"] = agg["link_lat_med_z"].reindex(node_code).to_numpy()
    f["peer_bw_med_z"] = agg["link_bw_med_z"].reindex(peer_code).to_numpy()
    f["slow_probes_elsewhere"] = agg["slow_probes_elsewhere"].reindex(node_code).to_numpy()
    names = engine.node_names.names
    link = pd.DataFrame({"src": names(src), "dst": names(dst), "node": names(node_code),
                         "peer": names(peer_code), **f}).reindex(columns=columns)
    explained = _explained_by_peer(both, agg)
    agg.index = pd.Index(names(agg.index.to_numpy(dtype=np.int64)), name="node")
    explained.index = pd.Index(names(explained.index.to_numpy(dtype=np.int64)), name="node")
    explained["peer"] = names(explained["peer"].to_numpy(dtype=np.int64))
    return link, agg, explained


def _link_aggregates(both: pd.DataFrame) -> pd.DataFrame:
    """Per node (``code``): its links' median and extreme robust z (``LINK_AGGREGATES``)."""
    g = both.groupby("code")
    return pd.DataFrame({
        "link_bw_med_z": g["bw_z"].median(), "link_bw_min_z": g["bw_z"].min(),
        "link_bw_trend_med_z": g["bw_trend_z"].median(),
        "link_bw_trend_min_z": g["bw_trend_z"].min(),
        "link_lat_med_z": g["lat_z"].median(), "link_lat_max_z": g["lat_z"].max(),
        "link_lat_trend_med_z": g["lat_trend_z"].median(),
    })


def _slow_elsewhere(both: pd.DataFrame, codes: pd.Index) -> np.ndarray:
    """Per node (``code``): the share of the links probed lately (``RECENT_LINKS_S``; all live
    ones where none was) that do not touch it and read slow (bandwidth z below -3 or latency z
    above 3).

    A NIC that fails slows its own links; a congested switch slows links between other nodes
    too, from its first slow probes, before any other node's median reads slow."""
    probed = both[both["recent"]] if both["recent"].any() else both
    slow = ((probed["bw_z"] < -PEER_BLAME_Z) | (probed["lat_z"] > PEER_BLAME_Z)).to_numpy()
    # Each link is two rows, one per endpoint: per node, the links that touch it.
    per = pd.DataFrame({"n": 1.0, "slow": slow.astype(np.float64)}).groupby(
        probed["code"].to_numpy()).sum().reindex(codes, fill_value=0.0)
    away = len(probed) / 2.0 - per["n"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(away > 0, (slow.sum() / 2.0 - per["slow"].to_numpy()) / away, np.nan)


LINK_AGGREGATES: tuple[str, ...] = (
    "link_bw_med_z", "link_bw_min_z", "link_bw_trend_med_z", "link_bw_trend_min_z",
    "link_lat_med_z", "link_lat_max_z", "link_lat_trend_med_z")
"""The node features made from its links (``_link_aggregates``)."""


PEER_BLAME_Z = 3.0
"""How degraded (robust z of its links' median bandwidth or latency) a peer must be before the
links to it stop counting against a node: the bar of ``slow_link_nodes_besides``."""


def _slowness(agg: pd.DataFrame) -> np.ndarray:
    """How slow each node's links read: the worse of its median bandwidth and latency z."""
    return np.fmax(-agg["link_bw_med_z"].to_numpy(dtype=np.float64),
                   agg["link_lat_med_z"].to_numpy(dtype=np.float64))


def _explained_by_peer(both: pd.DataFrame, agg: pd.DataFrame) -> pd.DataFrame:
    """Nodes with links to a worse, clearly slow peer: their ``LINK_AGGREGATES`` without those
    links, and the worst such peer (``peer``, a node code).

    A probe measures a path with two ends. A node whose NIC degrades drags down every link to
    it, and a node that probes it sees those links slow through no fault of its own: where a
    node has few probe peers (a ring, two links to the same partner) that is half its links, and
    it was blamed with the failing one (on held-out fleets, 8 of 20 false episodes were the ring
    partner of a failing NIC, read slow at z 2-3 on half its links). A link stops counting
    against a node when the peer is clearly slow (``PEER_BLAME_Z``, its links' median) and
    slower than the node. A node whose every link is so explained is not: its whole
    neighbourhood is slow (a switch, not a peer)."""
    empty = pd.DataFrame(columns=[*LINK_AGGREGATES, "peer"])
    codes, peers = both["code"].to_numpy(), both["peer"].to_numpy()
    first = pd.Series(_slowness(agg), index=agg.index)
    slow, out = first, empty
    peer, blamed = np.zeros(len(both)), np.zeros(len(both), dtype=bool)
    # Twice: the second time a peer is judged as explained itself, so the healthy neighbours of
    # a node slow only through a failing NIC next to it are not explained away in turn.
    for _ in range(2):
        own = slow.reindex(codes).to_numpy()
        peer = slow.reindex(peers).to_numpy()
        blamed = peer > np.fmax(np.nan_to_num(own, nan=-np.inf), PEER_BLAME_Z)
        if not blamed.any():
            return empty
        after = _link_aggregates(both[~blamed])
        cand = np.unique(codes[blamed])
        out = after.loc[cand[np.isin(cand, after.index.to_numpy())]].copy()
        slow = first.copy()
        slow.loc[out.index] = _slowness(out)
    if not len(out):
        return empty
    worst = pd.Series(peer[blamed], index=peers[blamed]).groupby(codes[blamed]).idxmax()
    out["peer"] = worst.reindex(out.index).to_numpy()
    return out
