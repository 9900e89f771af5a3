"""The independent trace generator (benchmarks/third_generator.py) writes valid fleet traces."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace, read_trace, write_trace

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import third_generator

COUNTERS = ("gpu.ecc.sbe", "gpu.ecc.dbe", "gpu.rows.remapped.correctable",
            "gpu.rows.remapped.uncorrectable", "gpu.pcie.replay", "gpu.nvlink.crc_errors")


def _small(seed: int) -> FleetTrace:
    # A high failure rate so that eight nodes in half a day see several failures of each sort.
    return third_generator.generate(seed=seed, nodes=8, days=0.5, interval_s=30.0,
                                    failure_rate=2000.0)


def test_trace_round_trips_through_the_fleet_trace_format(tmp_path: Path) -> None:
    trace = _small(3)
    write_trace(tmp_path / "t", trace)
    back = read_trace(tmp_path / "t", with_failures=True)
    assert back.meta.nodes == trace.meta.nodes
    assert len(back.gpu) == len(trace.gpu) and len(back.node) == len(trace.node)
    assert len(back.links) == len(trace.links) and len(back.events) == len(trace.events)
    for frame in (back.gpu, back.node, back.links, back.events, back.failures):
        assert frame is not None
        assert ((frame["ts"] > back.meta.start) & (frame["ts"] < back.meta.end)).all()
    assert back.failures is not None and trace.failures is not None
    assert (back.failures["precursor_s"] > 0).any(), "some failures have a precursor"
    assert (back.failures["precursor_s"] == 0).any(), "some failures are sudden"
    assert set(back.failures["kind"]) <= {"gpu", "link", "node"}  # fleet-trace.md's kinds
    node_level = back.failures["kind"].isin(["node", "link"])
    assert (back.failures.loc[node_level, "gpu"] == -1).all()
    np.testing.assert_allclose(back.gpu["gpu.temperature"], trace.gpu["gpu.temperature"])


def test_counters_only_go_down_after_the_node_was_away(tmp_path: Path) -> None:
    write_trace(tmp_path / "t", _small(5))
    back = read_trace(tmp_path / "t")
    gpu = back.gpu.sort_values(["node", "gpu", "ts"], kind="stable")
    same = (gpu["node"] == gpu["node"].shift()) & (gpu["gpu"] == gpu["gpu"].shift())
    away = gpu["ts"].diff() > 2 * back.meta.interval_s
    resets = 0
    for col in COUNTERS:
        if col not in gpu.columns:
            continue
        down = same & (gpu[col].diff() < 0)
        assert not (down & ~away).any(), f"{col} decreased without a restart"
        resets += int(down.sum())
    assert resets > 0, "repairs and reboots reset the counters"


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    a, b, c = _small(11), _small(11), _small(12)
    for name in ("gpu", "node", "links", "events", "failures"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    assert not a.gpu["gpu.power"].equals(c.gpu["gpu.power"])
