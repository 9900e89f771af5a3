"""``foreshock backtest --plot``: every failure and every alert gets a lane, misses and false
alarms included, whatever the riskiest nodes are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace, TraceMeta, empty_frame, write_trace
from predictor.backtest import ALERT_COLUMNS, BacktestResult
from predictor.plots import plot_backtest

T0 = 1_767_225_600.0
H = 3600.0
NODES = [f"n{i:02d}" for i in range(30)]


def _result() -> BacktestResult:
    ticks = T0 + np.arange(0, 12 * H, 300.0)
    rng = np.random.default_rng(3)
    timeline = pd.DataFrame([(t, n, "gpu", 0, "", 0.02 + 0.03 * rng.random())
                             for t in ticks for n in NODES],
                            columns=["ts", "node", "kind", "gpu", "peer", "risk"])
    # Six healthy nodes read risky at times but never alert: they must not crowd out the lanes
    # a user looks for (n05's true alert, n07's false one, n12's missed failure).
    timeline.loc[timeline["node"].isin(NODES[20:26]), "risk"] = 0.45
    alerts = pd.DataFrame([(T0 + 5 * H, "n05", 1, "gpu", 0.9, "x", 3600.0),
                           (T0 + 5 * H + 300, "n05", 1, "gpu", 0.95, "x", 3000.0),
                           (T0 + 2 * H, "n07", -1, "link", 0.8, "x", np.nan)],
                          columns=list(ALERT_COLUMNS))
    return BacktestResult(alerts=alerts, timeline=timeline, model_version="test", ticks=len(ticks))


def _trace_dir(tmp_path: Path, failures: str) -> Path:
    root = tmp_path / "trace"
    write_trace(root, FleetTrace(
        meta=TraceMeta(start=T0, end=T0 + 12 * H, interval_s=30.0, nodes=tuple(NODES),
                       gpus_per_node=8),
        gpu=pd.DataFrame({"ts": [T0], "node": ["n00"], "gpu": [0], "gpu.temperature": [50.0]}),
        node=empty_frame("node.csv.gz"), links=empty_frame("links.csv.gz"),
        events=empty_frame("events.csv")))
    (root / "failures.csv").write_text(failures)
    return root


def test_misses_and_false_alarms_get_lanes_before_risky_healthy_nodes(tmp_path: Path) -> None:
    root = _trace_dir(tmp_path, "ts,node,gpu,kind,precursor_s\n"
                                f"{T0 + 6 * H},n05,1,gpu,7200\n{T0 + 9 * H},n12,,node,3600\n")
    png = tmp_path / "risk.png"
    drawn = plot_backtest(_result(), root, png, max_nodes=4)
    # The failing nodes (caught and missed) and the false alarm first, then the riskiest.
    assert {"n05", "n07", "n12"} <= set(drawn) and len(drawn) == 4
    assert set(drawn) - {"n05", "n07", "n12"} <= set(NODES[20:26])
    assert drawn == sorted(drawn)
    assert png.read_bytes()[:4] == b"\x89PNG"
    everything = plot_backtest(_result(), root, tmp_path / "all.png")
    assert len(everything) == 24  # the default cap, of 30 nodes


def test_a_plot_without_usable_labels_still_draws_the_alerts(tmp_path: Path) -> None:
    for name, failures in (("garbage", "garbage\n\x00"),
                           ("bad kind", f"ts,node,gpu,kind\n{T0},n03,,rack\n")):
        root = _trace_dir(tmp_path / name.replace(" ", "_"), failures)
        drawn = plot_backtest(_result(), root, tmp_path / f"{name}.png", max_nodes=3)
        assert {"n05", "n07"} <= set(drawn), name
    assert {"n05", "n07"} <= set(plot_backtest(_result(), None, tmp_path / "none.png",
                                               max_nodes=2))


def test_plots_leave_the_callers_matplotlib_as_it_was(tmp_path: Path) -> None:
    """A notebook that draws a backtest or a goodput comparison keeps its own backend and its
    open figures; the PNGs are drawn on figures of their own."""
    import matplotlib
    import matplotlib.pyplot as plt

    from predictor.goodput import Goodput, plot

    root = _trace_dir(tmp_path, f"ts,node,gpu,kind,precursor_s\n{T0 + 6 * H},n05,1,gpu,7200\n")
    before = matplotlib.get_backend()
    matplotlib.use("svg")
    try:
        mine = plt.figure()
        plot_backtest(_result(), root, tmp_path / "risk.png")
        plot([Goodput(label="none", total_gpu_h=1000.0, lost_gpu_h={"rollback": 10.0})],
             tmp_path / "goodput.png", title="t")
        assert matplotlib.get_backend() == "svg"
        assert plt.get_fignums() == [mine.number]
        assert (tmp_path / "goodput.png").read_bytes()[:4] == b"\x89PNG"
    finally:
        plt.close("all")
        matplotlib.use(before)
