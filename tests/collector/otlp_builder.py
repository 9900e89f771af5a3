"""Builds OTLP export requests for tests, the way an instrumented trainer sends them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    Metric,
    ResourceMetrics,
)

CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
DELTA = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA

Attrs = Mapping[str, object]


def _set(kv: KeyValue, key: str, value: object) -> None:
    kv.key = key
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    else:
        kv.value.string_value = str(value)


def add_attrs(target: object, attrs: Attrs) -> None:
    for k, v in attrs.items():
        _set(target.add(), k, v)  # type: ignore[attr-defined]


class RequestBuilder:
    """Accumulates metrics under one resource (job/node/...)."""

    def __init__(self, **resource: object) -> None:
        self.request = ExportMetricsServiceRequest()
        self.rm: ResourceMetrics = self.request.resource_metrics.add()
        add_attrs(self.rm.resource.attributes, resource)
        self.scope = self.rm.scope_metrics.add()
        self.scope.scope.name = "tests"

    def _metric(self, name: str, unit: str = "") -> Metric:
        m = self.scope.metrics.add()
        m.name, m.unit = name, unit
        return m

    def gauge(self, name: str, points: Sequence[tuple[float, float, Attrs]],
              unit: str = "") -> RequestBuilder:
        m = self._metric(name, unit)
        for ts, value, attrs in points:
            dp = m.gauge.data_points.add()
            dp.time_unix_nano = int(ts * 1e9)
            if isinstance(value, int):
                dp.as_int = value
            else:
                dp.as_double = value
            add_attrs(dp.attributes, attrs)
        return self

    def sum(self, name: str, points: Sequence[tuple[float, float, Attrs]], *,
            cumulative: bool = True) -> RequestBuilder:
        m = self._metric(name)
        m.sum.aggregation_temporality = CUMULATIVE if cumulative else DELTA
        m.sum.is_monotonic = True
        for ts, value, attrs in points:
            dp = m.sum.data_points.add()
            dp.time_unix_nano = int(ts * 1e9)
            dp.as_double = value
            add_attrs(dp.attributes, attrs)
        return self

    def histogram(self, name: str, points: Sequence[tuple[float, float, int, Attrs]], *,
                  cumulative: bool = False) -> RequestBuilder:
        """Points as (ts, sum, count, attrs); min/max set to sum/count for simplicity."""
        m = self._metric(name, "s")
        m.histogram.aggregation_temporality = CUMULATIVE if cumulative else DELTA
        for ts, total, count, attrs in points:
            dp = m.histogram.data_points.add()
            dp.time_unix_nano = int(ts * 1e9)
            dp.sum, dp.count = total, count
            dp.min = dp.max = total / count if count else 0.0
            dp.bucket_counts.extend([count])
            add_attrs(dp.attributes, attrs)
        return self

    def bytes(self) -> bytes:
        return self.request.SerializeToString()


def gpu_sample(ts: float, *, gpus: int = 2, temperature: float = 60.0, **resource: object
               ) -> RequestBuilder:
    """One NVML sample of ``gpus`` GPUs: temperature, power and an ECC counter each."""
    b = RequestBuilder(**resource)
    attrs = [{"gpu": g, "gpu.uuid": f"GPU-{resource.get('node', 'n')}-{g}"} for g in range(gpus)]
    b.gauge("gpu.temperature", [(ts, temperature + g, a) for g, a in enumerate(attrs)], "Cel")
    b.gauge("gpu.power", [(ts, 300.0 + g, a) for g, a in enumerate(attrs)], "W")
    b.sum("gpu.ecc.sbe", [(ts, 1.0 * g, a) for g, a in enumerate(attrs)])
    return b
