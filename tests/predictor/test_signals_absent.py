import pytest

from predictor.signals_absent import ABSENT, FRAME_OF, absent, without
from tests.predictor.conftest import Spec, make_trace


def test_a_fleet_without_a_signal_loses_that_signal_and_nothing_else() -> None:
    trace = make_trace(Spec(hours=0.5, ecc_ramp=("n001", 2, 0.1, 0.4)))
    bare = without(trace, ["latency", "events", "remap"])
    assert "net.link.latency" not in bare.links.columns
    assert bare.links[["ts", "src", "dst", "net.link.bandwidth"]].equals(
        trace.links[["ts", "src", "dst", "net.link.bandwidth"]])
    assert len(trace.events) > 0 and len(bare.events) == 0
    assert list(bare.events.columns) == list(trace.events.columns)  # still a well-formed file
    assert not {c for c in bare.gpu.columns if c.startswith("gpu.rows.")}
    assert bare.gpu["gpu.ecc.sbe"].equals(trace.gpu["gpu.ecc.sbe"])
    assert bare.node.equals(trace.node) and bare.failures is trace.failures
    assert "net.link.latency" in trace.links.columns  # the input is left untouched


def test_every_named_signal_can_be_taken_out_and_a_stray_name_is_refused() -> None:
    trace = make_trace(Spec(hours=0.5))
    for name in ABSENT:
        file, columns = ABSENT[name]
        frame = getattr(without(trace, [name]), FRAME_OF[file])
        assert (len(frame) == 0) if not columns else not set(columns) & set(frame.columns)
        # absent() reads back what without() took out, and nothing the trace still exports.
        assert set(absent(without(trace, [name]))) == {*absent(trace), name}
    assert absent(trace) == ["remap"]  # make_trace's GPUs have no row-remap counters
    with pytest.raises(ValueError, match=r"unknown signal 'dcgm'.*latency"):
        without(trace, ["dcgm"])
