"""Features: reset-aware rates, windows in seconds, peer deviations, missing data."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from collector.fleet_trace import FleetTrace
from predictor.feature_frames import GPU_FEATURES, LINK_FEATURES, NODE_FEATURES
from predictor.features import FeatureEngine
from predictor.replay import replay
from predictor.scorer import explain_away
from predictor.signals_absent import without
from predictor.sustained import SUSTAINED
from tests.predictor.conftest import T0, Spec, make_trace, probe_trace


def _features_at(trace: FleetTrace, hours: float, *, every_s: float = 300.0):
    engine = FeatureEngine(interval_s=trace.meta.interval_s)
    for feats in replay(trace, every_s=every_s, engine=engine):
        if feats.t >= T0 + hours * 3600:
            return feats
    raise AssertionError("trace too short")


def _at(spec: Spec, hours: float, *, every_s: float = 300.0):
    return _features_at(make_trace(spec), hours, every_s=every_s)


def _gpu(feats, node: str, gpu: int) -> pd.Series:
    g = feats.gpu
    return g[(g["node"] == node) & (g["gpu"] == gpu)].iloc[0]


def test_every_entity_gets_every_feature_column() -> None:
    feats = _at(Spec(), 2.0)
    assert list(feats.gpu.columns) == ["node", "gpu", *GPU_FEATURES]
    assert list(feats.node.columns) == ["node", *NODE_FEATURES]
    assert list(feats.link.columns) == ["src", "dst", "node", "peer", *LINK_FEATURES]
    assert len(feats.gpu) == 16 and len(feats.node) == 4 and len(feats.link) == 4


def test_counter_reset_is_not_a_negative_rate() -> None:
    feats = _at(Spec(benign_sbe=("n001", 0), reset_at_h=3.0), 3.05, every_s=60)
    row = _gpu(feats, "n001", 0)
    assert all(row[f"sbe_rate_{w}"] >= 0 for w in ("5m", "1h", "6h"))
    # The reset cleared what the replaced part had accumulated: only ~3 minutes of history.
    later = _gpu(_at(Spec(benign_sbe=("n001", 0), reset_at_h=3.0), 5.0), "n001", 0)
    assert np.expm1(later["sbe_rate_1h"]) == pytest.approx(60, rel=0.5)


def test_rates_are_per_second_not_per_row() -> None:
    fine = _gpu(_at(Spec(benign_sbe=("n000", 1), interval_s=10), 4.0), "n000", 1)
    coarse = _gpu(_at(Spec(benign_sbe=("n000", 1), interval_s=60), 4.0), "n000", 1)
    assert np.expm1(fine["sbe_rate_1h"]) == pytest.approx(60, rel=0.35)
    assert np.expm1(coarse["sbe_rate_1h"]) == pytest.approx(60, rel=0.35)


def test_ecc_ramp_shows_as_rising_rate_and_memory_xids() -> None:
    feats = _at(Spec(ecc_ramp=("n002", 3, 3.0, 6.0)), 5.0)
    bad, good = _gpu(feats, "n002", 3), _gpu(feats, "n002", 0)
    assert bad["sbe_rate_5m"] > bad["sbe_rate_6h"] > good["sbe_rate_6h"]
    assert bad["xid_mem_1h"] >= 2 and good["xid_mem_1h"] == 0


def test_xid_counts_of_a_fleet_without_an_event_log_are_unknown_not_zero() -> None:
    # A DCGM history with no XID log says nothing about XIDs: counted as 0, a failing GPU would
    # read as one that raised none, so its counts are missing and the counters speak alone.
    trace = make_trace(Spec(ecc_ramp=("n002", 3, 3.0, 6.0)))
    bare = _features_at(without(trace, ["events"]), 5.0)
    xids = [c for c in GPU_FEATURES if c.startswith("xid_")]
    assert bare.gpu[xids].isna().all().all()
    assert bare.node[["xid_node_1h", "xid_node_6h"]].isna().all().all()
    plain = _features_at(trace, 5.0)
    assert _gpu(plain, "n002", 3)["xid_mem_1h"] >= 2
    assert _gpu(bare, "n002", 3)["sbe_rate_5m"] == _gpu(plain, "n002", 3)["sbe_rate_5m"]
    # A log that is kept and empty still counts: none in it means none happened.
    quiet = _features_at(dataclasses.replace(trace, events=trace.events.iloc[:0]), 5.0)
    assert (quiet.gpu[xids] == 0).all().all()


def test_node_xids_are_counted_on_a_fleet_that_exports_no_training_rows() -> None:
    # No node.csv (no training hook) but an event log: a node's node-level XIDs are known, and a
    # node that raised none has had none, as on a fleet with the hook.
    t = T0 + 1800
    trace = make_trace(Spec(extra_events=[(t, "n000", -1, 61)]))
    for exported in (trace, without(trace, ["node"])):
        node = _features_at(exported, 0.6).node.set_index("node")
        assert node.loc["n000", "xid_node_1h"] > 0.5
        assert (node.drop(index="n000")[["xid_node_1h", "xid_node_6h"]] == 0).all().all()
    # Without the log as well they are unknown, on every node.
    bare = _features_at(without(trace, ["node", "events"]), 0.6).node
    assert len(bare) == 4 and bare[["xid_node_1h", "xid_node_6h"]].isna().all().all()


def test_a_growing_error_rate_rises_and_a_steady_benign_one_does_not() -> None:
    feats = _at(Spec(benign_sbe=("n001", 0), ecc_ramp=("n002", 3, 3.0, 6.0)), 5.0)
    benign, ramp = _gpu(feats, "n001", 0), _gpu(feats, "n002", 3)
    # The benign GPU's rate is high in absolute terms but no higher than over its last 6 hours.
    assert np.expm1(benign["sbe_rate_5m"]) > 10
    assert abs(benign["err_rise_1h"]) < 0.5 and abs(benign["err_rise_5m"]) < 1.0
    assert ramp["err_rise_1h"] > 0.5 and ramp["err_rise_5m"] > ramp["err_rise_1h"]


def test_growth_that_lasts_the_hour_is_held_and_a_steady_rate_is_not() -> None:
    # Two hours into a ramp the counter has stayed above its own 6-h rate for the whole hour;
    # a GPU at a steady benign rate has not, however high that rate.
    feats = _at(Spec(benign_sbe=("n001", 0), benign_sbe_per_h=300.0,
                     ecc_ramp=("n002", 3, 3.0, 6.0)), 5.0)
    benign, ramp = _gpu(feats, "n001", 0), _gpu(feats, "n002", 3)
    assert ramp["err_rise_held_1h"] > 0.5
    assert abs(benign["err_rise_held_1h"]) < 0.3
    # Ten minutes into the ramp it is growing, but not for long enough to count as held.
    early = _gpu(_at(Spec(ecc_ramp=("n002", 3, 3.0, 4.0)), 3.2), "n002", 3)
    assert early["err_rise_5m"] > 0.5 and early["err_rise_held_1h"] < 0.1


def test_a_node_that_starts_to_throttle_rises_and_one_that_always_did_does_not() -> None:
    feats = _at(Spec(nodes=6, power_capped=("n002", 5.0), always_capped="n001"), 5.5)
    node = feats.node.set_index("node")
    assert "node_throttle_power_dev" not in node.columns  # a level against other nodes: gone
    assert abs(node.loc["n001", "node_throttle_power_rise"]) < 0.05
    assert node.loc["n002", "node_throttle_power_rise"] > 0.5


def test_hot_gpu_deviates_from_its_node_peers() -> None:
    feats = _at(Spec(hot_gpu=("n003", 2, 3.0)), 3.5)
    hot, peer = _gpu(feats, "n003", 2), _gpu(feats, "n003", 1)
    assert hot["temp_dev"] > 20 and abs(peer["temp_dev"]) < 2
    assert hot["throttle_thermal_5m"] > 0.5 and hot["clock_dev"] < -0.2


def test_a_node_hotter_at_the_same_power_stands_out_and_one_on_a_heavier_job_does_not() -> None:
    # n001's GPUs draw 200 W more (a heavier job) and run 15 C hotter for it; n005's fan fails
    # and its GPUs run 15 C hotter at the same power.
    spec = Spec(nodes=8, heavy_node=("n001", 1.0, 200.0), hot_nodes=(("n005",), 1.0, 15.0))
    node = _at(spec, 2.5).node.set_index("node")
    assert node.loc["n005", "node_temp_dev"] > 12 and node.loc["n005", "node_temp_trend_dev"] > 5
    assert abs(node.loc["n001", "node_temp_dev"]) < 2
    assert abs(node.loc["n001", "node_temp_trend_dev"]) < 2
    # The fan stands alone: the busy node is not counted as a second hot one (a rack's cooling).
    assert node.loc["n005", "hot_nodes_besides"] == 0
    # Without power in the export, heat is all there is to go on: both stand out.
    bare = _at(dataclasses.replace(spec, drop_columns=("gpu.power",)), 2.5).node.set_index("node")
    assert bare.loc["n001", "node_temp_dev"] > 12 and bare.loc["n005", "node_temp_dev"] > 12


def test_application_xids_are_ignored_and_hardware_xids_counted() -> None:
    t = T0 + 1800
    feats = _at(Spec(extra_events=[(t, "n000", 0, 13), (t, "n000", 0, 43), (t, "n000", 1, 79),
                                   (t, "n000", 1, 74), (t, "n000", -1, 61)]), 0.6)
    assert _gpu(feats, "n000", 0)[["xid_mem_1h", "xid_bus_1h", "xid_other_1h"]].sum() == 0
    assert _gpu(feats, "n000", 1)["xid_bus_1h"] > 0.5
    assert _gpu(feats, "n000", 1)["xid_nvlink_1h"] > 0.5
    node = feats.node.set_index("node")
    assert node.loc["n000", "xid_node_1h"] > 0.5


def test_straggler_and_bad_nic_stand_out_from_the_job() -> None:
    feats = _at(Spec(nodes=8, gpus=2, slow_node="n001", nic_bad=("n002", 2.0)), 3.0)
    node = feats.node.set_index("node")
    assert node.loc["n001", "compute_z"] > 5 and abs(node.loc["n000", "compute_z"]) < 3
    assert node.loc["n002", "link_bw_med_z"] < -5
    link = feats.link.set_index(["src", "dst"])
    assert link.loc[("n002", "n003"), "node"] == "n002"


def test_latency_shared_by_a_rack_counts_other_nodes_and_a_lone_bad_nic_does_not() -> None:
    rack = {"n004", "n005", "n006"}  # a leaf switch's nodes, or a rack's
    shared = _features_at(probe_trace(rack, 2.0), 2.5)
    lone = _features_at(probe_trace({"n005"}, 2.0), 2.5)
    for feats in (shared, lone):  # the slow node's own links stand out either way
        assert feats.node.set_index("node").loc["n005", "link_lat_med_z"] > 3
    node = shared.node.set_index("node")
    assert (node.loc[sorted(rack), "slow_lat_nodes_besides"] >= 2).all()
    assert lone.node.set_index("node").loc["n005", "slow_lat_nodes_besides"] == 0
    # A link carries the count of the node it is blamed on, besides that node.
    for feats in (shared, lone):
        link = feats.link
        on = link[link["node"] == "n005"]
        assert len(on) and (on["slow_lat_nodes_besides"] == feats.node.set_index("node").loc[
            "n005", "slow_lat_nodes_besides"]).all()
    assert (lone.link[lone.link["node"] == "n005"]["slow_lat_nodes_besides"] == 0).all()


def test_slow_probes_between_other_nodes_say_the_cause_is_shared() -> None:
    # A congested leaf switch slows the links between its other nodes too; a failing NIC only
    # its own.
    rack = ["n004", "n005", "n006"]
    shared = _features_at(probe_trace(set(rack), 2.0), 2.5)
    lone = _features_at(probe_trace({"n005"}, 2.0), 2.5)
    assert (shared.node.set_index("node").loc[rack, "slow_probes_elsewhere"] > 0.15).all()
    assert lone.node.set_index("node").loc["n005", "slow_probes_elsewhere"] == 0
    healthy = _features_at(probe_trace(set(), 2.0), 2.5).node["slow_probes_elsewhere"]
    assert (healthy < 0.1).all()
    # A link carries the share of the node it is blamed on.
    for feats in (shared, lone):
        on = feats.link[feats.link["node"] == "n005"]
        assert len(on) and (on["slow_probes_elsewhere"] == feats.node.set_index("node").loc[
            "n005", "slow_probes_elsewhere"]).all()


def test_a_failing_nic_reads_slow_within_minutes_under_a_rotating_peer() -> None:
    # Each node probes its ring neighbour and a peer that moves on each minute: a node's live
    # links are mostly ones probed before its NIC fell (5 min after the fall, 12 of its 28 live
    # ones read slow, their median z -0.3). Its links probed lately read it (12 of 22).
    trace = probe_trace({"n005"}, 2.0, bw=0.4, rotate=True)
    feats = _features_at(trace, 2.0 + 5 / 60, every_s=60.0)
    node = feats.node.set_index("node")
    assert node.loc["n005", "link_bw_med_z"] < -5
    assert (node.drop(index="n005")["link_bw_med_z"] > -3).all()


def test_a_failing_nic_is_not_blamed_on_the_partner_that_probes_it_twice() -> None:
    # A ring with each node's opposite as its second peer: n005 probes n001 and n001 probes
    # n005, so half of n005's links run to n001, whose NIC fails.
    feats = _features_at(probe_trace({"n001"}, 2.0, nodes=8, offsets=(1, 4), bw=0.4), 2.5)
    node = feats.node.set_index("node")
    assert node.loc["n001", "link_bw_med_z"] < -5 and node.loc["n001", "link_lat_med_z"] > 5
    # The features stay as the models were trained on them: n005 reads slow there ...
    assert node.loc["n005", "link_bw_med_z"] < -3
    # ... and is explained by n001: without the links to it, n005's links are healthy.
    ex = feats.explained
    assert sorted(ex.index) == ["n000", "n002", "n005"] and set(ex["peer"]) == {"n001"}
    assert (ex[["link_bw_med_z", "link_lat_med_z"]].abs() < 3).all(axis=None)
    node_frame, link_frame = explain_away(feats)
    scored = node_frame.set_index("node")
    assert abs(scored.loc["n005", "link_bw_med_z"]) < 3
    assert scored.loc["n001", "link_bw_med_z"] == node.loc["n001", "link_bw_med_z"]
    on = link_frame[link_frame["node"] == "n005"]
    assert len(on) and (on["node_bw_med_z"].abs() < 3).all()
    link = feats.link.set_index(["src", "dst"])
    assert link.loc[("n005", "n001"), "node"] == "n001"
    assert link.loc[("n001", "n005"), "node"] == "n001"
    # Slow links between slow nodes (a rack behind one leaf switch) leave each of them slow.
    rack = ["n004", "n005", "n006"]
    wide = _features_at(probe_trace(set(rack), 2.0, offsets=(1, 8), bw=0.4), 2.5)
    for frame in (wide.node, explain_away(wide)[0]):
        assert (frame.set_index("node").loc[rack, "link_lat_med_z"] > 3).all()


def test_missing_columns_and_files_give_nan_features_not_errors() -> None:
    spec = Spec(drop_columns=("gpu.ecc.sbe", "gpu.clock.sm"), with_node=False, with_links=False)
    feats = _at(spec, 1.0)
    assert feats.gpu["sbe_rate_1h"].isna().all() or (feats.gpu["sbe_rate_1h"] == 0).all()
    assert feats.gpu["clock_dev"].isna().all()
    assert feats.gpu["temp_dev"].notna().all()
    assert len(feats.node) == 4 and feats.node["compute_z"].isna().all()
    assert len(feats.link) == 0


def test_incremental_updates_match_one_batch() -> None:
    trace = make_trace(Spec(ecc_ramp=("n002", 3, 2.0, 6.0), benign_sbe=("n000", 0)))
    t = T0 + 4 * 3600
    one = FeatureEngine(interval_s=30.0)
    one.update(trace, t)
    many = FeatureEngine(interval_s=30.0)
    for feats in replay(trace, every_s=450.0, engine=many):
        if feats.t >= t:
            break
    a, b = one.features(t).gpu, many.features(t).gpu
    # Held features depend on what was seen when (test_sustained.py covers them).
    held = {*SUSTAINED["gpu"], "err_held_1h", "err_fall_1h"}
    cols = [c for c in GPU_FEATURES if c != "stale_intervals" and c not in held]
    np.testing.assert_allclose(a[cols].to_numpy(dtype=float), b[cols].to_numpy(dtype=float),
                               rtol=1e-6, atol=1e-9)


def test_rows_already_seen_are_not_counted_twice() -> None:
    trace = make_trace(Spec(benign_sbe=("n000", 0)))
    t = T0 + 3 * 3600
    once, twice = FeatureEngine(interval_s=30.0), FeatureEngine(interval_s=30.0)
    once.update(trace, t)
    twice.update(trace, t)
    twice.update(trace, t)  # the service re-reads an overlapping window every tick
    pd.testing.assert_frame_equal(once.features(t).gpu, twice.features(t).gpu)


def _series(trace: FleetTrace, node: str, gpu: int, column: str) -> pd.Series:
    """``column`` of one GPU at every 5-minute tick, indexed by hours into the trace."""
    out = {}
    for feats in replay(trace, every_s=300.0, engine=FeatureEngine(
            interval_s=trace.meta.interval_s)):
        g = feats.gpu[(feats.gpu["node"] == node) & (feats.gpu["gpu"] == gpu)]
        if len(g):
            out[round((feats.t - T0) / 3600, 2)] = float(g.iloc[0][column])
    return pd.Series(out)


def test_an_error_rate_that_faded_reads_a_fall_and_a_ramp_to_failure_never_does() -> None:
    # Corrected errors on n002/3 climb from 2 h until it fails at 6 h. Its growth against its
    # own 6-h rate falls as those errors raise the 6-h rate; its rate never does.
    ramp = make_trace(Spec(ecc_ramp=("n002", 3, 2.0, 6.0)))
    rise = _series(ramp, "n002", 3, "err_rise_5m").loc[2.25:5.9]
    fall = _series(ramp, "n002", 3, "err_fall_1h").loc[2.25:5.9]
    assert rise.iloc[-1] < rise.max() / 2
    assert (fall == 0.0).all()
    # The same fleet with a burst of corrected errors on n000/0 that rose for 10 minutes to
    # ~30 a minute at 3 h and fades since.
    trace = make_trace(Spec())
    g = trace.gpu
    at = ((g["node"] == "n000") & (g["gpu"] == 0)).to_numpy()
    rel = (g.loc[at, "ts"].to_numpy() - T0) / 60.0 - 180.0  # minutes from the peak
    per_min = np.where(rel < -10, 0.0, np.where(rel < 0, 3.0 * (rel + 10), 30.0 * np.exp(
        -rel / 13.0)))
    sbe = g["gpu.ecc.sbe"].to_numpy(dtype=float).copy()
    sbe[at] += np.cumsum(per_min * trace.meta.interval_s / 60.0)
    faded = dataclasses.replace(trace, gpu=g.assign(**{"gpu.ecc.sbe": sbe}))
    row = _gpu(_features_at(faded, 3.4), "n000", 0)  # 25 minutes after the peak
    assert row["err_rise_5m"] > 0.5  # still e^0.5 = 1.6x its 6-h rate (in 1 + errors/h) ...
    assert row["err_fall_1h"] > 0.7  # ... and 2x down from its peak
