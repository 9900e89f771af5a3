"""How long a signal has held: the floor (or ceiling) of a feature over the last hour.

A burst of replays or corrected errors that stops by itself, a rack's cooling event and a job
stall all push the instantaneous features as hard as a part that is failing; what sets the
failing part apart is that its signal *stays*. ``SustainedHistory`` keeps a snapshot of selected
features per entity every ``SNAPSHOT_S`` seconds and gives, for each, the least alarming value it
took over the last ``WINDOW_S`` (or over its ``SHORT_WINDOWS_S``): the minimum of a "more is
worse" feature, the maximum of a "less is worse" one. An entity missing from a snapshot, or a
history shorter than the window (a fresh start, a restarted service), counts as healthy (0), so
the feature never claims that a signal held for longer than it was seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

WINDOW_S = 3600.0
"""How far back a sustained feature looks."""
SNAPSHOT_S = 300.0
"""Spacing of the snapshots (independent of how often features are read)."""

SUSTAINED: dict[str, dict[str, tuple[str, int]]] = {
    "gpu": {
        "sbe_held_1h": ("sbe_rate_5m", 1), "pcie_held_1h": ("pcie_rate_5m", 1),
        "nvlink_held_1h": ("nvlink_rate_5m", 1), "temp_dev_held_1h": ("temp_dev", 1),
        "clock_dev_held_1h": ("clock_dev", -1),
        "throttle_thermal_held_1h": ("throttle_thermal_5m", 1),
        "err_rise_held_1h": ("err_rise_5m", 1), "err_rise_held_15m": ("err_rise_5m", 1),
    },
    "node": {
        "step_z_held_1h": ("step_z", 1), "compute_z_held_1h": ("compute_z", 1),
        "link_bw_med_z_held_1h": ("link_bw_med_z", -1),
        "link_lat_med_z_held_1h": ("link_lat_med_z", 1),
        "node_temp_dev_held_1h": ("node_temp_dev", 1),
    },
    "link": {"bw_z_held_1h": ("bw_z", -1), "lat_z_held_1h": ("lat_z", 1)},
}
"""Per entity kind: sustained feature -> (source feature, its direction: +1 more is worse)."""

STEPS: dict[str, dict[str, tuple[str, int]]] = {
    "gpu": {"err_rate_held_15m": ("err_rate_5m", 1)}, "node": {}, "link": {}}
"""Floors held in the same pass as ``SUSTAINED`` but not features themselves: what ``PEAKS``
reads, and what ``err_fall_1h`` measures a fall to."""

PEAKS: dict[str, dict[str, tuple[str, int]]] = {
    "gpu": {"err_rate_peak_1h": ("err_rate_held_15m", -1)}, "node": {}, "link": {}}
"""Ceilings over the hour of sustained features (a second pass, read as "less is worse"
sources): not features themselves, but what ``err_fall_1h`` measures a fall from. The ceiling of
the 15-minute floor, not of the 5-minute rate: the highest of a dozen noisy 5-minute readings of a
plateau stands well above the plateau, the highest of its 15-minute floors does not. Of the
error *rate*, not of its growth against the 6-h rate: a precursor's rate keeps climbing, but its
growth falls as its own errors raise the 6-h rate (round 34)."""

SHORT_WINDOWS_S: dict[str, float] = {"err_rise_held_15m": 900.0, "err_rate_held_15m": 900.0}
"""Sustained features held over less than ``WINDOW_S``. Error growth that has held for 15
minutes: most bursts that pass are over by then (a few minutes in the third generator, 1-30 in
ours), while a precursor under an hour long needs a warning well before its hour is up (the
alt generator's GPU precursors run 40-55 minutes, and errors at 20x their 6-h rate read 0.2-0.45
until the hour had passed)."""


def entity_keys(kind: str, frame: pd.DataFrame) -> pd.Index:
    """One string key per row: ``node/gpu``, ``node`` or ``src>dst``."""
    if kind == "gpu":
        return pd.Index(frame["node"].astype(str) + "/" + frame["gpu"].astype(str))
    if kind == "link":
        return pd.Index(frame["src"].astype(str) + ">" + frame["dst"].astype(str))
    return pd.Index(frame["node"].astype(str))


@dataclass
class _Snapshots:
    times: list[float] = field(default_factory=list)
    values: list[pd.DataFrame] = field(default_factory=list)


class SustainedHistory:
    """Snapshots of the source features of ``specs`` (``SUSTAINED`` and ``STEPS`` unless given),
    per entity kind."""

    def __init__(self, specs: dict[str, dict[str, tuple[str, int]]] | None = None) -> None:
        self.specs = specs if specs is not None else {
            kind: {**SUSTAINED[kind], **STEPS[kind]} for kind in SUSTAINED}
        self._kinds: dict[str, _Snapshots] = {k: _Snapshots() for k in self.specs}

    def add_to(self, kind: str, frame: pd.DataFrame, t: float) -> pd.DataFrame:
        """``frame`` with its sustained columns filled in; records a snapshot when one is due."""
        spec = self.specs[kind]
        sources = [src for src, _ in spec.values()]
        if not len(frame):
            for name in spec:
                frame[name] = pd.Series(dtype=np.float64)
            return frame
        keys = entity_keys(kind, frame)
        cur = pd.DataFrame(frame[sources].to_numpy(dtype=np.float64), index=keys,
                           columns=sources)
        cur = cur[~cur.index.duplicated()]
        snaps = self._kinds[kind]
        in_window = [(ts, v) for ts, v in zip(snaps.times, snaps.values, strict=True)
                     if ts > t - WINDOW_S]
        # Signed so that "worse" is always larger: the least alarming value is then a minimum.
        sign = np.array([d for _, d in spec.values()], dtype=np.float64)
        window = np.array([SHORT_WINDOWS_S.get(name, WINDOW_S) for name in spec])
        stack = [cur.to_numpy() * sign]
        for ts, v in in_window:
            # A snapshot older than a feature's window says nothing of it (+inf: never the min).
            stack.append(np.where(ts > t - window, np.nan_to_num(
                v.reindex(cur.index).to_numpy() * sign, nan=0.0), np.inf))
        # A history that does not reach back over a feature's window claims nothing (0) for it:
        # to within two snapshots of an hour, within one and a half of a shorter window (with two,
        # 15 minutes would be claimed from one snapshot 5 minutes old).
        oldest = np.array([min((ts for ts, _ in in_window if ts > t - w), default=np.inf)
                           for w in window])
        reach = window - np.where(window < WINDOW_S, 1.5, 2.0) * SNAPSHOT_S
        stack.append(np.where(oldest <= t - reach, np.inf, 0.0) * np.ones_like(stack[0]))
        with np.errstate(invalid="ignore"):
            held = np.min(np.stack(stack), axis=0) * sign
        held[np.isnan(stack[0])] = np.nan
        out = pd.DataFrame(held, index=cur.index, columns=list(spec)).reindex(keys)
        for name in spec:
            frame[name] = out[name].to_numpy()
        if not snaps.times or t - snaps.times[-1] >= SNAPSHOT_S - 1e-6:
            snaps.times.append(t)
            snaps.values.append(cur)
            while snaps.times and snaps.times[0] <= t - WINDOW_S:
                snaps.times.pop(0)
                snaps.values.pop(0)
        return frame
