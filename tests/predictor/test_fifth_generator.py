"""The held-out generator (benchmarks/fifth_generator.py): a readable trace with real signatures."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collector.fleet_trace import FleetTrace, read_trace, write_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fifth_generator as gen

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "fifth_generator.py"
APP_XIDS = {13, 31, 43}


@pytest.fixture(scope="module")
def traces() -> list[FleetTrace]:
    """Small, coarse fleets: enough failures of every kind to search through."""
    return [gen.generate(seed, nodes=32, days=2.0, interval_s=60.0) for seed in range(8)]


def _find(traces: list[FleetTrace], ok: Callable[[FleetTrace, pd.Series], bool]
          ) -> tuple[FleetTrace, pd.Series]:
    for trace in traces:
        assert trace.failures is not None
        mechanisms = trace.meta.extra["mechanisms"]
        assert isinstance(mechanisms, list) and len(mechanisms) == len(trace.failures)
        for i, row in trace.failures.iterrows():
            row = pd.concat([row, pd.Series({"mechanism": mechanisms[int(i)]})])
            if ok(trace, row):
                return trace, row
    pytest.fail("no failure of the wanted shape in the generated traces")


def test_round_trip_through_the_reader(tmp_path: Path) -> None:
    trace = gen.generate(3, nodes=6, days=0.5, interval_s=30.0)
    write_trace(tmp_path, trace)
    back = read_trace(tmp_path, with_failures=True)
    assert back.meta.nodes == trace.meta.nodes and back.meta.gpus_per_node == 8
    assert len(back.gpu) == len(trace.gpu) and len(back.links) == len(trace.links)
    assert len(back.node) == len(trace.node) and len(back.events) == len(trace.events)
    assert set(back.gpu.columns) == set(trace.gpu.columns)
    assert back.gpu["ts"].is_monotonic_increasing
    assert back.gpu["ts"].between(back.meta.start, back.meta.end).all()
    assert back.failures is not None and trace.failures is not None
    assert list(back.failures["kind"]) == list(trace.failures["kind"])
    np.testing.assert_allclose(back.failures["ts"], trace.failures["ts"])


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    a = gen.generate(11, nodes=4, days=0.5, interval_s=60.0)
    b = gen.generate(11, nodes=4, days=0.5, interval_s=60.0)
    c = gen.generate(12, nodes=4, days=0.5, interval_s=60.0)
    pd.testing.assert_frame_equal(a.gpu, b.gpu)
    pd.testing.assert_frame_equal(a.links, b.links)
    pd.testing.assert_frame_equal(a.events, b.events)
    assert a.failures is not None and b.failures is not None
    pd.testing.assert_frame_equal(a.failures, b.failures)
    assert not a.gpu["gpu.temperature"].equals(c.gpu["gpu.temperature"])


def test_failures_have_the_right_columns_counts_and_kinds(traces: list[FleetTrace]) -> None:
    all_failures = pd.concat([t.failures for t in traces if t.failures is not None])
    assert list(all_failures.columns) == ["ts", "node", "gpu", "kind", "precursor_s"]
    per_trace = [len(t.failures) for t in traces if t.failures is not None]
    assert all(4 <= n <= 30 for n in per_trace), per_trace
    assert set(all_failures["kind"]) == {"gpu", "link", "node"}  # fleet-trace.md's kinds
    mechanisms = pd.Series([m for t in traces for m in t.meta.extra["mechanisms"]],  # type: ignore[attr-defined]
                           index=all_failures.index)
    assert set(mechanisms) <= set(gen._KINDS)
    assert {"ecc", "cable", "gpu"} <= set(mechanisms)
    assert (all_failures.loc[mechanisms.isin(["cable", "nic"]).to_numpy(), "kind"] == "link").all()
    gpu_level = (all_failures["kind"] == "gpu").to_numpy()
    assert (gpu_level == mechanisms.map(lambda k: gen._KINDS[k].gpu_level).to_numpy()).all()
    assert all_failures.loc[gpu_level, "gpu"].between(0, 7).all()
    assert (all_failures.loc[~gpu_level, "gpu"] == -1).all()
    sudden = (all_failures["precursor_s"] == 0).mean()
    assert 0.15 <= sudden <= 0.5, sudden
    lead = all_failures.loc[all_failures["precursor_s"] > 0, "precursor_s"]
    assert lead.between(60, 10 * 3600).all()
    for t in traces:
        assert t.failures is not None
        assert t.failures["ts"].between(t.meta.start, t.meta.end).all()


def test_sbe_counter_races_ahead_before_an_ecc_failure(traces: list[FleetTrace]) -> None:
    def ok(t: FleetTrace, f: pd.Series) -> bool:
        return f["mechanism"] == "ecc" and f["precursor_s"] >= 3600
    trace, f = _find(traces, ok)
    g = trace.gpu
    window = g[(g["ts"] >= f["ts"] - f["precursor_s"]) & (g["ts"] < f["ts"])]
    growth = window.groupby(["node", "gpu"])["gpu.ecc.sbe"].agg(lambda s: s.iloc[-1] - s.iloc[0])
    failing = growth[(f["node"], f["gpu"])]
    healthy = growth.drop(index=(f["node"], f["gpu"]))
    assert failing > 20 * (healthy.median() + 1), (failing, healthy.median())
    xids = trace.events[(trace.events["node"] == f["node"]) & (trace.events["ts"] <= f["ts"])]
    assert {48} <= set(trace.events.loc[trace.events["node"] == f["node"], "code"])
    assert set(xids["code"]) & {63, 92}


def test_link_bandwidth_drops_before_a_nic_failure(traces: list[FleetTrace]) -> None:
    def ok(t: FleetTrace, f: pd.Series) -> bool:
        return (f["mechanism"] == "nic" and f["precursor_s"] >= 1800
                and f["ts"] - f["precursor_s"] > t.meta.start + 3 * 3600)
    trace, f = _find(traces, ok)
    links = trace.links
    mine = links[(links["src"] == f["node"]) | (links["dst"] == f["node"])]
    before = mine[mine["ts"] < f["ts"] - f["precursor_s"]]["net.link.bandwidth"].median()
    last = mine[mine["ts"].between(f["ts"] - 1800, f["ts"])]["net.link.bandwidth"].median()
    assert last < 0.8 * before, (last, before)


def _failure_near(trace: FleetTrace, node: str, t: float, gpu: int | None = None) -> bool:
    fl = trace.failures
    assert fl is not None
    hit = (fl["node"] == node) & fl["ts"].between(t - 60, t + 6 * 3600)
    if gpu is not None:
        hit &= (fl["gpu"] == gpu) | (fl["gpu"] == -1)
    return bool(hit.any())


def test_confounders_come_without_failures(traces: list[FleetTrace]) -> None:
    trace = traces[0]
    g, fl = trace.gpu, trace.failures
    assert fl is not None
    failed_nodes = set(fl["node"])
    # A GPU whose SBE counter climbs steadily on a node that never fails.
    last = g.groupby(["node", "gpu"])["gpu.ecc.sbe"].max().reset_index()
    benign = last[(last["gpu.ecc.sbe"] >= 30) & ~last["node"].isin(failed_nodes)]
    assert len(benign)
    # Application XIDs, with no failure of that node in the next 6 hours.
    ev = trace.events
    app = ev[ev["code"].isin(APP_XIDS)]
    assert len(app)
    assert not any(_failure_near(trace, str(node), float(ts))
                   for node, ts in zip(app["node"], app["ts"], strict=True))
    # Counters that reset (a reboot or driver reload) and a node that is chronically slow.
    per_gpu = g.sort_values("ts").groupby(["node", "gpu"])["gpu.ecc.sbe"]
    assert (per_gpu.diff() < 0).any() or (g.groupby(["node", "gpu"])["gpu.pcie.replay"].diff()
                                          < 0).any()
    power_throttled = g.groupby("node")["gpu.throttle.power"].mean()
    assert ((power_throttled > 0.5) & ~power_throttled.index.isin(failed_nodes)).any()


def test_congestion_hits_many_links_at_once(traces: list[FleetTrace]) -> None:
    links = traces[0].links
    minute = (links["ts"] // 60).astype(int)
    ratio = links["net.link.bandwidth"] / links.groupby(["src", "dst"])[
        "net.link.bandwidth"].transform("median")
    low_share = (ratio < 0.75).groupby(minute).mean()
    assert (low_share > 0.3).any()


def test_exporter_gaps_and_sku_sensors() -> None:
    trace = gen.generate(5, nodes=12, days=0.5, interval_s=30.0)
    per_node = trace.gpu.groupby("node").size()
    assert per_node.min() < per_node.max()  # gaps and repairs leave rows missing
    hbm = trace.gpu.groupby("node")["gpu.memory.temperature"].apply(lambda s: s.isna().all())
    sku = np.array(gen._Fleet(5, 12, 0.5, 30.0).sku)
    assert (hbm.sort_index().to_numpy() == (sku == "A100-PCIe")).all()


def test_cli_writes_a_trace_directory(tmp_path: Path) -> None:
    out = tmp_path / "trace"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), "--seed", "4", "--nodes", "4", "--days", "0.25",
         "--interval", "60"], capture_output=True, text=True, check=True, cwd=ROOT)
    assert "wrote" in done.stdout
    back = read_trace(out, with_failures=True)
    assert len(back.meta.nodes) == 4 and len(back.gpu) > 0
    helped = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                            text=True, check=True, cwd=ROOT)
    for option in ("--seed", "--nodes", "--days", "--interval"):
        assert option in helped.stdout
