"""Replaying a fleet trace in time order, as the service would have seen it arrive.

At each scoring instant ``t`` the feature engine receives only the rows with
``t_prev < ts <= t``; nothing later is ever handed to it, so replay cannot look ahead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace
from predictor.features import FeatureEngine, Features

DEFAULT_EVERY_S = 300.0
"""Scoring period of backtests and training replays (trace seconds)."""


def ticks(trace: FleetTrace, every_s: float) -> np.ndarray:
    """Scoring instants from the first row to the trace's end, every ``every_s`` seconds."""
    if every_s <= 0:
        raise ValueError(f"every_s={every_s} must be > 0")
    starts = [f["ts"].min() for f in (trace.gpu, trace.node, trace.links) if len(f)]
    first = float(min(starts)) if starts else trace.meta.start
    ends = [f["ts"].max() for f in (trace.gpu, trace.node, trace.links, trace.events) if len(f)]
    last = max([trace.meta.end, *[float(e) for e in ends]])
    return np.arange(first + every_s, last + every_s, every_s)


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    if frame["ts"].is_monotonic_increasing:
        return frame
    return frame.sort_values("ts", kind="stable").reset_index(drop=True)


def _slice(frame: pd.DataFrame, lo: float, hi: float) -> pd.DataFrame:
    ts = frame["ts"].to_numpy()
    a, b = np.searchsorted(ts, lo, side="right"), np.searchsorted(ts, hi, side="right")
    return frame.iloc[a:b]


def replay(trace: FleetTrace, *, every_s: float = DEFAULT_EVERY_S,
           engine: FeatureEngine | None = None) -> Iterator[Features]:
    """Features at every scoring instant, each computed from rows at or before it."""
    engine = engine or FeatureEngine(interval_s=trace.meta.interval_s)
    # Out-of-order rows are legal in a trace; replay needs them in time order.
    trace = replace(trace, gpu=_sorted(trace.gpu), node=_sorted(trace.node),
                    links=_sorted(trace.links), events=_sorted(trace.events), failures=None)
    prev = -np.inf
    for t in ticks(trace, every_s):
        t = float(t)
        chunk = replace(
            trace,
            gpu=_slice(trace.gpu, prev, t), node=_slice(trace.node, prev, t),
            links=_slice(trace.links, prev, t), events=_slice(trace.events, prev, t),
        )
        engine.update(chunk, t)
        prev = t
        yield engine.features(t)
