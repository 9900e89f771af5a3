"""Risk timelines of a backtest as a PNG (matplotlib, Agg: no display needed)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from collector.fleet_trace import TraceFormatError, read_trace
from predictor.backtest import BacktestResult


def _failures(trace_dir: Path | None) -> pd.DataFrame | None:
    if trace_dir is None or not (Path(trace_dir) / "failures.csv").is_file():
        return None
    try:
        return read_trace(trace_dir, with_failures=True).failures
    except TraceFormatError:
        return None


def plot_backtest(result: BacktestResult, trace_dir: Path | None, out: Path | str, *,
                  max_nodes: int = 12) -> None:
    """Plot the riskiest nodes' risk over time, alerts as dots, failures as red lines.

    failures.csv is read here, after the backtest, only to draw the ground truth.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = result.timeline
    failures = _failures(trace_dir)
    ranked = list(tl.groupby("node")["risk"].max().sort_values(ascending=False).index)
    failed = [] if failures is None else [n for n in failures["node"].unique() if n in set(ranked)]
    nodes = list(dict.fromkeys([*failed, *ranked]))[:max_nodes]
    t0 = float(tl["ts"].min()) if len(tl) else 0.0
    fig, ax = plt.subplots(figsize=(12, 5), dpi=100)
    for node in nodes:
        s = tl[tl["node"] == node]
        ax.plot((s["ts"] - t0) / 3600, s["risk"], lw=1, label=node)
    al = result.alerts[result.alerts["node"].isin(nodes)]
    ax.scatter((al["ts"] - t0) / 3600, al["score"], s=6, c="k", zorder=3, label="alert rows")
    if failures is not None:
        for i, (_, f) in enumerate(failures[failures["node"].isin(nodes)].iterrows()):
            ax.axvline((f["ts"] - t0) / 3600, color="red", lw=0.8, ls="--",
                       label="failure" if i == 0 else None)
    ax.set_xlabel("hours since start")
    ax.set_ylabel("risk (highest entity on node)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"Foreshock backtest ({result.model_version})")
    ax.legend(loc="upper left", fontsize=7, ncol=2)
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
