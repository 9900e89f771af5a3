"""The synthetic fleet generator: reproducible traces whose failures show what they should."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from collector.fleet_trace import read_trace
from collector.metrics import GPU_COLUMNS, LINK_TRACE_METRICS, NODE_TRACE_METRICS
from predictor import failure_mix
from predictor.failure_plan import plan_failures
from predictor.generator import DETAIL_FILE, GeneratedTrace, generate, write_generated
from predictor.generator_config import PRECURSOR_SHAPES, GeneratorConfig
from predictor.signatures import precursor_strength

COUNTERS = ("gpu.ecc.sbe", "gpu.ecc.dbe", "gpu.rows.remapped.correctable",
            "gpu.rows.remapped.uncorrectable", "gpu.pcie.replay", "gpu.nvlink.crc_errors")
STEPFUN = Path(__file__).resolve().parents[3] / "shared/data/stepfun-fault-trace/fault_trace.json"
SMALL = {"nodes": 8, "gpus_per_node": 4, "days": 1.0, "interval_s": 60.0}


def _precursor_trace(mode: str, shapes: dict[str, float] | None = None) -> GeneratedTrace:
    """Two failures of one mode, each with a 2-hour, typical-strength precursor (ramps unless
    ``shapes`` says otherwise), and no chronically slow node (a lower power limit throttles a
    node as often as a failing supply:
    ``test_some_chronically_slow_nodes_run_under_a_lower_power_limit``)."""
    return generate(GeneratorConfig(
        seed=11, **SMALL, failure_count=2, mix={mode: 1.0}, precursor_share={mode: 1.0},
        slow_node_fraction=0.0,
        precursor_min_s=7200.0, precursor_max_s=7200.0, intensity_min=1.0, intensity_max=1.0,
        repair_scale=0.02, precursor_shapes=shapes or {"ramp": 1.0},
    ))


@pytest.fixture(scope="module")
def confounded() -> GeneratedTrace:
    """No failures at all, three times the default confounder rates."""
    return generate(GeneratorConfig(seed=5, **SMALL, failure_count=0, confounders=3.0,
                                    cooling_per_rack_day=2.0, app_xid_per_gpu_day=0.2,
                                    transient_bursts_per_gpu_day=0.1,
                                    driver_reload_per_node_day=0.2))


def test_same_seed_same_trace_other_seed_other_trace() -> None:
    config = GeneratorConfig(seed=3, **SMALL, failure_count=3)
    a, b = generate(config).trace, generate(config).trace
    for name in ("gpu", "node", "links", "events", "failures"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    c = generate(GeneratorConfig(seed=4, **SMALL, failure_count=3)).trace
    assert not a.gpu["gpu.temperature"].equals(c.gpu["gpu.temperature"])


def test_written_trace_reads_back_with_every_canonical_column(tmp_path: Path) -> None:
    generated = generate(GeneratorConfig(seed=1, **SMALL, failure_count=4))
    write_generated(tmp_path, generated)
    trace = read_trace(tmp_path, with_failures=True)
    assert trace.meta.nodes == tuple(f"node{i:03d}" for i in range(8))
    assert trace.meta.gpus_per_node == 4 and trace.meta.interval_s == 60.0
    assert list(trace.gpu.columns) == ["ts", "node", "gpu", *GPU_COLUMNS]
    assert list(trace.node.columns) == ["ts", "node", *NODE_TRACE_METRICS]
    assert list(trace.links.columns) == ["ts", "src", "dst", *LINK_TRACE_METRICS]
    assert len(trace.gpu) > 0.8 * 8 * 4 * 1440 * 0.5 and len(trace.links) > 0
    assert trace.failures is not None and len(trace.failures) == len(generated.plan)
    assert set(trace.failures["kind"]) <= {"gpu", "link", "node"}
    assert (trace.failures.loc[trace.failures["kind"] != "gpu", "gpu"] == -1).all()
    assert trace.gpu["ts"].between(trace.meta.start, trace.meta.end).all()
    assert trace.gpu.groupby(["node", "gpu"])["ts"].apply(lambda s: s.is_monotonic_increasing).all()
    for name in ("gpu", "node", "links", "events", "failures"):  # what was written reads back
        pd.testing.assert_frame_equal(getattr(trace, name), getattr(generated.trace, name),
                                      check_dtype=False)
    assert trace.meta == generated.trace.meta
    detail = pd.read_csv(tmp_path / DETAIL_FILE)
    assert set(detail["mode"]) <= set(failure_mix.MODES)


def test_failure_mix_follows_the_config() -> None:
    config = GeneratorConfig(seed=2, nodes=3000, days=10.0, failure_count=1000, repair_scale=0.01)
    plan = plan_failures(config, np.random.default_rng(0))
    assert len(plan) == 1000
    counts = Counter(f.mode for f in plan)
    for mode, weight in config.mode_weights().items():
        assert abs(counts[mode] / len(plan) - weight) < 0.05, mode
    sudden = sum(f.precursor_s == 0 for f in plan) / len(plan)
    assert 0.4 < sudden < 0.85  # most real failures give no warning in telemetry
    assert all(600 <= f.precursor_s <= 8 * 3600 for f in plan if f.precursor_s > 0)
    skewed = GeneratorConfig(seed=2, nodes=3000, days=10.0, failure_count=300,
                             mix={"nic": 3.0, "ecc": 1.0}, repair_scale=0.01)
    modes = Counter(f.mode for f in plan_failures(skewed, np.random.default_rng(0)))
    assert set(modes) == {"nic", "ecc"} and modes["nic"] > 2 * modes["ecc"]


def test_default_mix_is_grounded_in_both_sources() -> None:
    mix = failure_mix.default_mix()
    assert sum(mix.values()) == pytest.approx(1.0)
    assert mix["ecc"] > mix["thermal"] and mix["node_sudden"] == max(mix.values())
    assert sum(failure_mix.STEPFUN_COUNTS.values()) == failure_mix.STEPFUN_FAULTS
    rate = 1000 * failure_mix.STEPFUN_FAULTS / failure_mix.STEPFUN_NODE_DAYS
    assert 2.0 < rate < 7.0 and GeneratorConfig().failure_rate == pytest.approx(rate, abs=0.1)


@pytest.mark.skipif(not STEPFUN.is_file(), reason="StepFun trace not present")
def test_committed_stepfun_constants_match_the_trace() -> None:
    counts, quantiles = failure_mix.derive_stepfun(STEPFUN)
    assert counts == failure_mix.STEPFUN_COUNTS
    assert quantiles == pytest.approx(failure_mix.REPAIR_HOURS, abs=0.01)


def _window(frame: pd.DataFrame, ts: float, before_s: float) -> pd.DataFrame:
    return frame[(frame["ts"] > ts - before_s) & (frame["ts"] < ts - 60)]


def _growth(rows: pd.DataFrame, column: str) -> pd.Series:
    return rows.groupby(["node", "gpu"])[column].agg(lambda s: s.max() - s.min())


@pytest.mark.parametrize("mode", ["ecc", "nvlink", "pcie"])
def test_counter_precursor_stands_out_before_a_gpu_failure(mode: str) -> None:
    column = {"ecc": "gpu.ecc.sbe", "nvlink": "gpu.nvlink.crc_errors",
              "pcie": "gpu.pcie.replay"}[mode]
    generated = _precursor_trace(mode)
    trace = generated.trace
    assert trace.failures is not None and len(trace.failures) == 2
    for f in trace.failures.itertuples():
        growth = _growth(_window(trace.gpu, f.ts, 3600), column)
        failing = growth.pop((f.node, f.gpu))
        assert failing > 5 * max(growth.max(), 10), (mode, f)
        codes = set(trace.events.loc[(trace.events["node"] == f.node)
                                     & (trace.events["ts"].between(f.ts, f.ts + 1)), "code"])
        assert codes & {"ecc": {48, 94, 95}, "nvlink": {74}, "pcie": {79}}[mode]
    if mode == "ecc":  # row remaps and XID 63/92 come before the double-bit error
        f = trace.failures.iloc[0]
        early = trace.events[(trace.events["node"] == f.node) & (trace.events["ts"] < f.ts)]
        assert {63, 92} & set(early["code"])


def test_thermal_precursor_throttles_and_slows_the_node() -> None:
    trace = _precursor_trace("thermal").trace
    assert trace.failures is not None
    for f in trace.failures.itertuples():
        rows = _window(trace.gpu, f.ts, 1200)
        rows = rows[rows["node"] == f.node]
        hottest = rows.groupby("gpu")["gpu.temperature"].max()
        assert hottest.idxmax() == f.gpu and hottest[f.gpu] >= 85
        assert rows.loc[rows["gpu"] == f.gpu, "gpu.throttle.thermal"].max() == 1
        steps = _window(trace.node, f.ts, 1200)
        compute = steps.groupby("node")["train.compute.duration"].max()
        assert compute[f.node] > 1.15 * compute.drop(f.node).median()  # a straggler


def test_node_precursors_show_on_every_gpu_of_the_node() -> None:
    fan = _precursor_trace("fan").trace
    power = _precursor_trace("power").trace
    assert fan.failures is not None and power.failures is not None
    for f in fan.failures.itertuples():
        temp = _window(fan.gpu, f.ts, 900).groupby("node")["gpu.temperature"].mean()
        assert temp[f.node] > temp.drop(f.node).max() + 3
    for f in power.failures.itertuples():
        flaps = _window(power.gpu, f.ts, 1800).groupby("node")["gpu.throttle.power"].mean()
        assert flaps[f.node] > 3 * max(flaps.drop(f.node).max(), 0.01)


def test_nic_degradation_shows_only_in_link_probes() -> None:
    trace = _precursor_trace("nic").trace
    assert trace.failures is not None
    for f in trace.failures.itertuples():
        probes = _window(trace.links, f.ts, 3600)
        touches = (probes["src"] == f.node) | (probes["dst"] == f.node)
        bw = probes["net.link.bandwidth"]
        assert bw[touches].mean() < 0.85 * bw[~touches].mean()
        assert f.kind == "link" and f.gpu == -1


def test_failed_nodes_are_absent_during_repair_and_counters_restart() -> None:
    generated = _precursor_trace("ecc")
    trace = generated.trace
    for f in generated.plan:
        node = f"node{f.node:03d}"
        rows = trace.gpu[trace.gpu["node"] == node]
        gone = rows[(rows["ts"] > f.ts + 660) & (rows["ts"] < f.ts + f.repair_s - 60)]
        assert gone.empty
        back = rows[(rows["ts"] > f.ts + 660 + f.repair_s) & (rows["gpu"] == f.gpu)]
        before = rows[(rows["ts"] < f.ts) & (rows["gpu"] == f.gpu)]
        if len(back):
            assert back["gpu.ecc.sbe"].iloc[0] < 0.5 * before["gpu.ecc.sbe"].iloc[-1]
            assert back["gpu.rows.remap.pending"].iloc[0] == 0


def test_sudden_failures_have_no_precursor() -> None:
    config = GeneratorConfig(seed=9, **SMALL, failure_count=4, mix={"pcie": 1.0},
                             precursor_share={"pcie": 0.0}, repair_scale=0.02)
    trace = generate(config).trace
    assert trace.failures is not None and (trace.failures["precursor_s"] == 0).all()
    for f in trace.failures.itertuples():
        growth = _growth(_window(trace.gpu, f.ts, 3600), "gpu.pcie.replay")
        assert growth.get((f.node, f.gpu), 0) < 30


def test_confounders_are_present_and_unlabelled(confounded: GeneratedTrace) -> None:
    trace = confounded.trace
    assert trace.failures is not None and trace.failures.empty
    assert {13, 31, 43} & set(trace.events["code"])
    sbe = _growth(trace.gpu, "gpu.ecc.sbe")
    assert (sbe >= 20).sum() >= 1  # steady benign single-bit errors on some GPU
    link_errors = _growth(trace.gpu, "gpu.pcie.replay") + _growth(trace.gpu,
                                                                  "gpu.nvlink.crc_errors")
    assert (link_errors >= 20).sum() >= 1  # benign replays/CRC errors, steady or in a burst
    steps = trace.node.assign(minute=(trace.node["ts"] // 60).astype(int))
    per_minute = steps.groupby("minute")["train.step.duration"].agg(["min", "count"])
    median_step = trace.node["train.step.duration"].median()
    stalled = per_minute[(per_minute["count"] >= 6) & (per_minute["min"] > 3 * median_step)]
    assert len(stalled) >= 2  # job-wide stalls and checkpoints: every node's step is slow
    compute = trace.node.groupby("node")["train.compute.duration"].median()
    assert compute.max() > 1.03 * compute.median()  # a chronically slow, healthy node
    rack = trace.gpu[trace.gpu["node"].isin(["node000", "node001", "node002", "node003"])]
    warm = rack.assign(q=(rack["ts"] // 600).astype(int)).groupby(["q", "node"])[
        "gpu.temperature"].mean().unstack()
    assert ((warm - warm.median()).min(axis=1) > 3).any()  # a rack warms up together
    grid = trace.gpu.groupby("node")["ts"].count()
    assert grid.min() < 1440 * 4  # telemetry gaps


def test_the_driver_flags_a_high_single_bit_rate_whatever_its_cause(
        confounded: GeneratedTrace) -> None:
    # XID 92 reads the counter alone, so bursts that pass raise it in a trace with no failure,
    # as they do on a real fleet; the driver repeats it for a GPU at most once an hour.
    trace = confounded.trace
    flagged = trace.events[trace.events["code"] == 92]
    assert len(flagged) >= 2
    for (node, gpu), group in flagged.groupby(["node", "gpu"]):
        assert (np.diff(group["ts"].to_numpy()) >= 3600).all()
        rows = trace.gpu[(trace.gpu["node"] == node) & (trace.gpu["gpu"] == gpu)]
        for ts in group["ts"]:
            sbe = rows.loc[rows["ts"].between(ts - 120, ts + 60), "gpu.ecc.sbe"]
            assert sbe.max() - sbe.min() >= 10, (node, gpu, ts)  # 10 a minute or more
    # A weak row's steady errors (20 or more over the day, never 10 in 10 minutes) raise none.
    steady = (_growth(trace.gpu, "gpu.ecc.sbe") >= 20) & (_worst_10_min_per_gpu(trace.gpu) < 10)
    calm = set(steady[steady].index)
    assert calm and not calm & set(zip(flagged["node"], flagged["gpu"], strict=True))


def test_a_harmless_row_remap_comes_after_a_few_corrected_errors() -> None:
    # A row is remapped because errors recur on it, so even a healthy GPU's remap (XID 63 in a
    # trace with no failure) follows a few corrected errors on that GPU.
    trace = generate(GeneratorConfig(seed=6, **SMALL, failure_count=0, benign_sbe_fraction=0.0,
                                     benign_remap_per_gpu_day=0.2)).trace
    remaps = trace.events[trace.events["code"] == 63]
    assert len(remaps) >= 2
    for r in remaps.itertuples():
        rows = trace.gpu[(trace.gpu["node"] == r.node) & (trace.gpu["gpu"] == r.gpu)
                         & trace.gpu["ts"].between(r.ts - 300, r.ts + 60)]
        assert rows["gpu.rows.remapped.correctable"].diff().max() == 1, r
        assert rows["gpu.ecc.sbe"].max() - rows["gpu.ecc.sbe"].min() >= 2, r


def test_counters_only_go_down_by_resetting(confounded: GeneratedTrace) -> None:
    gpu = confounded.trace.gpu.sort_values(["node", "gpu", "ts"])
    resets = 0
    for column in COUNTERS:
        values = gpu[column].to_numpy()
        same = (gpu["node"].to_numpy()[1:] == gpu["node"].to_numpy()[:-1]) & (
            gpu["gpu"].to_numpy()[1:] == gpu["gpu"].to_numpy()[:-1])
        down = same & (values[1:] < values[:-1])
        resets += int(down.sum())
        assert (values[1:][down] <= 10).all(), column  # a reset starts again near 0
    assert resets > 0


@pytest.mark.parametrize(("field", "value"), [
    ("nodes", 0), ("interval_s", -1.0), ("failure_rate", -2.0), ("drop_rate", 1.5),
    ("precursor_max_s", 1.0), ("mix", {"meteor": 1.0}), ("mix", {"ecc": 0.0}),
    ("precursor_share", {"ecc": 2.0}), ("ts_jitter_s", 100.0), ("burst_max_s", 10.0),
    ("burst_min_per_min", 0.0), ("burst_max_per_min", 1.0), ("fading_max_s", 60.0),
    ("fading_bursts_per_gpu_day", -1.0),
    ("precursor_shapes", {"zigzag": 1.0}), ("precursor_shapes", {"ramp": 0.0}),
])
def test_bad_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        GeneratorConfig(**{field: value})  # type: ignore[arg-type]


def _worst_10_min_per_gpu(trace: pd.DataFrame,
                         columns: tuple[str, ...] = ("gpu.ecc.sbe",)) -> pd.Series:
    """The most errors of ``columns`` each GPU gained in one 10-minute bucket."""
    frame = trace.assign(errors=trace[list(columns)].sum(axis=1),
                         q=(trace["ts"] // 600).astype(int))
    per_q = frame.groupby(["node", "gpu", "q"])["errors"].agg(["min", "max"])
    return (per_q["max"] - per_q["min"]).groupby(level=["node", "gpu"]).max()


def _worst_10_min(trace: pd.DataFrame) -> float:
    """The most errors (SBE + PCIe replays + NVLink CRC) any GPU gained in 10 minutes."""
    return float(_worst_10_min_per_gpu(
        trace, ("gpu.ecc.sbe", "gpu.pcie.replay", "gpu.nvlink.crc_errors")).max())


def test_transient_bursts_follow_their_configured_length_and_rate() -> None:
    quiet = {"failure_count": 0, "benign_sbe_fraction": 0.0, "benign_link_fraction": 0.0,
             "transient_bursts_per_gpu_day": 0.5, "driver_reload_per_node_day": 0.0}
    heavy = generate(GeneratorConfig(seed=8, **SMALL, **quiet)).trace  # 5-30 min, 2-40/min
    small = generate(GeneratorConfig(seed=8, **SMALL, **quiet, burst_min_s=60.0,
                                     burst_max_s=120.0, burst_min_per_min=5.0,
                                     burst_max_per_min=6.0)).trace
    none = generate(GeneratorConfig(seed=8, **SMALL, **{
        **quiet, "transient_bursts_per_gpu_day": 0.0})).trace
    # One or two minutes at 5-6 a minute (two or three 60-s samples) stand above the rare
    # background errors and far below bursts of 5-30 minutes at up to 40 a minute.
    assert _worst_10_min(none.gpu) < _worst_10_min(small.gpu) <= 30
    assert _worst_10_min(heavy.gpu) >= 60


def test_fading_bursts_rise_then_fade_and_leave_the_fleet_otherwise_as_it_was() -> None:
    quiet = {"benign_sbe_fraction": 0.0, "benign_link_fraction": 0.0,
             "driver_reload_per_node_day": 0.0, "fading_min_s": 3600.0, "fading_max_s": 3600.0}
    plain = generate(GeneratorConfig(seed=8, **SMALL, **quiet)).trace
    fading = generate(GeneratorConfig(seed=8, **SMALL, **quiet,
                                      fading_bursts_per_gpu_day=0.5)).trace
    # Drawn apart: the same failures, the same temperatures; only error counters differ.
    assert plain.failures is not None and fading.failures is not None
    pd.testing.assert_frame_equal(plain.failures, fading.failures)
    np.testing.assert_array_equal(plain.gpu["gpu.temperature"], fading.gpu["gpu.temperature"])
    errors = ["gpu.ecc.sbe", "gpu.pcie.replay", "gpu.nvlink.crc_errors"]
    extra = fading.gpu[errors].sum(axis=1) - plain.gpu[errors].sum(axis=1)
    assert (extra >= 0).all()
    # The busiest GPU's hour-long burst: ten-minute gains that climb to a peak and then fall,
    # to under a third of it by the end.
    gained = fading.gpu.assign(extra=extra, q=(fading.gpu["ts"] // 600).astype(int))
    worst = gained.groupby(["node", "gpu"])["extra"].max().idxmax()
    q = gained[(gained["node"] == worst[0]) & (gained["gpu"] == worst[1])].groupby("q")["extra"]
    gains = (q.max() - q.min()).to_numpy()
    gains = gains[gains > 0]
    peak = int(np.argmax(gains))
    assert gains[peak] >= 20
    assert 0 < peak < len(gains) - 1 and gains[-1] < gains[peak] / 3


def test_some_chronically_slow_nodes_run_under_a_lower_power_limit() -> None:
    # A lower power limit is a healthy node that power-throttles most of the time, more or less
    # with the load: it slows the node and must never come with a failure.
    trace = generate(GeneratorConfig(seed=5, **SMALL, failure_count=0,
                                     slow_node_fraction=0.5)).trace
    gpu = trace.gpu.groupby("node")
    throttled = gpu["gpu.throttle.power"].mean()
    capped = throttled[throttled > 0.5].index
    assert 1 <= len(capped) < 4
    top_power = gpu["gpu.power"].max()
    assert top_power[capped].max() < 645 < top_power.drop(capped).min()
    compute = trace.node.groupby("node")["train.compute.duration"].median()
    assert (compute[capped] > 1.02 * compute.median()).all()
    assert trace.failures is not None and trace.failures.empty


@pytest.mark.parametrize("seed", range(5))
def test_precursor_shapes_grow_as_named(seed: int) -> None:
    u = np.linspace(0.0, 1.0, 481)  # a 4-hour precursor sampled every 30 s
    s = {shape: precursor_strength(shape, u, 2.0, 4 * 3600.0, np.random.default_rng(seed))
         for shape in PRECURSOR_SHAPES}
    for shape, strength in s.items():
        assert strength.min() >= 0 and strength.max() <= 1 and strength[0] < 0.05, shape
        assert strength[-1] > 0.9, shape  # every shape is at full strength at the failure
    assert np.array_equal(s["ramp"], u ** 2)
    for shape in ("ramp", "sigmoid", "steps", "surge"):
        assert np.all(np.diff(s[shape]) >= -1e-12), shape  # they never let go
    assert s["sigmoid"][u <= 0.95].max() > 0.9  # developed before the end, then held
    assert len(np.unique(s["steps"])) <= 6  # a few levels, flat between
    assert s["surge"][u <= 0.75].max() <= 0.1  # a trickle until its last quarter at least
    on = s["episodic"] > 0
    quiet_after_a_spell = on[:-1] & ~on[1:]
    assert quiet_after_a_spell.any() and on[-3:].all()  # comes and goes; the failure in a spell


def test_shapes_change_only_how_precursors_grow() -> None:
    ramp, spells = _precursor_trace("ecc"), _precursor_trace("ecc", {"episodic": 1.0})
    assert spells.trace.failures is not None and ramp.trace.failures is not None
    pd.testing.assert_frame_equal(spells.trace.failures, ramp.trace.failures)
    assert set(spells.detail()["shape"]) == {"episodic"} and set(ramp.detail()["shape"]) == {
        "ramp"}
    for f in spells.trace.failures.itertuples():
        # Spells of errors with quiet minutes between them, where the ramp grows steadily.
        assert _quiet_after_errors(spells.trace.gpu, f) and not _quiet_after_errors(
            ramp.trace.gpu, f)
        last = _window(spells.trace.gpu, f.ts, 300)
        assert last.loc[(last["node"] == f.node) & (last["gpu"] == f.gpu), "gpu.ecc.sbe"].diff(
            ).sum() > 0  # the failure comes in a spell


def _quiet_after_errors(gpu: pd.DataFrame, f: Any) -> bool:
    """Whether the failing GPU went 5 samples without a corrected error once 20 had come."""
    rows = _window(gpu, f.ts, 7200)
    errors = rows.loc[(rows["node"] == f.node) & (rows["gpu"] == f.gpu),
                      "gpu.ecc.sbe"].diff().fillna(0).to_numpy()
    quiet = np.convolve(errors == 0, np.ones(5), "valid") == 5
    return bool((quiet & (np.cumsum(errors) >= 20)[4:]).any())


def test_weak_rows_that_err_in_clusters_raise_xid_92_without_growing() -> None:
    # A weak row errs when the job touches it: 1-5 errors a minute on average, bunched, so the
    # driver's 10-in-a-minute rule fires now and then; the rate holds, and nothing fails.
    quiet = {"failure_count": 0, "benign_sbe_fraction": 0.0, "transient_bursts_per_gpu_day": 0.0,
             "benign_remap_per_gpu_day": 0.0, "driver_reload_per_node_day": 0.0}
    base = generate(GeneratorConfig(seed=5, **SMALL, **quiet)).trace
    weak = generate(GeneratorConfig(seed=5, **SMALL, **quiet, clustered_sbe_fraction=0.1)).trace
    assert not (base.events["code"] == 92).any()
    flagged = weak.events[weak.events["code"] == 92].groupby(["node", "gpu"]).size()
    assert len(flagged) >= 2 and flagged.max() >= 3
    gpu = weak.gpu.sort_values(["node", "gpu", "ts"])
    half = gpu["ts"] < gpu["ts"].min() + (gpu["ts"].max() - gpu["ts"].min()) / 2
    for (node, g) in flagged.index:
        rows = gpu[(gpu["node"] == node) & (gpu["gpu"] == g)]
        first, second = (rows.loc[part, "gpu.ecc.sbe"].agg(lambda s: s.iloc[-1] - s.iloc[0])
                         for part in (half[rows.index], ~half[rows.index]))
        assert first + second >= 720  # 1-5 a minute on average: 720 a day at the very least
        assert 0.33 <= second / max(first, 1) <= 3.0  # no growth
    # Drawn apart: every other GPU's counters are what the seed made them.
    others = ~weak.gpu.set_index(["node", "gpu"]).index.isin(flagged.index)
    pd.testing.assert_frame_equal(base.gpu[others].reset_index(drop=True),
                                  weak.gpu[others].reset_index(drop=True))


def test_nodes_on_a_slower_nic_probe_slow_from_the_first_round_and_never_move() -> None:
    # A mixed fleet: some nodes on an older NIC. Every probe that touches one reads the same
    # fraction of what the fleet would otherwise read, from the first round to the last.
    quiet = {"failure_count": 0, "congestion_per_day": 0.0}
    base = generate(GeneratorConfig(seed=5, **SMALL, **quiet)).trace
    mixed = generate(GeneratorConfig(seed=5, **SMALL, **quiet, slow_nic_fraction=0.5)).trace
    ratio = (mixed.links["net.link.bandwidth"] / base.links["net.link.bandwidth"]).to_numpy()
    slow = ratio < 0.95
    assert 0.2 < slow.mean() < 0.95
    assert ratio[slow].min() >= 0.45 and ratio[slow].max() <= 0.86
    assert ratio[slow].std() < 0.01 and np.allclose(ratio[~slow], 1.0, atol=0.01)
    # Slow exactly where a probe touches a slow node, in the first hour as in the last.
    ends = mixed.links[["src", "dst"]]
    always = {n for n in mixed.meta.nodes if slow[(ends == n).any(axis=1).to_numpy()].all()}
    assert 0 < len(always) < len(mixed.meta.nodes)
    touches = ends.isin(always).any(axis=1).to_numpy()
    assert (slow == touches).all()
    # Drawn apart: the GPUs and everything else are what the seed made them.
    pd.testing.assert_frame_equal(base.gpu, mixed.gpu)
    pd.testing.assert_frame_equal(base.links[["ts", "src", "dst"]],
                                  mixed.links[["ts", "src", "dst"]])
    with pytest.raises(ValueError, match="slow_nic_fraction"):
        GeneratorConfig(slow_nic_fraction=1.5)
