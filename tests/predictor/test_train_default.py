import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from predictor.train_default import (
    MEMBERS,
    OPTIONAL_GPU_COLUMNS,
    drop_optional_columns,
    drop_signals,
    slow_configs,
    training_configs,
    training_traces,
)
from tests.predictor.conftest import Spec, make_trace


def test_training_fleets_differ_in_what_they_export_but_keep_every_error_counter() -> None:
    trace = make_trace(Spec(hours=0.5))
    rng = np.random.default_rng(0)
    kept = [set(drop_optional_columns(trace, rng).gpu.columns) for _ in range(60)]
    optional = set(OPTIONAL_GPU_COLUMNS) & set(trace.gpu.columns)
    assert optional >= {"gpu.clock.sm", "gpu.power", "gpu.throttle.thermal", "gpu.ecc.dbe"}
    for column in optional:  # each optional column is missing from some fleets, not all
        assert 0 < sum(column not in k for k in kept) < len(kept)
    for column in ("gpu.ecc.sbe", "gpu.pcie.replay", "gpu.temperature", "ts", "node", "gpu"):
        assert all(column in k for k in kept)
    # The same seed drops the same columns: the default model stays reproducible.
    again = set(drop_optional_columns(trace, np.random.default_rng(0)).gpu.columns)
    assert again == kept[0]
    assert trace.gpu.shape[1] == len(set(trace.gpu.columns))  # the input is left untouched


def test_training_fleets_can_leave_out_step_times_or_latency_and_keep_the_rest() -> None:
    trace = make_trace(Spec(hours=0.5))
    rng = np.random.default_rng(0)
    shares = {"latency": 0.25, "node": 0.5}
    fleets = [drop_signals(trace, rng, shares) for _ in range(80)]
    no_latency = sum("net.link.latency" not in f.links.columns for f in fleets)
    no_steps = sum(len(f.node) == 0 for f in fleets)
    assert 5 <= no_latency <= 35 and 25 <= no_steps <= 55  # about a quarter and a half
    # Bandwidth and every GPU column stay, whatever is dropped.
    assert all(len(f.links) == len(trace.links) and len(f.gpu) == len(trace.gpu) for f in fleets)
    assert all("net.link.bandwidth" in f.links.columns for f in fleets)
    assert all(list(f.gpu.columns) == list(trace.gpu.columns) for f in fleets)
    again = drop_signals(trace, np.random.default_rng(0), shares)
    assert list(again.links.columns) == list(fleets[0].links.columns)
    assert len(again.node) == len(fleets[0].node)
    # By default nothing is left out: the shipped model's fleets export every signal.
    assert drop_signals(trace, rng, {}).node.equals(trace.node)


def test_leaving_step_times_out_of_a_fleet_keeps_the_gpu_columns_it_exports() -> None:
    # Which signals a fleet loses is drawn apart from which GPU columns it drops, so a recipe
    # with a signal left out trains on the same GPU frames as one without.
    with_steps = list(training_traces(3, member=MEMBERS[0], absent={}))
    without_steps = list(training_traces(3, member=MEMBERS[0], absent={"node": 1.0}))
    for full, less in zip(with_steps, without_steps, strict=True):
        assert len(full.node) > 0 and len(less.node) == 0
        assert list(less.gpu.columns) == list(full.gpu.columns)
        assert less.links.equals(full.links)
    # ...and the fleets differ in what they export, so the comparison above could tell.
    assert len({tuple(f.gpu.columns) for f in with_steps}) > 1


def test_train_default_refuses_a_stray_signal_naming_the_known_ones() -> None:
    result = subprocess.run([sys.executable, "-m", "predictor.train_default", "--absent",
                             "step_times=0.2", "--out", "/nonexistent/x.skops"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "unknown signal 'step_times'" in result.stderr
    assert "node, compute, events" in result.stderr


def test_training_covers_slow_exporters_on_seeds_of_their_own() -> None:
    ordinary, slow = training_configs(30), slow_configs(8)
    # Slow exporters (a scrape every 1.5-5 minutes, link probes every 5 minutes or slower) are
    # in the training set...
    assert all(90.0 <= c.interval_s <= 300.0 <= c.link_interval_s for c in slow)
    assert max(c.interval_s for c in ordinary) <= 60.0
    # ...on seeds no other training fleet uses, inside the training range (1000-1999) that the
    # benchmarks' held-out suites stay out of.
    seeds = [c.seed for c in ordinary + slow]
    assert len(set(seeds)) == len(seeds)
    assert all(1000 <= s <= 1999 for s in seeds)


def test_each_member_of_the_default_model_trains_on_fleets_of_its_own() -> None:
    # Averaging only removes one member's quirks if the members saw different fleets.
    fleets = [training_configs(30, seed=m.draw, seed_base=m.seed_base) for m in MEMBERS]
    seeds = [c.seed for configs in fleets for c in configs] + [c.seed for c in slow_configs(8)]
    assert len(MEMBERS) > 1 and len(set(seeds)) == len(seeds)
    assert all(1000 <= s <= 1999 for s in seeds)
    # ...drawn apart: not the same fleet parameters under other seeds.
    assert len({(c.nodes, c.interval_s, c.noise) for configs in fleets for c in configs}) == 90


def test_the_node_model_for_fleets_without_compute_times_is_added_to_a_model_as_it_is(
        tmp_path: Path) -> None:
    # --unhooked-into fits only that kind and adds it; the model's other kinds stay the very
    # same estimators, so fleets that export compute times score exactly as before.
    from predictor.feature_frames import UNHOOKED
    from predictor.model import RiskModel
    from predictor.train_default import with_unhooked

    shipped = RiskModel.load()
    base = dataclasses.replace(shipped, kinds={k: v for k, v in shipped.kinds.items()
                                               if k != UNHOOKED})
    twin = dataclasses.replace(shipped, kinds={UNHOOKED: shipped.kinds[UNHOOKED]})
    joined = with_unhooked(base, [twin])
    assert joined.kinds == {**base.kinds, UNHOOKED: shipped.kinds[UNHOOKED]}
    assert all(joined.kinds[k] is base.kinds[k] for k in base.kinds)
    assert joined.version not in (base.version, twin.version)
    with pytest.raises(ValueError, match="horizon"):
        with_unhooked(base, [dataclasses.replace(twin, horizon_s=3600.0)])
    result = subprocess.run([sys.executable, "-m", "predictor.train_default", "--unhooked-into",
                             str(tmp_path / "missing.skops")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "--unhooked-into" in result.stderr and "model file not found" in result.stderr
