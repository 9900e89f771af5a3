"""OTLP metrics bodies in, one flat :class:`~collector.batch.Batch` out.

``read_batch`` is the receiver's entry point: a protobuf body whose layout was seen before is
read through it (collector/otlp_layout.py); any other body is decoded here and flattened
(collector/flatten.py), and its layout learned for the next time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

# Re-exported: modules outside the receiver (trace_io, tests) import these names from here.
from collector.batch import GPU_INDEX, N_GPU, Batch, Entity, SeriesRef, entity_key
from collector.flatten import FlattenCache, RejectedPoint, TimeWindow, flatten
from collector.otlp_layout import LayoutCache, learn

__all__ = ["GPU_INDEX", "JSON", "N_GPU", "PROTOBUF", "Batch", "Entity", "FlattenCache",
           "OtlpCache", "OtlpDecodeError", "RejectedPoint", "SeriesRef", "TimeWindow", "decode",
           "entity_key", "flatten", "read_batch"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class OtlpDecodeError(ValueError):
    """The body is not a valid OTLP ExportMetricsServiceRequest; the message says why."""


@dataclass(slots=True)
class OtlpCache:
    """What earlier requests taught, for one store: series by attributes, request layouts."""

    flatten: FlattenCache = field(default_factory=FlattenCache)
    layouts: LayoutCache = field(default_factory=LayoutCache)


def decode(body: bytes, content_type: str) -> ExportMetricsServiceRequest:
    """Parse ``body`` as ``application/x-protobuf`` or ``application/json`` (OTLP/HTTP)."""
    request = ExportMetricsServiceRequest()
    if content_type == JSON:
        try:
            json_format.Parse(body.decode("utf-8"), request, ignore_unknown_fields=True)
        except (json_format.ParseError, UnicodeDecodeError, RecursionError) as exc:
            raise OtlpDecodeError(f"malformed OTLP JSON: {exc}") from exc
        return request
    try:
        request.ParseFromString(body)
    except (DecodeError, RecursionError) as exc:
        raise OtlpDecodeError(f"malformed OTLP protobuf (ExportMetricsServiceRequest): {exc}") \
            from exc
    return request


def read_batch(body: bytes, content_type: str, *, window: TimeWindow,
               cache: OtlpCache) -> Batch:
    """Every data point of an OTLP/HTTP body sorted into a :class:`Batch` (bad ones rejected).

    Raises :class:`OtlpDecodeError` if the body does not decode.
    """
    protobuf = content_type != JSON
    if protobuf:
        batch = cache.layouts.read(body, window=window)
        if batch is not None:
            return batch
    request = decode(body, content_type)
    batch = flatten(request, window=window, cache=cache.flatten)
    if protobuf and cache.layouts.should_learn(body):
        layout = learn(body, request, batch, window=window)
        if layout is not None:
            cache.layouts.add(layout)
    return batch
