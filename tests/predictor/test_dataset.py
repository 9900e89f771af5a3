import dataclasses

import numpy as np
import pytest

from collector.fleet_trace import FleetTrace
from predictor.dataset import KINDS, LabelConfig, Rows, collect
from predictor.generator import GeneratorConfig, generate_trace
from predictor.replay import ticks as replay_ticks

FADING = GeneratorConfig(seed=5, nodes=8, gpus_per_node=4, days=0.5, interval_s=60.0,
                         failure_count=3, mix={"ecc": 1.0}, precursor_share={"ecc": 1.0},
                         fading_bursts_per_gpu_day=2.0)


def _rows(trace: FleetTrace) -> dict[str, Rows]:
    rows = {k: Rows() for k in KINDS}
    collect(trace, rows, config=LabelConfig(keep_healthy=1.0), rng=np.random.default_rng(0))
    return rows


def _without_windows(trace: FleetTrace) -> FleetTrace:
    extra = {k: v for k, v in trace.meta.extra.items() if k != "unlabelled"}
    return dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, extra=extra))


def test_a_fading_burst_teaches_its_fall_but_not_its_rise() -> None:
    trace = generate_trace(FADING)
    windows = trace.meta.extra["unlabelled"]
    assert isinstance(windows, list) and len(windows) >= 3
    hidden, shown = _rows(trace), _rows(_without_windows(trace))
    # GPU rows at a 5-minute tick inside one of its GPU's windows, counted on the trace itself.
    ticks = replay_ticks(trace, LabelConfig().every_s)
    inside = 0
    for t0, t1, node, gpu in windows:
        for t in ticks[(ticks >= t0) & (ticks <= t1)]:
            g = trace.gpu
            recent = g[(g["node"] == node) & (g["gpu"] == gpu) & (g["ts"] <= t)]
            doomed = trace.failures[(trace.failures["node"] == node)
                                    & (trace.failures["gpu"] == gpu)
                                    & (trace.failures["ts"] > t)]
            inside += int(len(recent) > 0 and doomed.empty)
    x_hidden, y_hidden, _, _ = hidden["gpu"].frames("gpu")
    x_shown, y_shown, _, _ = shown["gpu"].frames("gpu")
    assert inside > 0
    # At most those rows go (fewer: a GPU down or just after its node's failure has none).
    assert inside / 2 <= len(x_shown) - len(x_hidden) <= inside
    # The fall is still taught: rows whose growth has fallen from its hour's peak remain.
    assert (x_hidden["err_fall_1h"] > 0.5).sum() > 0
    # Node and link rows, and every failing GPU's rows, are as they were.
    assert y_hidden.sum() == y_shown.sum() > 0
    for kind in ("node", "link"):
        assert len(hidden[kind].frames(kind)[0]) == len(shown[kind].frames(kind)[0])


def test_a_trace_without_bursts_marks_no_window() -> None:
    trace = generate_trace(dataclasses.replace(FADING, fading_bursts_per_gpu_day=0.0))
    assert "unlabelled" not in trace.meta.extra


@pytest.mark.parametrize("windows, named", [
    ("rise", "not str"), ([[1.0, 2.0, "node000"]], r"\[0\]"), ([[1.0, "soon", "n", 0]], r"\[0\]"),
])
def test_malformed_unlabelled_windows_are_refused_by_name(windows: object, named: str) -> None:
    trace = generate_trace(dataclasses.replace(FADING, days=0.1))
    bad = dataclasses.replace(trace, meta=dataclasses.replace(
        trace.meta, extra={**trace.meta.extra, "unlabelled": windows}))
    with pytest.raises(ValueError, match=f"unlabelled'{named}|unlabelled' must be .*{named}"):
        _rows(bad)


@pytest.mark.parametrize(("field", "value"), [
    ("horizon_s", float("nan")), ("horizon_s", float("inf")), ("horizon_s", 60.0),
    ("every_s", float("nan")), ("every_s", float("inf")), ("every_s", 0.0),
    ("keep_healthy", float("nan")),
])
def test_label_settings_that_are_no_number_of_seconds_are_refused_by_name(
        field: str, value: float) -> None:
    # Before, a NaN horizon was taken and then read "no trace had a failure to learn from", and
    # an infinite period replayed one tick and wrote a model trained on it.
    with pytest.raises(ValueError, match=f"{field}={value}"):
        LabelConfig(**{field: value})
