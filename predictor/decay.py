"""Exponentially decayed per-entity sums: the incremental sliding windows behind every feature.

A decayed sum ``S_tau(t) = sum_i v_i * exp(-(t - t_i) / tau)`` is a sliding window with a
soft edge whose length ``tau`` is in seconds, so it does not care how often samples arrive.
Ratios of two sums give rates and means over "about the last tau seconds" (e.g. counter
increments per observed second), and adding rows costs O(new rows): the backtest and the
service feed each row once instead of recomputing windows at every scoring instant.
"""

from __future__ import annotations

import numpy as np


class DecayedSums:
    """``values`` decayed sums for each of ``taus``, per entity, all referenced to one clock."""

    def __init__(self, n_values: int, taus: tuple[float, ...]) -> None:
        if not taus or min(taus) <= 0:
            raise ValueError(f"taus={taus} must be non-empty and > 0")
        self.taus = np.asarray(taus, dtype=np.float64)
        self.n_values = n_values
        self.sums = np.zeros((0, len(taus), n_values))
        self.t_ref: float | None = None

    @property
    def n_entities(self) -> int:
        return int(self.sums.shape[0])

    def grow(self, n_entities: int) -> None:
        """Make room for entities up to index ``n_entities - 1`` (new ones start at zero)."""
        extra = n_entities - self.sums.shape[0]
        if extra > 0:
            pad = np.zeros((extra, len(self.taus), self.n_values))
            self.sums = np.concatenate([self.sums, pad], axis=0)

    def advance(self, t: float) -> None:
        """Move the reference clock forward to ``t``, decaying every sum."""
        if self.t_ref is None:
            self.t_ref = t
            return
        if t <= self.t_ref:
            return
        factor = np.exp(-(t - self.t_ref) / self.taus)
        self.sums *= factor[None, :, None]
        self.t_ref = t

    def add(self, idx: np.ndarray, ts: np.ndarray, values: np.ndarray) -> None:
        """Add rows (entity ``idx``, time ``ts``, ``values`` of shape rows x n_values).

        Rows later than the reference clock move it forward first. NaN values add nothing.
        """
        if len(idx) == 0:
            return
        t_max = float(np.max(ts))
        self.advance(t_max)
        assert self.t_ref is not None
        n = self.n_entities
        vals = np.nan_to_num(values, nan=0.0)
        age = np.maximum(self.t_ref - ts, 0.0)
        for k, tau in enumerate(self.taus):
            w = np.exp(-age / tau)
            weighted = vals * w[:, None]
            for j in range(self.n_values):
                self.sums[:, k, j] += np.bincount(idx, weights=weighted[:, j], minlength=n)

    def clear(self, idx: np.ndarray) -> None:
        """Forget everything about entities ``idx`` (a reset: GPU replaced, driver reloaded)."""
        self.sums[idx] = 0.0

    def at(self, t: float) -> np.ndarray:
        """The sums decayed to time ``t`` (entities x taus x values), without moving the clock."""
        if self.t_ref is None or t <= self.t_ref:
            return self.sums
        factor = np.exp(-(t - self.t_ref) / self.taus)
        return self.sums * factor[None, :, None]
