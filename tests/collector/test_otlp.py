import json
import time

import pytest
from google.protobuf import json_format

from collector.otlp import (
    GPU_INDEX,
    FlattenCache,
    OtlpDecodeError,
    TimeWindow,
    decode,
    flatten,
)
from tests.collector.otlp_builder import RequestBuilder, gpu_sample

NOW = time.time()
KEPT_S = 90 * 86400.0  # the store's default rollup retention


def _flat(b: RequestBuilder):
    return flatten(b.request, window=TimeWindow(NOW, max_future_s=300.0, max_age_s=KEPT_S))


def test_gpu_metrics_merge_into_one_row_per_gpu_and_time() -> None:
    batch = _flat(gpu_sample(NOW, gpus=2, job="j", node="n1"))
    assert batch.accepted == 6 and batch.rejected == 0
    assert len(batch.gpu) == 2
    (pos, ts), row = next(iter(batch.gpu.items()))
    entity = batch.entities[pos]
    assert entity[:5] == ("j", "n1", None, 0, None) and entity[5] == "GPU-n1-0"
    assert ts == pytest.approx(NOW)
    assert row[GPU_INDEX["gpu.temperature"]] == 60.0
    assert row[GPU_INDEX["gpu.ecc.sbe"]] == 0.0
    assert row[GPU_INDEX["gpu.utilization"]] is None


def test_entity_rules_for_train_net_and_other_metrics() -> None:
    b = RequestBuilder(node="n2", rank=5)  # no job: "default"
    b.gauge("train.step.duration", [(NOW, 1.5, {})])
    b.gauge("net.link.latency", [(NOW, 1e-5, {"peer": "n3"})])
    b.gauge("my.queue.depth", [(NOW, 7.0, {"queue": "a"})])
    batch = _flat(b)
    series = {batch.series[pos][1]: batch.series[pos] for pos, _ts in batch.points}
    assert series["train.step.duration"][0][:5] == ("default", "n2", 5, None, None)
    assert series["net.link.latency"][0][:5] == ("default", "n2", None, None, "n3")
    other = series["my.queue.depth"]
    assert other[0][:5] == ("default", "n2", 5, None, None)
    assert json.loads(other[5]) == {"queue": "a"}


def test_histograms_become_sum_count_min_max_and_xid_becomes_an_event() -> None:
    b = RequestBuilder(job="j", node="n1", rank=0)
    b.histogram("train.collective.duration", [(NOW, 2.0, 4, {"op": "all_reduce"})])
    b.gauge("gpu.xid", [(NOW, 79, {"gpu": 3})])
    batch = _flat(b)
    stats = {batch.series[pos][2]: v for (pos, _ts), v in batch.points.items()}
    assert stats == {"count": 4.0, "sum": 2.0, "min": 0.5, "max": 0.5}
    assert batch.accepted == 2
    [(pos, _ts, kind, code)] = batch.events
    entity = batch.entities[pos]
    assert (entity[1], entity[3], kind, code) == ("n1", 3, "xid", 79)


@pytest.mark.parametrize(("points", "message"), [
    ([(NOW, float("nan"), {"gpu": 0})], "gpu.temperature: value nan is not finite"),
    ([(NOW, float("inf"), {"gpu": 0})], "gpu.temperature: value inf is not finite"),
    ([(NOW, 1e39, {"gpu": 0})], "gpu.temperature: value 1e+39 is out of range"),
    ([(NOW, float(2**47), {"gpu": 0})],  # DCGM's blank for a float field
     "gpu.temperature: value 1.40737e+14 is out of range (-273.15 to 1000 C): no sensor reads it"),
    ([(NOW, -300.0, {"gpu": 0})],
     "gpu.temperature: value -300 is out of range (-273.15 to 1000 C)"),
    ([(NOW + 86400, 50.0, {"gpu": 0})], "is 86400 s in the future, more than max_future_s=300"),
    # A sender whose clock is a year off: the store would drop the point at its next pass.
    ([(NOW - 365 * 86400, 50.0, {"gpu": 0})],
     "is 365 days old; the store keeps 90 days (rollup_retention_s) and would drop it: check "
     "the sender's clock"),
    ([(0.0, 50.0, {"gpu": 0})], "data point has no time_unix_nano"),
    ([(NOW, 50.0, {"gpu": "zero"})], "attribute 'gpu' must be a non-negative integer"),
    ([(NOW, 50.0, {"gpu": 1.5})], "attribute 'gpu' must be a non-negative integer"),
    ([(NOW, 50.0, {})], "missing the 'gpu' attribute"),
])
def test_bad_points_are_rejected_with_a_reason_and_the_rest_kept(points, message) -> None:
    b = RequestBuilder(job="j", node="n1")
    b.gauge("gpu.temperature", [(NOW, 61.0, {"gpu": 1}), *points])
    batch = _flat(b)
    assert (batch.accepted, batch.rejected) == (1, 1)
    assert message in batch.error_message()


def test_points_inside_the_kept_window_are_accepted_to_its_edges() -> None:
    b = RequestBuilder(job="j", node="n1")
    b.gauge("gpu.temperature", [(NOW - KEPT_S + 60, 50.0, {"gpu": 0}),
                                (NOW + 299, 51.0, {"gpu": 0}),
                                (NOW - KEPT_S - 60, 52.0, {"gpu": 0})])
    b.histogram("train.collective.duration", [(NOW - 89 * 86400, 2.0, 4, {"rank": 0}),
                                              (NOW - 91 * 86400, 2.0, 4, {"rank": 0})])
    batch = _flat(b)
    assert (batch.accepted, batch.rejected) == (3, 2), batch.error_message()
    assert batch.error_message().count("days old") == 2
    assert "train.collective.duration: timestamp" in batch.error_message()
    # Without a bound on age (a test or a tool replaying old data) every one of them is kept.
    assert flatten(b.request, window=TimeWindow(NOW, max_future_s=300.0)).rejected == 0


def test_each_canonical_metric_has_its_own_bounds_and_other_metrics_any_finite_value() -> None:
    b = RequestBuilder(job="j", node="n1", rank=0)
    b.gauge("train.step.duration", [(NOW, 1.5, {}), (NOW + 1, -0.5, {})])
    b.gauge("net.link.bandwidth", [(NOW, 2.5e10, {"peer": "n2"}), (NOW + 1, 1e15, {"peer": "n2"})])
    b.sum("gpu.ecc.sbe", [(NOW, -12.0, {"gpu": 0}), (NOW + 1, 2.0**63 - 16, {"gpu": 0})])
    b.gauge("gpu.utilization", [(NOW, 0.97, {"gpu": 0}), (NOW + 1, 2.0**31 - 16, {"gpu": 0})])
    b.gauge("my.queue.depth", [(NOW, -1e30, {})])  # not in metrics.md: any finite value
    batch = _flat(b)
    assert (batch.accepted, batch.rejected) == (5, 4)
    said = batch.error_message()
    for text in ("train.step.duration: value -0.5 is out of range (0 to 604800 s)",
                 "net.link.bandwidth: value 1e+15 is out of range (0 to 1e+14 bytes/s)",
                 "gpu.ecc.sbe: value 9.22337e+18 is out of range (-9.0072e+15 to 9.0072e+15 "
                 "count)",
                 "gpu.utilization: value 2.14748e+09 is out of range (0 to 100)"):
        assert text in said, said


def test_wrong_resource_attribute_type_rejects_its_points() -> None:
    b = RequestBuilder(job="j", node=17)
    b.gauge("gpu.temperature", [(NOW, 61.0, {"gpu": 1})])
    batch = _flat(b)
    assert batch.rejected == 1 and "'node' must be a string" in batch.error_message()


def test_json_and_protobuf_decode_to_the_same_request() -> None:
    b = gpu_sample(NOW, job="j", node="n1")
    as_json = json_format.MessageToJson(b.request).encode()
    assert decode(as_json, "application/json") == decode(b.bytes(), "application/x-protobuf")


@pytest.mark.parametrize(("body", "media", "message"), [
    (b"\x0a\xff\xff\xff", "application/x-protobuf", "malformed OTLP protobuf"),
    (b"{not json", "application/json", "malformed OTLP JSON"),
    (b'{"resourceMetrics": 5}', "application/json", "malformed OTLP JSON"),
])
def test_malformed_bodies_raise_a_decode_error_naming_the_format(body, media, message) -> None:
    with pytest.raises(OtlpDecodeError, match=message):
        decode(body, media)


def test_a_shared_cache_gives_the_same_batch_as_a_cold_one() -> None:
    cache = FlattenCache()
    b = gpu_sample(NOW, gpus=3, job="j", node="n1")
    b.histogram("train.collective.duration", [(NOW, 2.0, 4, {"op": "all_reduce"})])
    b.gauge("app.x", [(NOW, 1.0, {"gpu": "bad"}), (NOW, 2.0, {"k": "v"})])
    cold = flatten(b.request, window=TimeWindow(NOW, max_future_s=300.0))
    for _ in range(2):
        warm = flatten(b.request, window=TimeWindow(NOW, max_future_s=300.0), cache=cache)
        assert (warm.entities, warm.series, warm.gpu, warm.points) == (
            cold.entities, cold.series, cold.gpu, cold.points)
        assert (warm.accepted, warm.rejected, warm.errors) == (11, 1, cold.errors)
