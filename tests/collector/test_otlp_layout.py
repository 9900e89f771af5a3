"""Requests read through a learned layout store exactly what the general path stores."""

import time

import pytest

from collector.batch import Batch
from collector.otlp import PROTOBUF, OtlpCache, TimeWindow, decode, flatten, read_batch
from collector.store import Store
from tests.collector.otlp_builder import RequestBuilder

NOW = time.time()
WINDOW = TimeWindow(NOW, max_future_s=300.0, max_age_s=90 * 86400.0)


def _request(ts: float, *, temperature: float = 60.0, node: str = "n1",
             step: float = 1.5) -> RequestBuilder:
    """What a hook sends each interval: GPU gauges and a counter, rank gauges, a histogram."""
    b = RequestBuilder(job="j", node=node)
    gpus = [{"gpu": g, "gpu.uuid": f"GPU-{node}-{g}"} for g in range(4)]
    b.gauge("gpu.temperature", [(ts, temperature + g, a) for g, a in enumerate(gpus)], "Cel")
    b.gauge("gpu.power", [(ts, 300 + g, a) for g, a in enumerate(gpus)], "W")  # as_int
    b.sum("gpu.ecc.sbe", [(ts, -0.0, a) for a in gpus])
    b.gauge("train.step.duration", [(ts, step + r, {"rank": r}) for r in range(2)], "s")
    b.histogram("train.collective.duration",
                [(ts, 2.0, 4, {"rank": r, "op": "all_reduce"}) for r in range(2)])
    b.gauge("net.link.latency", [(ts, 1e-5, {"peer": "n2"})])
    return b


def _read(body: bytes, cache: OtlpCache) -> Batch:
    return read_batch(body, PROTOBUF, window=WINDOW, cache=cache)


def _general(body: bytes) -> Batch:
    return flatten(decode(body, PROTOBUF), window=WINDOW)


def _learned(cache: OtlpCache) -> None:
    for i in range(3):  # learned at the second sighting, used from the third on
        _read(_request(NOW - 100 + i).bytes(), cache)


def test_a_repeated_layout_is_read_into_the_same_rows_as_the_general_path() -> None:
    cache = OtlpCache()
    _learned(cache)
    body = _request(NOW - 10, temperature=71.5, step=2.25).bytes()
    batch = _read(body, cache)
    general = _general(body)
    assert batch.columns is not None, "the third request of one layout is read through it"
    assert (batch.accepted, batch.rejected) == (general.accepted, 0)
    assert batch.rows_by_key() == general.rows_by_key()
    gpu, points = batch.rows_by_key()
    assert len(gpu) == 4 and len(points) == 2 + 2 * 4 + 1


@pytest.mark.parametrize(("metric", "value", "ts_offset_s", "message"), [
    (0, float("nan"), 0.0, "gpu.temperature: value nan is not finite"),
    (0, float("inf"), 0.0, "gpu.temperature: value inf is not finite"),
    (0, -1e39, 0.0, "gpu.temperature: value -1e+39 is out of range"),
    # DCGM's blank for a float field: a layout that checked finiteness alone stored it.
    (0, float(2**47), 0.0,
     "gpu.temperature: value 1.40737e+14 is out of range (-273.15 to 1000 C): no sensor reads it"),
    (3, -1.0, 0.0, "train.step.duration: value -1 is out of range (0 to 604800 s)"),
    (0, 60.0, 86405.0, "is 86400 s in the future"),
    (3, 1.0, -366 * 86400.0, "train.step.duration: timestamp"),
    (0, 60.0, -366 * 86400.0, "is 366 days old; the store keeps 90 days"),
])
def test_a_bad_point_in_a_known_layout_is_rejected_alone_with_its_reason(
        metric: int, value: float, ts_offset_s: float, message: str) -> None:
    cache = OtlpCache()
    _learned(cache)
    b = _request(NOW - 5)
    dp = b.scope.metrics[metric].gauge.data_points[1]
    dp.as_double = value
    dp.time_unix_nano += int(ts_offset_s * 1e9)
    batch = _read(b.bytes(), cache)
    assert batch.rejected == 1 and message in batch.error_message()
    assert batch.accepted == _general(_request(NOW - 5).bytes()).accepted - 1


def test_a_request_that_differs_outside_its_values_is_not_misread() -> None:
    cache = OtlpCache()
    _learned(cache)
    other = _request(NOW - 5, node="n9").bytes()  # same size, another node
    assert len(other) == len(_request(NOW - 5).bytes())
    batch = _read(other, cache)
    assert batch.rows_by_key() == _general(other).rows_by_key()
    assert {e[1] for e in batch.entities} == {"n9"}


def test_layout_batches_and_general_batches_store_the_same_data(tmp_path) -> None:
    cache = OtlpCache()
    bodies = [_request(NOW - 100 + i, temperature=60.0 + i).bytes() for i in range(5)]
    fast = Store.open(f"sqlite:///{tmp_path / 'fast.db'}")
    slow = Store.open(f"sqlite:///{tmp_path / 'slow.db'}")
    try:
        for body in bodies:
            fast.write(_read(body, cache))
            slow.write(_general(body))
        got, want = fast.read_trace(job="j"), slow.read_trace(job="j")
        assert got.gpu.equals(want.gpu) and len(got.gpu) == 5 * 4
        assert got.node.equals(want.node) and len(got.node) > 0
        assert got.gpu["gpu.ecc.sbe"].tolist() == [0.0] * 20
    finally:
        fast.close()
        slow.close()


def test_an_attribute_changed_deep_inside_a_known_layout_is_read_the_general_way() -> None:
    cache = OtlpCache()
    _learned(cache)
    b = _request(NOW - 5)
    uuid = b.scope.metrics[1].gauge.data_points[2].attributes[1]
    assert uuid.key == "gpu.uuid"
    uuid.value.string_value = "GPU-n1-X"  # same length: only the bytes differ
    batch = _read(b.bytes(), cache)
    assert batch.columns is None
    assert batch.rows_by_key() == _general(b.bytes()).rows_by_key()
    assert ("j", "n1", None, 2, None, "GPU-n1-X") in batch.entities
