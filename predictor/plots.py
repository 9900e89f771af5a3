"""Risk timelines of a backtest as a PNG (matplotlib, Agg: no display needed).

One lane per node, its risk as colour over time: each failure a cross at its time with its
precursor as a bar before it, each alert episode a bar above the lane, green where a failure
followed it 60 s to 6 h later, red where none did (a false alarm), orange where the node failed
within 60 s (too late to drain). What ``foreshock evaluate --details`` lists, in one picture.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from collector.fleet_trace import (
    FleetTrace,
    TraceFormatError,
    TraceMeta,
    empty_frame,
    read_failures,
    read_meta,
)
from predictor.backtest import BacktestResult
from predictor.evaluate import outcomes

VERDICT_COLOURS = {"true": "#1a9850", "false": "#d73027", "late": "#fc8d59", None: "#4575b4"}
"""Alert episode bars by verdict (None: the trace has no failures.csv to judge them by)."""


def _labels(result: BacktestResult, trace_dir: Path | None) -> tuple[FleetTrace, bool]:
    """A trace holding only what the plot needs (meta and failures; no telemetry is read again)
    and whether its failures are the ground truth (False: none to read, or not readable)."""
    tl, alerts = result.timeline, result.alerts
    stamps = pd.concat([tl["ts"], alerts["ts"]])
    meta = TraceMeta(start=float(stamps.min()) if len(stamps) else 0.0,
                     end=float(stamps.max()) if len(stamps) else 0.0, interval_s=30.0,
                     nodes=(), gpus_per_node=0)
    failures = empty_frame("failures.csv")
    labelled = False
    if trace_dir is not None:
        try:
            meta = read_meta(Path(trace_dir))
            failures = read_failures(trace_dir)
            labelled = True
        except TraceFormatError:
            pass  # the backtest ran without them; draw the risk and the alerts alone
    # Every node drawn or judged is one of the trace's, whatever meta.json lists.
    nodes = {*meta.nodes, *tl["node"], *alerts["node"], *failures["node"].astype(str)}
    return FleetTrace(meta=replace(meta, nodes=tuple(sorted(nodes))),
                      gpu=empty_frame("gpu.csv.gz"), node=empty_frame("node.csv.gz"),
                      links=empty_frame("links.csv.gz"), events=empty_frame("events.csv"),
                      failures=failures), labelled


def _lanes(tl: pd.DataFrame, failures: pd.DataFrame, episodes: pd.DataFrame,
           max_nodes: int) -> list[str]:
    """Nodes to draw, in name order: those with a failure, then those with an alert, then the
    riskiest, up to ``max_nodes``."""
    riskiest = tl.groupby("node")["risk"].max().sort_values(ascending=False, kind="stable")
    ranked = dict.fromkeys([*sorted(set(failures["node"].astype(str))),
                            *sorted(set(episodes["node"])), *map(str, riskiest.index)])
    return sorted(list(ranked)[:max_nodes])


def plot_backtest(result: BacktestResult, trace_dir: Path | None, out: Path | str, *,
                  max_nodes: int = 24) -> list[str]:
    """Draw ``result`` as risk lanes with failures and judged alert episodes (see the module);
    return the nodes drawn, top to bottom.

    failures.csv is read here, after the backtest, only to draw and judge against the ground
    truth; one that cannot be read (or names kinds the format has not) is left out.
    """
    from matplotlib.artist import Artist
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    tl = result.timeline
    trace, labelled = _labels(result, trace_dir)
    try:
        judged = outcomes(trace, result.alerts)
    except TraceFormatError:
        trace, labelled = replace(trace, failures=empty_frame("failures.csv")), False
        judged = outcomes(trace, result.alerts)
    failures, episodes = judged.failures, judged.episodes
    nodes = _lanes(tl, failures, episodes, max_nodes)
    row = {n: i for i, n in enumerate(nodes)}
    t0 = trace.meta.start
    ticks = np.sort(tl["ts"].unique())
    hours = (ticks - t0) / 3600.0 if len(tl) else np.zeros(1)
    grid = (tl[tl["node"].isin(nodes)]
            .pivot_table(index="node", columns="ts", values="risk", aggfunc="max")
            .reindex(index=nodes, columns=ticks)
            if len(tl) else pd.DataFrame(np.nan, index=nodes, columns=[t0]))
    step = float(np.median(np.diff(hours))) if len(hours) > 1 else 1.0
    edges = np.r_[hours - step / 2, hours[-1] + step / 2]

    fig = Figure(figsize=(13, 1.2 + 0.42 * max(len(nodes), 3)), dpi=100)
    ax = fig.subplots()
    mesh = ax.pcolormesh(edges, np.arange(len(nodes) + 1), np.ma.masked_invalid(grid.to_numpy()),
                         cmap="YlOrRd", vmin=0.0, vmax=1.0, shading="flat")
    fig.colorbar(mesh, ax=ax, pad=0.01, fraction=0.03, label="risk (riskiest entity on node)")
    eps = episodes[episodes["node"].isin(nodes)]
    for node, start, end, verdict in zip(eps["node"], eps["start"].to_numpy(float),
                                         eps["end"].to_numpy(float), eps["verdict"], strict=True):
        x0, x1 = (start - t0) / 3600.0, (end - t0) / 3600.0
        ax.broken_barh([(x0, max(x1 - x0, step))], (row[str(node)] + 0.72, 0.22),
                       facecolors=VERDICT_COLOURS[str(verdict) if labelled else None],
                       edgecolor="none", zorder=3)
    shown = failures[failures["node"].astype(str).isin(nodes)]
    for node, ts, pre_s, caught in zip(shown["node"].astype(str), shown["ts"].to_numpy(float),
                                       shown["precursor_s"].to_numpy(float),
                                       shown["caught"].to_numpy(bool), strict=True):
        y, x = row[node] + 0.5, (ts - t0) / 3600.0
        if np.isfinite(pre_s) and pre_s > 0:
            ax.plot([x - pre_s / 3600.0, x], [y, y], color="k", lw=2.5, solid_capstyle="butt",
                    zorder=4)
        ax.plot([x], [y], marker="X", ms=9, color="k" if caught else "#7b3294",
                markeredgecolor="w", zorder=5)
    ax.set_yticks(np.arange(len(nodes)) + 0.5, nodes, fontsize=8)
    ax.set_ylim(len(nodes), 0)
    ax.set_xlim(0, (trace.meta.end - t0) / 3600.0 or edges[-1])
    ax.set_xlabel("hours since the trace's start")
    title = f"Foreshock backtest ({result.model_version})"
    if labelled:
        verdicts = episodes["verdict"].value_counts()
        title += (f": {int(failures['caught'].sum())} of {len(failures)} failures caught, "
                  f"{int(verdicts.get('false', 0))} false alarm episode(s) of {len(episodes)}")
    if len(nodes) < len(set(failures["node"].astype(str)) | set(episodes["node"])):
        title += f" (first {len(nodes)} nodes with failures or alerts)"
    ax.set_title(title, fontsize=10, loc="left")
    handles: list[Artist] = [
        Line2D([], [], marker="X", ls="none", color="k", ms=8, label="failure, caught"),
        Line2D([], [], marker="X", ls="none", color="#7b3294", ms=8, label="failure, missed"),
        Line2D([], [], color="k", lw=2.5, label="its precursor")]
    if labelled:
        handles += [Patch(color=VERDICT_COLOURS[v], label=text) for v, text in (
            ("true", "alert, a failure followed"), ("false", "alert, none followed (false)"),
            ("late", "alert, under 60 s ahead"))]
    else:
        handles = [Patch(color=VERDICT_COLOURS[None], label="alert episode")]
    below = -0.5 / fig.get_figheight()  # under the axis labels, whatever the lanes' count
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.0, below), ncol=len(handles),
              fontsize=8, frameon=False)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    return nodes
