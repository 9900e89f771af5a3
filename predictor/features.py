"""Sliding-window features of GPUs, nodes and links, computed by the same code online (the
service's scoring loop) and in backtests.

Every feature is free of scale and workload: counter *rates* per observed hour (reset-aware),
trends as differences between windows (5 min vs 6 h, in seconds, not rows, so any sampling
interval works), deviations from peers (a GPU against the other GPUs of its node, a node
against the other nodes of the job, a link against all links; robust z-scores with
median/MAD), counts of hardware XIDs by class (application XIDs 13/31/43/45 say nothing about
hardware and are ignored), telemetry gaps, straggler and link-bandwidth scores. A missing
column (a trace without node.csv, a GPU without HBM temperature) gives NaN features, which the
model treats as "unknown", never an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace
from predictor.streams import TAU_NAMES, EventCounts, NodeNames, Stream
from predictor.sustained import PEAKS, SustainedHistory

COUNTERS: tuple[str, ...] = (
    "gpu.ecc.sbe", "gpu.ecc.dbe", "gpu.rows.remapped.correctable",
    "gpu.rows.remapped.uncorrectable", "gpu.pcie.replay", "gpu.nvlink.crc_errors",
)
GAUGES: tuple[str, ...] = (
    "gpu.temperature", "gpu.clock.sm", "gpu.power", "gpu.throttle.thermal", "gpu.throttle.power",
    "gpu.rows.remap.pending",
)
"""GPU gauges kept per GPU, in the order of the stream's gauge columns; the stream adds power
squared after them (``POWER_SQ``) for power swings. HBM temperature and utilization are not
kept: no feature reads them (see ``feature_frames.GPU_FEATURES``; utilization follows the
job's phases, not the GPU's health)."""
GAUGE: dict[str, int] = {name: i for i, name in enumerate(GAUGES)}
"""Gauge name -> its column in the GPU stream's windows."""
POWER_SQ = len(GAUGES)
NODE_GAUGES: tuple[str, ...] = (
    "train.step.duration", "train.compute.duration", "train.collective.duration")
LINK_GAUGES: tuple[str, ...] = ("net.link.bandwidth", "net.link.latency")

APP_XIDS = frozenset({13, 31, 43, 45})
"""Application XIDs (illegal address, MMU fault, reset channel, preemptive cleanup)."""
XID_CLASSES: dict[str, frozenset[int]] = {
    "mem": frozenset({48, 63, 64, 92, 94, 95}),
    "nvlink": frozenset({74}),
    "bus": frozenset({79}),
}
"""Hardware XID classes; any other non-application XID counts as ``other``."""
XID_CLASS_NAMES: tuple[str, ...] = ("mem", "nvlink", "bus", "other")

FATAL_XIDS = frozenset({48, 79, 94, 95, 119, 120})
"""XIDs that *are* a failure (double-bit ECC, fell off the bus, contained/uncontained ECC
error, GSP timeout/error): the part needs a reset or a repair, so it is past predicting."""
FAILED_HOLD_S = 3600.0
"""After a fatal XID, a node counts as failed (not at risk) for this long."""

REMAP_XIDS = frozenset({63, 64})
"""Row-remap XIDs: 63, a row of HBM remapped after its errors; 64, a remap that failed."""
REMAP_REPEATS = 2
REMAP_REPEAT_S = 3600.0
"""A GPU with ``REMAP_REPEATS`` or more row-remap XIDs within this long has remapped repeatedly
(see ``Features.remaps``)."""

STALE_AFTER_S = 900.0
"""Entities without a row for this long (or 10 sampling intervals) are not scored."""

SILENT_AFTER_S = 60.0
"""A node none of whose GPU or node rows is newer than this (or 3 sampling intervals) has gone
silent: it is down, drained or cut off, and a warning raised on its last, stale features would
come after the fact (see ``Features.silent``)."""


@dataclass(frozen=True, kw_only=True)
class Features:
    """Feature frames at one instant: one row per live entity."""

    t: float
    gpu: pd.DataFrame
    """``node``, ``gpu`` then ``GPU_FEATURES``."""
    node: pd.DataFrame
    """``node`` then ``NODE_FEATURES``."""
    link: pd.DataFrame
    """``src``, ``dst``, ``node`` (the endpoint it points at), ``peer`` then ``LINK_FEATURES``."""
    failed: dict[str, tuple[float, int]] = field(default_factory=dict)
    """Nodes with a fatal XID in the last ``FAILED_HOLD_S``: node -> (time, XID) of the latest."""
    silent: dict[str, float] = field(default_factory=dict)
    """Nodes still within ``STALE_AFTER_S`` whose newest GPU or node row is older than
    ``SILENT_AFTER_S`` (or 3 sampling intervals): node -> seconds since that row."""
    explained: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Indexed by node: nodes whose links read slow only towards a worse peer (``peer``), with
    their link aggregates (``feature_frames.LINK_AGGREGATES``) left without those links. The
    feature frames keep the aggregates as the models were trained on them; the scorer puts these
    in their place (``predictor.scorer.explain_away``)."""
    remaps: dict[tuple[str, int], int] = field(default_factory=dict)
    """GPUs with two or more row-remap XIDs (``REMAP_XIDS``) in the last ``REMAP_REPEAT_S``:
    (node, gpu) -> how many. A single remap is routine; a second within the hour is HBM giving
    way (the scorer treats it as evidence, ``predictor.scorer.REMAP_RISK``)."""


def _xid_class(codes: np.ndarray) -> np.ndarray:
    """Class index per XID code (-1 for application XIDs)."""
    out = np.full(len(codes), XID_CLASS_NAMES.index("other"), dtype=np.int64)
    for i, name in enumerate(XID_CLASS_NAMES[:-1]):
        out[np.isin(codes, list(XID_CLASSES[name]))] = i
    out[np.isin(codes, list(APP_XIDS))] = -1
    return out


class FeatureEngine:
    """Feed trace rows in time order with ``update``; read features with ``features``."""

    def __init__(self, *, interval_s: float | None = None) -> None:
        # One extra gauge: power squared, for the variance of power over each window.
        self.gpus = Stream(n_counters=len(COUNTERS), n_gauges=len(GAUGES) + 1)
        self.nodes = Stream(n_counters=0, n_gauges=len(NODE_GAUGES))
        self.links = Stream(n_counters=0, n_gauges=len(LINK_GAUGES))
        self.node_names = NodeNames()
        self.interval_s = interval_s
        self.events_until = -np.inf
        self.events_exported = True
        """False while the fleet keeps no event log: XID counts read as unknown (NaN), not 0."""
        self.t = -np.inf
        self.gpu_events = EventCounts(len(XID_CLASS_NAMES))
        self.node_events = EventCounts(len(XID_CLASS_NAMES))
        self._link_dt: float | None = None
        self.sustained = SustainedHistory()
        self.peaks = SustainedHistory(PEAKS)
        self.fatal: dict[str, tuple[float, int]] = {}
        self.remap_times: dict[tuple[str, int], list[float]] = {}

    def _nominal(self, ts: np.ndarray, keys: np.ndarray) -> float:
        if self.interval_s is None and len(ts) > 1:
            order = np.lexsort((ts, keys))
            d = np.diff(ts[order])[keys[order][1:] == keys[order][:-1]]
            d = d[d > 0]
            if len(d):
                self.interval_s = float(np.median(d))
        return self.interval_s or 30.0

    def update(self, trace: FleetTrace, t: float) -> None:
        """Ingest the rows of ``trace`` with ``ts <= t`` that are newer than what was seen."""
        self.t = max(self.t, t)
        g = trace.gpu[trace.gpu["ts"] <= t]
        if len(g):
            keys = self.node_names.codes(g["node"].to_numpy()) * 4096 + g["gpu"].to_numpy()
            ts = g["ts"].to_numpy(dtype=np.float64)
            nominal = self._nominal(ts, keys)
            gauges = _columns(g, GAUGES)
            power = gauges[:, GAUGE["gpu.power"]]
            self.gpus.ingest(keys, ts, _columns(g, COUNTERS), np.c_[gauges, power * power],
                             nominal_dt=nominal)
        n = trace.node[trace.node["ts"] <= t]
        if len(n):
            keys = self.node_names.codes(n["node"].to_numpy())
            self.nodes.ingest(keys, n["ts"].to_numpy(dtype=np.float64), np.zeros((len(n), 0)),
                              _columns(n, NODE_GAUGES), nominal_dt=self.interval_s or 30.0)
        lk = trace.links[trace.links["ts"] <= t]
        if len(lk):
            keys = (self.node_names.codes(lk["src"].to_numpy()) * 1_000_000
                    + self.node_names.codes(lk["dst"].to_numpy()))
            ts = lk["ts"].to_numpy(dtype=np.float64)
            self.links.ingest(keys, ts, np.zeros((len(lk), 0)), _columns(lk, LINK_GAUGES),
                              nominal_dt=max(self._link_nominal(ts, keys), 1.0))
        self.events_exported = trace.events_exported
        self._ingest_events(trace.events, t)

    def _link_nominal(self, ts: np.ndarray, keys: np.ndarray) -> float:
        if self._link_dt is None:
            order = np.lexsort((ts, keys))
            d = np.diff(ts[order])[keys[order][1:] == keys[order][:-1]]
            d = d[d > 0]
            if not len(d):
                return self.interval_s or 30.0
            self._link_dt = float(np.median(d))
        return self._link_dt

    def _ingest_events(self, events: pd.DataFrame, t: float) -> None:
        ev = events[(events["ts"] > self.events_until) & (events["ts"] <= t)]
        if len(ev):
            self.events_until = float(ev["ts"].max())
        ev = ev[ev["kind"].astype(str) == "xid"] if len(ev) else ev
        if not len(ev):
            return
        fatal = ev[ev["code"].isin(list(FATAL_XIDS))]
        for node, at, code in zip(fatal["node"].astype(str), fatal["ts"].astype(float),
                                  fatal["code"].astype(int), strict=True):
            if at >= self.fatal.get(node, (-np.inf, 0))[0]:
                self.fatal[node] = (float(at), int(code))
        self._note_remaps(ev)
        cls = _xid_class(ev["code"].fillna(-1).to_numpy(dtype=np.int64))
        ev, cls = ev[cls >= 0], cls[cls >= 0]
        gpu = ev["gpu"].to_numpy(dtype=np.int64)
        codes = self.node_names.codes(ev["node"].to_numpy())
        ts = ev["ts"].to_numpy(dtype=np.float64)
        on_gpu = gpu >= 0
        self.gpu_events.add(codes[on_gpu] * 4096 + gpu[on_gpu], ts[on_gpu], cls[on_gpu])
        self.node_events.add(codes[~on_gpu], ts[~on_gpu], cls[~on_gpu])

    def _note_remaps(self, ev: pd.DataFrame) -> None:
        """Keep the times of row-remap XIDs per GPU for the last ``REMAP_REPEAT_S``."""
        rm = ev[ev["code"].isin(list(REMAP_XIDS)) & (ev["gpu"].fillna(-1) >= 0)]
        for node, gpu, at in zip(rm["node"].astype(str), rm["gpu"].astype(int),
                                 rm["ts"].astype(float), strict=True):
            self.remap_times.setdefault((node, gpu), []).append(at)
        horizon = self.t - REMAP_REPEAT_S
        self.remap_times = {k: kept for k, v in self.remap_times.items()
                            if (kept := [x for x in v if x > horizon])}

    def _remaps(self, t: float) -> dict[tuple[str, int], int]:
        """``Features.remaps`` at ``t``: GPUs with two or more remaps in the window ending there."""
        out = {k: sum(t - REMAP_REPEAT_S < x <= t for x in v) for k, v in self.remap_times.items()}
        return {k: n for k, n in out.items() if n >= REMAP_REPEATS}

    def features(self, t: float | None = None) -> Features:
        """Features of every entity with a row in the last ``STALE_AFTER_S`` seconds."""
        from predictor import feature_frames

        t = self.t if t is None else t
        stale_s = max(STALE_AFTER_S, 10.0 * (self.interval_s or 30.0))
        feats = feature_frames.build(self, t, stale_s=stale_s)
        feats.failed.update({n: v for n, v in self.fatal.items() if t - FAILED_HOLD_S < v[0] <= t})
        feats.silent.update(_silent(feats, nominal=self.interval_s or 30.0))
        feats.remaps.update(self._remaps(t))
        return feats


def _silent(feats: Features, *, nominal: float) -> dict[str, float]:
    """Node -> seconds since its newest GPU or node row, for nodes silent past the threshold."""
    ages = [pd.Series(frame[col].to_numpy(dtype=np.float64) * nominal,
                      index=frame["node"].to_numpy(dtype=object))
            for frame, col in ((feats.gpu, "stale_intervals"), (feats.node, "node_stale_intervals"))
            if len(frame) and col in frame.columns]
    if not ages:
        return {}
    # A node's age is that of its freshest row: one live GPU or a live hook keeps it live.
    newest = pd.concat(ages).dropna().groupby(level=0).min()
    quiet = newest[newest > max(SILENT_AFTER_S, 3.0 * nominal)]
    return {str(n): float(a) for n, a in quiet.items()}


def _columns(frame: pd.DataFrame, names: tuple[str, ...]) -> np.ndarray:
    out = np.full((len(frame), len(names)), np.nan)
    for j, name in enumerate(names):
        if name in frame.columns:
            out[:, j] = frame[name].to_numpy(dtype=np.float64)
    return out


__all__ = ["TAU_NAMES", "FeatureEngine", "Features"]
