"""The held-out fourth generator (benchmarks/fourth_generator.py): a fleet-trace/1 a reader
accepts, deterministic per seed, with ground truth whose precursors show where they should."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collector.fleet_trace import FleetTrace, read_trace, write_trace
from collector.metrics import GPU_METRICS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fourth_generator as fg

SMALL = {"nodes": 8, "days": 0.5, "interval_s": 60.0}
LARGER = {"nodes": 32, "days": 1.0, "interval_s": 60.0}
APP_XIDS = {13, 31, 43, 45}


@pytest.fixture(scope="module")
def small() -> FleetTrace:
    return fg.generate(3, **SMALL)


@pytest.fixture(scope="module")
def fleets() -> list[FleetTrace]:
    return [fg.generate(seed, **LARGER) for seed in (11, 12, 13)]


def _truth(trace: FleetTrace) -> pd.DataFrame:
    assert trace.failures is not None
    return trace.failures


def _xid_at(trace: FleetTrace, row: pd.Series, codes: set[int]) -> bool:
    """Whether the driver logged one of ``codes`` on the failing GPU at the failure."""
    ev = trace.events
    hit = (ev["node"] == row["node"]) & (ev["gpu"] == row["gpu"]) & ev["code"].isin(codes)
    return bool((hit & ((ev["ts"] - row["ts"]).abs() < 1.0)).any())


def test_round_trips_through_the_trace_format(small: FleetTrace, tmp_path: Path) -> None:
    write_trace(tmp_path, small)
    back = read_trace(tmp_path, with_failures=True)
    assert back.meta.nodes == small.meta.nodes
    assert back.meta.gpus_per_node == small.meta.gpus_per_node
    for name in ("gpu", "node", "links", "events"):
        mine, theirs = getattr(small, name), getattr(back, name)
        assert list(theirs.columns) == list(mine.columns), name
        assert len(theirs) == len(mine) > 0, name
    assert back.gpu["gpu"].dtype == np.int64
    np.testing.assert_allclose(back.gpu["ts"], small.gpu["ts"], rtol=0, atol=1e-6)
    truth, read = _truth(small), _truth(back)
    assert list(read["node"]) == list(truth["node"])
    assert list(read["gpu"]) == list(truth["gpu"])
    np.testing.assert_allclose(read["precursor_s"], truth["precursor_s"])


def test_same_seed_same_trace_and_other_seeds_differ(small: FleetTrace) -> None:
    again = fg.generate(3, **SMALL)
    for name in ("gpu", "node", "links", "events", "failures"):
        pd.testing.assert_frame_equal(getattr(again, name), getattr(small, name))
    other = fg.generate(4, **SMALL)
    assert len(other.gpu) != len(small.gpu) or not other.gpu.equals(small.gpu)
    assert not other.links.equals(small.links)


def test_failures_are_well_formed_and_mostly_have_a_precursor(
        small: FleetTrace, fleets: list[FleetTrace]) -> None:
    shares = []
    for trace in [small, *fleets]:
        truth = _truth(trace)
        assert len(truth) >= 1
        assert set(truth["node"]) <= set(trace.meta.nodes)
        assert truth["ts"].between(trace.meta.start, trace.meta.end).all()
        assert set(truth["kind"]) <= {"gpu", "link", "node"}
        is_gpu = truth["kind"] == "gpu"
        assert truth.loc[is_gpu, "gpu"].between(0, trace.meta.gpus_per_node - 1).all()
        assert (truth.loc[~is_gpu, "gpu"] == -1).all()
        assert (truth["precursor_s"] >= 0).all()
        assert trace.gpu["ts"].between(trace.meta.start, trace.meta.end).all()
        assert trace.gpu["ts"].is_monotonic_increasing
        shares.append(truth["precursor_s"] > 0)
    with_precursor = pd.concat(shares)
    assert 0.6 <= with_precursor.mean() <= 0.8
    # Precursors run from minutes to hours.
    lengths = pd.concat([_truth(t)["precursor_s"] for t in fleets])
    assert lengths[lengths > 0].min() >= 600
    assert lengths.max() >= 2 * 3600


def test_a_failed_node_goes_dark_while_it_is_repaired(fleets: list[FleetTrace]) -> None:
    for trace in fleets:
        for _, f in _truth(trace).iterrows():
            node = trace.gpu[trace.gpu["node"] == f["node"]]
            after = node["ts"].between(f["ts"] + 301, f["ts"] + 899)
            assert not after.any(), f"rows from {f['node']} while it is down for repair"
            if f["kind"] == "gpu" and _xid_at(trace, f, {79}):  # fell off the bus
                lost = (node["gpu"] == f["gpu"]) & node["ts"].between(f["ts"], f["ts"] + 899)
                assert not lost.any()


def _growth(trace: FleetTrace, node: str, column: str, t0: float, t1: float) -> pd.Series:
    """How much a cumulative counter rose on each GPU of ``node`` within [t0, t1)."""
    gpu = trace.gpu
    rows = gpu[(gpu["node"] == node) & (gpu["ts"] >= t0) & (gpu["ts"] < t1)]
    return rows.groupby("gpu")[column].agg(lambda s: s.diff().clip(lower=0).sum())


def test_ecc_failures_show_corrected_errors_growing_on_the_failing_gpu(
        fleets: list[FleetTrace]) -> None:
    judged, shown = 0, 0
    for trace in fleets:
        for _, f in _truth(trace).iterrows():
            onset, third = f["ts"] - f["precursor_s"], f["precursor_s"] / 3
            if f["precursor_s"] < 1200 or not _xid_at(trace, f, {48, 94, 95}):
                continue
            during = _growth(trace, f["node"], "gpu.ecc.sbe", onset, f["ts"])
            late = _growth(trace, f["node"], "gpu.ecc.sbe", f["ts"] - third, f["ts"])
            early = _growth(trace, f["node"], "gpu.ecc.sbe", onset - third, onset)
            judged += 1
            # Above every peer over the precursor, and above its own rate before the onset.
            shown += bool(during[f["gpu"]] > during.drop(f["gpu"]).max()
                          and late[f["gpu"]] > early.get(f["gpu"], 0))
    assert judged >= 2
    assert shown >= 0.75 * judged


def test_bus_loss_failures_show_replays_or_heat_on_the_failing_gpu(
        fleets: list[FleetTrace]) -> None:
    judged, shown = 0, 0
    for trace in fleets:
        for _, f in _truth(trace).iterrows():
            onset = f["ts"] - f["precursor_s"]
            if f["precursor_s"] < 1200 or not _xid_at(trace, f, {79}):
                continue
            replays = _growth(trace, f["node"], "gpu.pcie.replay", onset, f["ts"])
            node = trace.gpu[trace.gpu["node"] == f["node"]]
            late = node[node["ts"].between(f["ts"] - 1200, f["ts"])]
            # Heat against the GPU's own peers in the same minutes: load phases cancel out.
            excess = late.groupby("gpu")["gpu.temperature"].median()
            excess = excess - excess.drop(f["gpu"]).median()
            judged += 1
            shown += bool(replays[f["gpu"]] > max(10, replays.drop(f["gpu"]).max())
                          or excess[f["gpu"]] >= 8)
    assert judged >= 1
    assert shown >= 0.75 * judged


def test_link_failures_show_only_in_the_probes(fleets: list[FleetTrace]) -> None:
    judged, shown = 0, 0
    for trace in fleets:
        links = trace.links
        for _, f in _truth(trace).iterrows():
            onset = f["ts"] - f["precursor_s"]
            if f["kind"] != "link" or f["precursor_s"] < 1800 or onset < trace.meta.start + 7200:
                continue
            mine = links[(links["src"] == f["node"]) | (links["dst"] == f["node"])]
            before = mine[mine["ts"].between(onset - 7200, onset)]["net.link.bandwidth"]
            late = mine[mine["ts"].between(f["ts"] - 1200, f["ts"])]["net.link.bandwidth"]
            judged += 1
            assert late.median() < before.median()  # even a weak precursor costs bandwidth
            shown += late.median() < 0.85 * before.median()
            # No GPU-side trace of a NIC or cable going bad.
            gpu = trace.gpu[(trace.gpu["node"] == f["node"]) & trace.gpu["ts"].between(onset,
                                                                                       f["ts"])]
            assert not (gpu["gpu.ecc.dbe"].diff() > 0).any()
    assert judged >= 2
    assert shown > 0.5 * judged


def test_application_xids_appear_but_never_at_a_failure(fleets: list[FleetTrace]) -> None:
    for trace in fleets:
        ev = trace.events
        assert (ev["kind"] == "xid").all()
        app = ev[ev["code"].isin(APP_XIDS)]
        assert len(app) > 0
        for _, f in _truth(trace).iterrows():
            near = app[(app["node"] == f["node"]) & ((app["ts"] - f["ts"]).abs() < 120)]
            assert near.empty, f"application XID next to the failure of {f['node']}"
    codes = set(pd.concat([t.events["code"] for t in fleets]))
    assert {13, 31, 45} <= codes


def test_counters_restart_only_after_the_node_was_away(fleets: list[FleetTrace]) -> None:
    resets = 0
    for trace in fleets:
        gpu = trace.gpu.sort_values(["node", "gpu", "ts"], kind="stable")
        same = (gpu["node"] == gpu["node"].shift()) & (gpu["gpu"] == gpu["gpu"].shift())
        away = gpu["ts"].diff() >= 600
        for col in ("gpu.ecc.sbe", "gpu.pcie.replay", "gpu.nvlink.crc_errors"):
            drop = same & (gpu[col].diff() < 0)
            assert not (drop & ~away).any(), f"{col} went down without a reboot"
            resets += int(drop.sum())
    assert resets > 0


def test_a_counter_restarts_from_zero_when_a_node_reboots_with_a_new_gpu() -> None:
    # A repair that swaps a GPU also reboots its node: both reset the swapped GPU's volatile
    # counters at the same sample, which must then read from zero, not below it. Seed 16 has
    # such a repair within its half day.
    trace = fg.generate(16, **SMALL)
    assert _truth(trace)["gpu"].notna().any()
    counters = [m.name for m in GPU_METRICS if m.kind == "cumulative"]
    below = trace.gpu[counters] < 0
    assert not below.any().any(), f"read below zero: {below.sum()[below.any()].to_dict()}"


def test_the_command_line_writes_a_trace(tmp_path: Path) -> None:
    fg.main([str(tmp_path / "t"), "--seed", "5", "--nodes", "6", "--days", "0.25",
             "--interval", "120"])
    back = read_trace(tmp_path / "t", with_failures=True)
    assert len(back.gpu) > 0 and back.meta.interval_s == 120.0


def test_rejects_a_fleet_it_cannot_build() -> None:
    with pytest.raises(ValueError, match="nodes="):
        fg.generate(1, nodes=1)
    with pytest.raises(ValueError, match="interval_s="):
        fg.generate(1, interval_s=0.0)
