"""``foreshock from-prometheus`` against a real Prometheus holding dcgm-exporter history.

The history is backfilled with ``promtool tsdb create-blocks-from openmetrics`` (the Debian
prometheus package has it, as CI installs): what a Prometheus that scraped dcgm-exporter every
30 s for two hours would hold, with dcgm-exporter's labels and units.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from collector import cli, from_prometheus
from collector.fleet_trace import read_trace
from predictor import cli as predictor_cli
from tests.api.daemon import binary_or_skip, daemon
from tests.conftest import free_port

STEP = 30.0
N = 240  # two hours of 30-s scrapes
T0 = float(int(time.time() // 3600 * 3600) - 6 * 3600)  # within Prometheus's retention
XID_AT = 100  # node-b GPU 1 raises XID 79 at this scrape, then XID 48 at XID2_AT
XID2_AT = 180
HOT_AT = 150  # node-a GPU 1 throttles (HW thermal slowdown, 0x40) from here
POD_AT = 120  # node-a GPU 0 moves to another pod (a new series) here
GAP = range(60, 70)  # node-b GPU 0 is not scraped for these five minutes


def _series() -> dict[str, dict[tuple[str, int], np.ndarray]]:
    i = np.arange(N, dtype=float)
    out: dict[str, dict[tuple[str, int], np.ndarray]] = {}
    for node in ("node-a", "node-b", "node-z"):
        for gpu in (0, 1):
            k = (node, gpu)
            base = 50 + 5 * gpu + (node == "node-b")
            out.setdefault("DCGM_FI_DEV_GPU_TEMP", {})[k] = base + (i % 7)
            out.setdefault("DCGM_FI_DEV_GPU_UTIL", {})[k] = np.full(N, 87.0 + gpu)
            out.setdefault("DCGM_FI_DEV_FB_USED", {})[k] = np.full(N, 40_000.0 + gpu)
            out.setdefault("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", {})[k] = np.floor(i / 10) * (gpu + 1)
            reasons = np.zeros(N)
            if k == ("node-a", 1):
                reasons[HOT_AT:] = 0x40
            if k == ("node-b", 0):
                reasons[:] = 0x04  # power capped throughout
            out.setdefault("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", {})[k] = reasons
            xid = np.zeros(N)
            if k == ("node-a", 0):
                xid[:] = 13  # an XID raised before the window: no event in it
            if k == ("node-b", 1):
                xid[XID_AT:] = 79
                xid[XID2_AT:] = 48
            out.setdefault("DCGM_FI_DEV_XID_ERRORS", {})[k] = xid
    return out


def _openmetrics(path: Path) -> None:
    lines = []
    for field, by_gpu in _series().items():
        lines.append(f"# TYPE {field} gauge")
        for (node, gpu), values in by_gpu.items():
            job = "other" if node == "node-z" else "dcgm"
            labels = (f'gpu="{gpu}",UUID="GPU-{node}-{gpu}",Hostname="{node}",'
                      f'instance="{node}:9400",job="{job}"')
            # On Kubernetes a GPU's series carry the pod using it: node-a GPU 0 changes pods at
            # POD_AT, both series holding that one scrape; node-b GPU 0 misses the scrapes of GAP.
            scrapes = {("node-a", 0): [(f'{labels},pod="p1"', range(POD_AT + 1)),
                                       (f'{labels},pod="p2"', range(POD_AT, N))],
                       ("node-b", 0): [(labels, [j for j in range(N) if j not in GAP])]}
            lines += [f"{field}{{{series}}} {values[j]:g} {T0 + j * STEP:.0f}"
                      for series, steps in scrapes.get((node, gpu), [(labels, range(N))])
                      for j in steps]
    # A series of a GPU field without a GPU index (a misconfigured exporter): left out, said.
    lines += ["# TYPE DCGM_FI_DEV_POWER_USAGE gauge",
              *(f'DCGM_FI_DEV_POWER_USAGE{{Hostname="node-a",job="dcgm"}} 300 {T0 + j * STEP:.0f}'
                for j in range(N)), "# EOF"]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = binary_or_skip("prometheus")
    promtool = shutil.which("promtool") or binary_or_skip("promtool")
    tmp = tmp_path_factory.mktemp("prometheus")
    _openmetrics(tmp / "dcgm.om")
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp / "dcgm.om"),
                    str(tmp / "tsdb")], check=True, capture_output=True)
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 1m}\n")
    port = free_port()
    with daemon([binary, f"--config.file={tmp / 'prometheus.yml'}",
                 f"--storage.tsdb.path={tmp / 'tsdb'}", "--storage.tsdb.retention.time=30d",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                ready_url=f"http://127.0.0.1:{port}/-/ready", log_path=tmp / "prom.log"):
        yield f"http://127.0.0.1:{port}"


def _run(*args: str) -> tuple[int, str]:
    app = typer.Typer()
    cli.register(app)
    done = CliRunner().invoke(app, ["from-prometheus", *args])
    return done.exit_code, " ".join(done.output.split())


def _window() -> list[str]:
    return ["--from", f"{T0:.0f}", "--to", f"{T0 + (N - 1) * STEP:.0f}"]


def test_dcgm_exporter_history_becomes_a_fleet_trace_in_canonical_units(
        prometheus: str, tmp_path: Path) -> None:
    code, output = _run(str(tmp_path), "--url", prometheus, *_window(), "--selector",
                        'job="dcgm"')
    assert code == 0, output
    assert f"wrote {tmp_path}: {4 * N - len(GAP):,} GPU samples of 2 nodes, 2 XID events" \
        in output
    assert "note: 1 series without a 'Hostname' (or 'instance') and a 'gpu' label were left out" \
        in output
    # The fields it found no series of are named, with what a default dcgm-exporter leaves out.
    unread = output.split("note: no series of ")[1]
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" in unread and "gpu.ecc.dbe" in unread
    assert "DCGM_FI_DEV_POWER_USAGE" in unread  # its one series had no GPU label
    assert "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" not in unread and "gpu.temperature" not in unread
    assert "list the fields in the counters CSV dcgm-exporter reads" in unread
    trace = read_trace(tmp_path)
    assert trace.meta.nodes == ("node-a", "node-b") and trace.meta.gpus_per_node == 2
    assert (trace.meta.start, trace.meta.end, trace.meta.interval_s) == (
        T0, T0 + (N - 1) * STEP, STEP)
    gpu = trace.gpu.set_index(["node", "gpu", "ts"]).sort_index()
    a1 = gpu.loc[("node-a", 1)]
    np.testing.assert_allclose(a1["gpu.temperature"],
                               _series()["DCGM_FI_DEV_GPU_TEMP"][("node-a", 1)])
    assert (a1["gpu.utilization"] == 0.88).all()  # percent read as a ratio
    assert (a1["gpu.memory.used"] == 40_001 * 1048576).all()  # MiB read as bytes
    np.testing.assert_allclose(a1["gpu.ecc.sbe"], np.floor(np.arange(N) / 10) * 2)
    # The clock-event bit mask read as the two flags: 0x40 is thermal, 0x04 is power.
    assert a1["gpu.throttle.thermal"].tolist() == [0.0] * HOT_AT + [1.0] * (N - HOT_AT)
    assert (a1["gpu.throttle.power"] == 0).all()
    # A GPU whose series changed pods reads as one GPU, each sample once.
    np.testing.assert_allclose(gpu.loc[("node-a", 0)]["gpu.temperature"],
                               _series()["DCGM_FI_DEV_GPU_TEMP"][("node-a", 0)])
    b0 = gpu.loc[("node-b", 0)]
    assert (b0["gpu.throttle.power"] == 1).all() and (b0["gpu.throttle.thermal"] == 0).all()
    # Five minutes without a scrape stay a gap: no row repeats the last sample into it, as a
    # range query would have (Prometheus's lookback is 5 minutes).
    assert list(np.diff(b0.index)[np.diff(b0.index) != STEP]) == [(len(GAP) + 1) * STEP]
    assert not b0.index.isin([T0 + j * STEP for j in GAP]).any()
    # XIDs where the last-XID gauge changes to a code; node-a GPU 0's 13, standing from before
    # the window, is none.
    events = trace.events[["ts", "node", "gpu", "kind", "code"]].values.tolist()
    assert events == [[T0 + XID_AT * STEP, "node-b", 1, "xid", 79],
                      [T0 + XID2_AT * STEP, "node-b", 1, "xid", 48]]


def test_a_window_read_in_many_queries_gives_the_same_trace(
        prometheus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A week at 30 s is 20,160 scrapes a series: the window is read in chunks of 10,000. Here
    # chunks of 50 (5 queries a field) must meet exactly: a sample at their edge read once.
    code, output = _run(str(tmp_path / "one"), "--url", prometheus, *_window())
    assert code == 0, output
    monkeypatch.setattr(from_prometheus, "MAX_POINTS", 50)
    code, output = _run(str(tmp_path / "many"), "--url", prometheus, *_window())
    assert code == 0, output
    source = from_prometheus.Source(url=prometheus, start=T0, end=T0 + (N - 1) * STEP)
    assert from_prometheus.query_count(source) == 5 * len(from_prometheus.fields())
    one, many = read_trace(tmp_path / "one"), read_trace(tmp_path / "many")
    assert len(many.gpu) == 6 * N - len(GAP)
    pd.testing.assert_frame_equal(one.gpu, many.gpu)
    pd.testing.assert_frame_equal(one.events, many.events)


def test_the_trace_backtests_as_any_other(prometheus: str, tmp_path: Path) -> None:
    code, output = _run(str(tmp_path / "trace"), "--url", prometheus, *_window())
    assert code == 0, output
    assert "of 3 nodes" in output  # no selector: the other job's node-z too
    app = typer.Typer()
    predictor_cli.register(app)
    done = CliRunner().invoke(app, ["backtest", str(tmp_path / "trace"), "--alerts-out",
                                    str(tmp_path / "alerts.csv")])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "alerts.csv").read_text().startswith("ts,node,gpu,kind,score,reason")


def test_the_history_is_scored_against_its_own_fatal_xids(prometheus: str,
                                                         tmp_path: Path) -> None:
    # No failure log: node-b GPU 1's XID 79, then 48 forty minutes later, is one failure.
    code, output = _run(str(tmp_path / "trace"), "--url", prometheus, *_window(), "--selector",
                        'job="dcgm"')
    assert code == 0, output
    failed = T0 + XID_AT * STEP
    (tmp_path / "alerts.csv").write_text(
        "ts,node,gpu,kind,score,reason\n"
        f"{failed - 1800},node-b,1,gpu,0.9,gpu.ecc.sbe rate\n"
        f"{T0 + 600},node-a,0,gpu,0.8,gpu.temperature\n")
    app = typer.Typer()
    predictor_cli.register(app)
    done = CliRunner().invoke(app, ["evaluate", str(tmp_path / "trace"), "--alerts",
                                    str(tmp_path / "alerts.csv"), "--failures-from-xids",
                                    "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert (report["failures"], report["caught"], report["median_lead_s"]) == (1, 1, 1800.0)
    assert (report["true_episodes"], report["false_episodes"]) == (1, 1)
    done = CliRunner().invoke(app, ["evaluate", str(tmp_path / "trace"), "--alerts",
                                    str(tmp_path / "alerts.csv")])
    assert done.exit_code == 2 and "failures.csv" in done.output


def test_a_prometheus_without_that_history_or_out_of_reach_is_named(
        prometheus: str, tmp_path: Path) -> None:
    code, output = _run(str(tmp_path / "none"), "--url", prometheus, "--from",
                        f"{T0 - 86400:.0f}", "--to", f"{T0 - 43200:.0f}")
    assert code == 2
    assert "holds no dcgm-exporter series with node and GPU labels between" in output
    assert "is dcgm-exporter scraped, and is the window right?" in output
    code, output = _run(str(tmp_path / "sel"), "--url", prometheus, *_window(), "--selector",
                        'job="dcgm"}')
    assert code == 2 and "answered 400" in output and "check --selector" in output
    closed = f"http://127.0.0.1:{free_port()}"
    code, output = _run(str(tmp_path / "down"), "--url", closed, *_window())
    assert code == 2 and f"cannot reach Prometheus at {closed}" in output
    code, output = _run(str(tmp_path / "back"), "--url", prometheus, "--from", "100", "--to", "50")
    assert code == 2 and "--to 50 is not after --from 100" in output
    code, output = _run(str(tmp_path / "scrape"), "--url", prometheus, *_window(),
                        "--scrape-interval", "0")
    assert code == 2 and "--scrape-interval" in output and "must be above 0 seconds" in output
