"""Training rows from labelled traces: replayed features plus "fails within the horizon" labels.

Labels come from ``failures.csv``, which only training and evaluation read. A GPU row is
positive when that GPU fails within the horizon; a node row, and a link row for the node it
points at, when that node has a node or network failure (``gpu`` empty). A GPU's failure does
not make its node's row positive: ECC and PCIe precursors do not show in node features, and
such rows, ~10,000 against ~130 failing fans in the training fleets, taught the node model to
shrug at a node's own heat (predictor/ROUNDS.md). Rows just after a failure (the broken part
may still report) are left out rather than called healthy, and so are a healthy GPU's rows inside
a window that the trace's ``meta.json`` marks ``unlabelled``: a generated burst while it rises,
which looks like a precursor by construction and whose end is not known yet.
Healthy rows vastly outnumber the rest; a random share of them is kept and weighted back up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace
from predictor.feature_frames import FEATURES_BY_KIND
from predictor.replay import replay

KINDS: tuple[str, ...] = ("gpu", "node", "link")
AFTER_FAILURE_S = 3 * 3600.0
"""Rows of a node this long after one of its failures are not used for training."""


@dataclass(kw_only=True)
class Rows:
    """Training rows of one entity kind."""

    x: list[pd.DataFrame] = field(default_factory=list)
    y: list[np.ndarray] = field(default_factory=list)
    w: list[np.ndarray] = field(default_factory=list)
    ttf_s: list[np.ndarray] = field(default_factory=list)

    def frames(self, kind: str) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
        cols = list(FEATURES_BY_KIND[kind])
        if not self.x:
            return pd.DataFrame(columns=cols), np.zeros(0), np.zeros(0), np.zeros(0)
        return (pd.concat(self.x, ignore_index=True)[cols], np.concatenate(self.y),
                np.concatenate(self.w), np.concatenate(self.ttf_s))


@dataclass(frozen=True, kw_only=True)
class LabelConfig:
    """How rows are labelled and sampled."""

    horizon_s: float = 6 * 3600.0
    """A row is positive when its entity fails within this many seconds."""
    keep_healthy: float = 0.08
    """Share of negative rows kept (weighted by its inverse)."""
    every_s: float = 300.0
    """Replay period in trace seconds."""

    def __post_init__(self) -> None:
        # Written so that NaN fails each check, and infinity the two in seconds.
        if not 60 < self.horizon_s < math.inf:
            raise ValueError(f"horizon_s={self.horizon_s} must be a number of seconds > 60")
        if not 0 < self.keep_healthy <= 1:
            raise ValueError(f"keep_healthy={self.keep_healthy} must be in (0, 1]")
        if not 0 < self.every_s < math.inf:
            raise ValueError(f"every_s={self.every_s} must be a number of seconds > 0")


def _time_to_failure(t: float, keys: pd.Series, fail_ts: np.ndarray, fail_keys: np.ndarray,
                     fail_pre: np.ndarray, horizon_s: float
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(seconds to the next failure within the horizon or NaN, that failure's precursor
    length, seconds since the last failure)."""
    ahead: dict[str, float] = {}
    pre: dict[str, float] = {}
    behind: dict[str, float] = {}
    for ts, key, p in zip(fail_ts, fail_keys, fail_pre, strict=True):
        if t < ts <= t + horizon_s and ts < ahead.get(key, np.inf):
            ahead[key], pre[key] = ts, p
        elif t - AFTER_FAILURE_S < ts <= t:
            behind[key] = max(behind.get(key, -np.inf), ts)
    ttf = np.full(len(keys), np.nan)
    pre_s = np.full(len(keys), np.nan)
    since = np.full(len(keys), np.inf)
    if ahead:
        ttf = keys.map(ahead).to_numpy(dtype=np.float64) - t
        pre_s = keys.map(pre).to_numpy(dtype=np.float64)
    if behind:
        since = t - keys.map(behind).to_numpy(dtype=np.float64)
        since = np.where(np.isnan(since), np.inf, since)
    return ttf, pre_s, since


Window = tuple[float, float, str, int]


def _windows(raw: object) -> list[Window]:
    """meta.json's ``unlabelled`` as ``(t0, t1, node, gpu)`` windows; malformed ones refused."""
    if raw is None:
        return []
    shape = "a list of [t0, t1, node, gpu] (seconds, seconds, node name, GPU index)"
    if not isinstance(raw, list):
        raise ValueError(f"meta.json 'unlabelled' must be {shape}, not {type(raw).__name__}")
    out = []
    for i, w in enumerate(raw):
        try:
            t0, t1, node, gpu = w
            out.append((float(t0), float(t1), str(node), int(gpu)))
        except (TypeError, ValueError):
            raise ValueError(f"meta.json 'unlabelled'[{i}] = {w!r}: must be {shape}") from None
    return out


def _hidden(windows: list[Window], t: float, frame: pd.DataFrame) -> np.ndarray:
    """Rows of ``frame`` (GPU rows at ``t``) inside one of their GPU's unlabelled windows."""
    live = {(node, gpu) for t0, t1, node, gpu in windows if t0 <= t <= t1}
    if not live:
        return np.zeros(len(frame), dtype=bool)
    pairs = zip(frame["node"].astype(str), frame["gpu"].astype(int), strict=True)
    return np.fromiter((p in live for p in pairs), dtype=bool, count=len(frame))


def collect(trace: FleetTrace, rows: dict[str, Rows], *, config: LabelConfig,
            rng: np.random.Generator) -> None:
    """Replay ``trace`` (which must carry failures) and append labelled rows to ``rows``."""
    if trace.failures is None:
        raise ValueError("training needs a trace read with its failures.csv")
    fl = trace.failures
    f_ts = fl["ts"].to_numpy(dtype=np.float64)
    f_node = fl["node"].astype(str).to_numpy(dtype=object)
    f_gpu = fl["gpu"].fillna(-1).to_numpy(dtype=np.int64)
    f_gkey = np.array([f"{n}/{g}" for n, g in zip(f_node, f_gpu, strict=True)], dtype=object)
    # Unknown precursor length: assume the whole horizon could show it.
    f_pre = fl["precursor_s"].fillna(config.horizon_s).to_numpy(dtype=np.float64)
    nf = f_gpu < 0
    hidden = _windows(trace.meta.extra.get("unlabelled"))
    every_s = min(config.every_s, max(15.0 * trace.meta.interval_s, 30.0))
    for feats in replay(trace, every_s=every_s):
        t = feats.t
        frames = {"gpu": feats.gpu, "node": feats.node, "link": feats.link}
        for kind, frame in frames.items():
            if not len(frame):
                continue
            h = config.horizon_s
            ttf, pre, since = _time_to_failure(t, frame["node"], f_ts, f_node, f_pre, h)
            if kind == "gpu" and not np.isnan(ttf).all():
                keys = frame["node"].astype(str) + "/" + frame["gpu"].astype(str)
                ttf, pre, _ = _time_to_failure(t, keys, f_ts, f_gkey, f_pre, h)
            elif kind in ("link", "node") and not np.isnan(ttf).all():
                ttf, pre, _ = _time_to_failure(t, frame["node"], f_ts[nf], f_node[nf], f_pre[nf], h)
            doomed = ~np.isnan(ttf)
            # Before its precursor starts (or with none: a sudden failure) a doomed entity
            # looks healthy; such rows teach nothing either way and are left out.
            y = doomed & (ttf <= pre)
            keep = (since > AFTER_FAILURE_S) & (y | (~doomed & (rng.random(len(y))
                                                                < config.keep_healthy)))
            if kind == "gpu" and hidden:  # a failing GPU's rows stay what they are
                keep &= y | ~_hidden(hidden, t, frame)
            if not keep.any():
                continue
            r = rows[kind]
            r.x.append(frame.loc[keep, list(FEATURES_BY_KIND[kind])].reset_index(drop=True))
            r.y.append(y[keep].astype(np.int64))
            r.w.append(np.where(y[keep], 1.0, 1.0 / config.keep_healthy))
            r.ttf_s.append(ttf[keep])
