"""Where the fourth generator's false episodes come from, and what knowing it would take away.

    OMP_NUM_THREADS=1 python benchmarks/policy_sweep.py cache DIR --set later --rounds 2
    OMP_NUM_THREADS=1 python benchmarks/false_episodes.py DIR

Reads the risks ``policy_sweep.py cache --set later`` kept for the fourth generator's fresh fleets,
regenerates each fleet to read what the generator drew but never writes to the trace (every
episode of latent degradation: failures' precursors, degradations that heal, error bursts that
pass), and for each false episode of the default policy names the episode on its node that was
highest in the hour before its first alert:

* ``burst``: a passing error burst (x = A u e^(1-u), rising to its peak in 3-25 minutes);
* ``heal``: a degradation drawn by the failures' own process that heals instead of failing;
* ``pre``: a failure's precursor, alerted on more than 6 hours before the failure;
* ``none``: nothing latent on the node (a chronically slow NIC or power-capped node, a rack
  cooling event, congestion).

Then it replays the cached risks with oracles that know what the generator drew, to bound what
any reading of the GPU error counters could gain: GPU risk from an error episode held at 0.2
until the episode is N minutes old (the best a burst's age could do), and GPU risk from every
burst, or from every burst and healing degradation, held at 0.2 throughout and for the hour after.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace
from predictor.evaluate import outcomes
from predictor.hysteresis import PolicyConfig

sys.path.insert(0, str(Path(__file__).parent))
import fourth_generator as fg
from policy_sweep import _later, alerts_for, figures, load_cached

ERROR_CHANNELS = ("ecc", "pcie", "nvlink")
VISIBLE = 0.05
"""Observed degradation below this is no episode (a burst's tail, a state reflected at 0)."""
HELD_RISK = 0.2
"""What an oracle holds a GPU's risk to: under every lane's level (the slow lane's is 0.25)."""
MEMORY_S = 3600.0
"""How long after an episode's last visible sample the features still read it (floors and counts
held over the hour)."""


@dataclass(frozen=True, kw_only=True)
class Drawn:
    """One episode the generator drew, on the node's sample grid."""

    cls: str
    channel: str
    node: str
    gpu: int
    ts: np.ndarray
    x: np.ndarray

    @property
    def span(self) -> tuple[float, float]:
        """First and last sample at which it is visible (NaN, NaN if never)."""
        on = np.flatnonzero(self.x > VISIBLE)
        return (float(self.ts[on[0]]), float(self.ts[on[-1]])) if len(on) else (np.nan, np.nan)


def drawn_episodes(make: Callable[[], FleetTrace]) -> list[Drawn]:
    """Every episode ``fourth_generator`` draws while ``make`` builds the fleet, classified."""
    seen: list[tuple[fg._Sim, list[tuple[str, fg.Episode]]]] = []
    episodes, on_grid = fg._episodes, fg._on_grid

    def recording(sim: fg._Sim, failures: list[fg.Failure]) -> list[fg.Episode]:
        calls = 0

        def counted(sim: fg._Sim, node: int, t: fg.FloatA, s: fg.FloatA,
                    strength: float) -> fg.FloatA:
            nonlocal calls
            calls += 1
            return on_grid(sim, node, t, s, strength)

        fg._on_grid = counted
        try:
            out = episodes(sim, failures)
        finally:
            fg._on_grid = on_grid
        # _episodes draws the failures' precursors, then degradations that heal (both through
        # _on_grid), then bursts.
        n_pre = sum(f.path is not None for f in failures)
        seen.append((sim, [("pre" if i < n_pre else "heal" if i < calls else "burst", e)
                           for i, e in enumerate(out)]))
        return out

    fg._episodes = recording
    try:
        make()
    finally:
        fg._episodes = episodes
    sim, drawn = seen[-1]
    return [Drawn(cls=cls, channel=e.channel, node=sim.names[e.node], gpu=e.gpu,
                  ts=sim.ts[e.node],
                  x=np.broadcast_to(np.asarray(e.x, dtype=float), sim.ts[e.node].shape))
            for cls, e in drawn]


def classify(trace: FleetTrace, rows: pd.DataFrame, drawn: list[Drawn]) -> pd.DataFrame:
    """The default policy's false episodes, each with the highest episode on its node in the
    hour before its first alert, its age then and how long past its peak."""
    alerts = alerts_for(rows, PolicyConfig())
    out = []
    eps = outcomes(trace, alerts).episodes
    for node, start in eps.loc[eps["verdict"] == "false", ["node", "start"]].to_numpy():
        first = alerts[(alerts["node"] == node) & (alerts["ts"] == start)].iloc[0]
        best: tuple[float, Drawn | None] = (VISIBLE, None)
        for d in drawn:
            hour = (d.ts >= start - 3600) & (d.ts <= start)
            if d.node == node and hour.any() and d.x[hour].max() >= best[0]:
                best = (float(d.x[hour].max()), d)
        row = {"node": node, "start": start, "kind": first["kind"], "risk": first["score"],
               "cls": "none", "channel": "", "x": np.nan, "age_min": np.nan,
               "past_peak_min": np.nan}
        if (top := best[1]) is not None:
            row.update(cls=top.cls, channel=top.channel, x=best[0],
                       age_min=(start - top.span[0]) / 60,
                       past_peak_min=(start - top.ts[int(np.argmax(top.x))]) / 60)
        out.append(row)
    return pd.DataFrame(out)


def held(rows: pd.DataFrame, drawn: Iterable[Drawn], *, for_s: float | None) -> pd.DataFrame:
    """``rows`` with each drawn episode's GPU risk held at ``HELD_RISK`` for its first ``for_s``
    seconds (if None: while it is visible and ``MEMORY_S`` after) where its GPU is the node's
    riskiest entity."""
    out = rows.copy()
    risk = out["risk"].to_numpy(dtype=float).copy()
    node, kind = out["node"].to_numpy(), out["kind"].to_numpy()
    gpu, ts = out["gpu"].to_numpy(), out["ts"].to_numpy(dtype=float)
    for d in drawn:
        t0, t1 = d.span
        if not np.isfinite(t0):
            continue
        inside = (ts < t0 + for_s) if for_s is not None else (ts <= t1 + MEMORY_S)
        m = (node == d.node) & (kind == "gpu") & (gpu == d.gpu) & (ts >= t0) & inside
        risk[m] = np.minimum(risk[m], HELD_RISK)
    return out.assign(risk=risk)


def pooled(fleets: dict[str, tuple[FleetTrace, pd.DataFrame]]) -> str:
    """``policy_sweep``'s pooled line for these fleets under the default policy."""
    return figures(fleets, PolicyConfig())["pooled"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", type=Path,
                   help="the DIR given to `policy_sweep.py cache DIR --set later`")
    p.add_argument("--ages", type=float, nargs="*", default=[15.0, 30.0, 45.0],
                   help="oracle holds, in minutes of an error episode's age (default 15 30 45)")
    a = p.parse_args(argv)
    cached = {n: v for n, v in load_cached(a.dir, "later").items() if n.startswith("fourth-")}
    if not cached:
        raise SystemExit(f"no fourth-generator fleets under {a.dir}/later: run "
                         f"`policy_sweep.py cache {a.dir} --set later` first")
    # Each round adds a fleet of each shape: as many rounds as fleets cached reach all of them.
    makers = _later(rounds=len(cached))
    fleets = {n: (*cached[n], drawn_episodes(makers[n])) for n in sorted(cached)}
    table = pd.concat([classify(tr, rows, drawn).assign(fleet=n)
                       for n, (tr, rows, drawn) in fleets.items()], ignore_index=True)
    pd.set_option("display.width", 160)
    print(f"{len(fleets)} fleets of the fourth generator, default policy: "
          f"{pooled({n: (tr, rows) for n, (tr, rows, _) in fleets.items()})}\n")
    print("false episodes by what the generator drew on the node (first alert's kind)")
    print(table.groupby(["cls", "channel", "kind"]).size().rename("episodes").to_string())
    print("\nmedians at the first alert")
    print(table.groupby("cls")[["risk", "x", "age_min", "past_peak_min"]].median().round(2)
          .to_string())
    errors = {n: [d for d in drawn if d.channel in ERROR_CHANNELS]
              for n, (_, _, drawn) in fleets.items()}
    print("\noracles, replayed on the cached risks: recall (precursor) / precision / false per "
          "1,000 node-days (median lead; false episodes)")
    for minutes in a.ages:
        line = pooled({n: (tr, held(rows, errors[n], for_s=60 * minutes))
                       for n, (tr, rows, _) in fleets.items()})
        print(f"  every error episode's GPU held for its first {minutes:g} min: {line}")
    for label, classes in (("every burst", {"burst"}), ("every burst and healing", {"burst",
                                                                                    "heal"})):
        line = pooled({n: (tr, held(rows, [d for d in errors[n] if d.cls in classes],
                                    for_s=None))
                       for n, (tr, rows, _) in fleets.items()})
        print(f"  {label}'s GPU held throughout: {line}")


if __name__ == "__main__":
    main()
