"""Per-entity streaming state: rows go in once, decayed window sums come out.

One ``Stream`` per entity family (GPUs, nodes, links) keeps, for every entity, the time of its
last row, the last value of each cumulative counter and decayed sums of observed time, gap
time, reset-aware counter increments and time-weighted gauge values. A counter that drops is
a reset (GPU replaced, driver reloaded), never a negative rate; a reset or a long telemetry gap
clears what the entity had accumulated, so errors of a replaced part do not haunt its successor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from predictor.decay import DecayedSums

TAUS_S: tuple[float, ...] = (300.0, 3600.0, 21600.0)
"""Window lengths (seconds) of every stream: about 5 minutes, 1 hour and 6 hours."""
TAU_NAMES: tuple[str, ...] = ("5m", "1h", "6h")


class Keys:
    """Maps entity keys (ints or strings) to dense indices, adding unseen keys."""

    def __init__(self) -> None:
        self.index = pd.Index([])

    def __len__(self) -> int:
        return len(self.index)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        wanted = pd.Index(keys)
        pos = self.index.get_indexer(wanted)
        if (pos < 0).any():
            new = pd.unique(keys[pos < 0])
            self.index = self.index.append(pd.Index(new)) if len(self.index) else pd.Index(new)
            pos = self.index.get_indexer(wanted)
        return np.asarray(pos, dtype=np.int64)


@dataclass(frozen=True, kw_only=True)
class StreamWindows:
    """A stream's state at one instant, for feature extraction (arrays indexed by entity)."""

    obs_s: np.ndarray
    """Observed seconds per window (entities x taus)."""
    gap_frac: np.ndarray
    """Fraction of the window lost to telemetry gaps (entities x taus)."""
    rate_per_h: np.ndarray
    """Reset-aware counter increments per observed hour (entities x taus x counters)."""
    mean: np.ndarray
    """Time-weighted gauge means, NaN where never observed (entities x taus x gauges)."""
    last_ts: np.ndarray
    """Time of each entity's last row."""


class Stream:
    """Streaming window state for one family of entities."""

    def __init__(self, *, n_counters: int, n_gauges: int) -> None:
        self.nc = n_counters
        self.ng = n_gauges
        self.keys = Keys()
        self.sums = DecayedSums(2 + n_counters + 2 * n_gauges, TAUS_S)
        self.last_ts = np.zeros(0)
        self.last_counter = np.zeros((0, n_counters))

    def _grow(self) -> None:
        n = len(self.keys)
        extra = n - len(self.last_ts)
        if extra > 0:
            self.last_ts = np.concatenate([self.last_ts, np.full(extra, -np.inf)])
            self.last_counter = np.concatenate(
                [self.last_counter, np.full((extra, self.nc), np.nan)])
        self.sums.grow(n)

    def ingest(self, keys: np.ndarray, ts: np.ndarray, counters: np.ndarray,
               gauges: np.ndarray, *, nominal_dt: float) -> None:
        """Add rows; rows at or before their entity's last row are duplicates and skipped."""
        if len(ts) == 0:
            return
        ent = self.keys.lookup(keys)
        self._grow()
        fresh = ts > self.last_ts[ent]
        order = np.lexsort((ts[fresh], ent[fresh]))
        ent, ts = ent[fresh][order], ts[fresh][order]
        counters, gauges = counters[fresh][order], gauges[fresh][order]
        n = len(ts)
        if n == 0:
            return
        first = np.r_[True, ent[1:] != ent[:-1]]
        starts = np.flatnonzero(first)
        group = np.cumsum(first) - 1
        prev_ts = np.r_[np.nan, ts[:-1]]
        prev_ts[first] = self.last_ts[ent[first]]
        dt = ts - prev_ts  # inf after -inf (a new entity) -> treated as unknown below
        dt[~np.isfinite(dt)] = np.nan
        gap_reset_s = max(1800.0, 20.0 * nominal_dt)
        reset = np.nan_to_num(dt, nan=0.0) > gap_reset_s
        inc = np.zeros((n, self.nc))
        if self.nc:
            prev, filled_last = self._previous_counters(ent, first, starts, counters)
            inc = counters - prev
            dropped = (inc < 0).any(axis=1)
            reset |= dropped
            inc = np.where(np.isnan(inc) | (inc < 0), 0.0, inc)
            self.last_counter[ent[first]] = filled_last
        inc[reset] = 0.0
        # Rows before an entity's last reset in this chunk belong to the part that went away.
        reset_pos = np.where(reset, np.arange(n), -1)
        last_reset = np.maximum.reduceat(reset_pos, starts)
        keep = np.arange(n) >= last_reset[group]
        cleared = ent[first][last_reset >= 0]
        if len(cleared):
            self.sums.clear(cleared)
        dt_w = np.where(np.isnan(dt) | reset, nominal_dt, np.clip(dt, 0.0, 3.0 * nominal_dt))
        gap = np.where(np.isnan(dt) | reset, 0.0, np.maximum(dt - 2.5 * nominal_dt, 0.0))
        present = ~np.isnan(gauges)
        values = np.concatenate([
            dt_w[:, None], gap[:, None], inc,
            np.where(present, gauges, 0.0) * dt_w[:, None], present * dt_w[:, None],
        ], axis=1)
        self.sums.add(ent[keep], ts[keep], values[keep])
        ends = np.r_[starts[1:], n] - 1
        self.last_ts[ent[ends]] = ts[ends]

    def _previous_counters(self, ent: np.ndarray, first: np.ndarray, starts: np.ndarray,
                           counters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's previous non-missing counter values (the state's for a group's first
        row), and each group's last non-missing values."""
        n = len(ent)
        block = np.insert(counters, starts, self.last_counter[ent[first]], axis=0)
        m = len(block)
        is_state = np.zeros(m, dtype=bool)
        is_state[starts + np.arange(len(starts))] = True
        valid = ~np.isnan(block)
        pos = np.where(valid | is_state[:, None], np.arange(m)[:, None], 0)
        pos = np.maximum.accumulate(pos, axis=0)
        filled = np.take_along_axis(block, pos, axis=0)
        prev_all = np.r_[np.full((1, self.nc), np.nan), filled[:-1]]
        rows = ~is_state
        prev = prev_all[rows]
        ends_block = np.r_[np.flatnonzero(is_state)[1:], m] - 1
        assert len(prev) == n
        return prev, filled[ends_block]

    def windows(self, t: float) -> StreamWindows:
        """The decayed windows of every entity, seen from time ``t``."""
        s = self.sums.at(t)
        obs = s[:, :, 0]
        gap = s[:, :, 1]
        floor = np.minimum(0.5 * self.sums.taus, 1800.0)[None, :]
        rate = s[:, :, 2:2 + self.nc] / np.maximum(obs, floor)[:, :, None] * 3600.0
        g0 = 2 + self.nc
        num, den = s[:, :, g0:g0 + self.ng], s[:, :, g0 + self.ng:g0 + 2 * self.ng]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(den > 1e-9, num / np.where(den > 1e-9, den, 1.0), np.nan)
            gap_frac = np.where(obs + gap > 0, gap / np.maximum(obs + gap, 1e-9), 0.0)
        return StreamWindows(obs_s=obs, gap_frac=gap_frac, rate_per_h=rate, mean=mean,
                             last_ts=self.last_ts.copy())


class NodeNames:
    """Node name -> small integer code, stable for the engine's lifetime."""

    def __init__(self) -> None:
        self.keys = Keys()

    def codes(self, names: np.ndarray) -> np.ndarray:
        return self.keys.lookup(np.asarray(names, dtype=object))

    def names(self, codes: np.ndarray) -> np.ndarray:
        return np.asarray(self.keys.index, dtype=object)[codes]


class EventCounts:
    """Decayed counts of events per entity key and event class."""

    def __init__(self, n_classes: int) -> None:
        self.n_classes = n_classes
        self.keys = Keys()
        self.sums = DecayedSums(n_classes, TAUS_S)

    def add(self, keys: np.ndarray, ts: np.ndarray, cls: np.ndarray) -> None:
        if len(keys) == 0:
            return
        ent = self.keys.lookup(keys)
        self.sums.grow(len(self.keys))
        values = np.zeros((len(keys), self.n_classes))
        values[np.arange(len(keys)), cls] = 1.0
        self.sums.add(ent, ts, values)

    def counts_for(self, keys: np.ndarray, t: float) -> np.ndarray:
        """Decayed counts (len(keys) x taus x classes); zero for keys never seen."""
        out = np.zeros((len(keys), len(TAUS_S), self.n_classes))
        if len(self.keys) == 0 or len(keys) == 0:
            return out
        pos = self.keys.index.get_indexer(pd.Index(keys))
        hit = pos >= 0
        out[hit] = self.sums.at(t)[pos[hit]]
        return out
