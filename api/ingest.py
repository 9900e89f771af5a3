"""OTLP/HTTP metrics receiver: ``POST /v1/metrics`` (protobuf or JSON, optionally gzipped).

Answers as the OTLP specification says: an ``ExportMetricsServiceResponse`` in the request's
encoding, with ``partial_success`` when some points were rejected; errors carry a
``google.rpc.Status`` whose message names what was wrong. The accepted points are committed
before the 2xx leaves, so a crash after it loses none of them.
"""

from __future__ import annotations

import logging
import time
import zlib

from fastapi import APIRouter, Depends, Request, Response
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from sqlalchemy.exc import OperationalError
from starlette.concurrency import run_in_threadpool

from api.deps import get_settings, get_store, require_ingest_token
from api.settings import Settings
from collector.otlp import JSON, PROTOBUF, OtlpCache, OtlpDecodeError, TimeWindow, read_batch
from collector.store import Store
from collector.writer import StoreUnavailableError, WriteResult

log = logging.getLogger("foreshock.ingest")

router = APIRouter(tags=["ingest"])


class IngestError(Exception):
    """A request the receiver refuses as a whole: an HTTP status and a message for the sender."""

    def __init__(self, status: int, message: str, grpc_code: int) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.grpc_code = grpc_code


def _encode(message: ExportMetricsServiceResponse | Status, media: str) -> bytes:
    if media == PROTOBUF:
        return message.SerializeToString()
    return json_format.MessageToJson(message, indent=None).encode()


def _error(exc: IngestError, media: str) -> Response:
    body = _encode(Status(code=exc.grpc_code, message=exc.message), media)
    headers = {"Retry-After": "1"} if exc.status == 503 else None
    return Response(body, status_code=exc.status, media_type=media, headers=headers)


async def _read_body(request: Request, *, limit: int, gzipped: bool) -> bytes:
    """The (decompressed) body, refusing anything over ``limit`` bytes before or after gzip."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise IngestError(413, f"body of {declared} bytes exceeds max_body_bytes={limit}", 8)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise IngestError(413, f"body exceeds max_body_bytes={limit}", 8)
        chunks.append(chunk)
    body = b"".join(chunks)
    if not gzipped:
        return body
    out, data = bytearray(), body
    while data:  # a gzip stream may hold several members; each is inflated in turn
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            # Inflating at most limit+1 bytes keeps a gzip bomb from ever filling memory.
            out += inflater.decompress(data, limit + 1 - len(out))
        except zlib.error as exc:
            raise IngestError(400, f"Content-Encoding: gzip, but the body is not gzip: {exc}",
                              3) from exc
        if len(out) > limit:
            raise IngestError(413, f"decompressed body exceeds max_body_bytes={limit}", 8)
        if not inflater.eof:
            raise IngestError(400, "Content-Encoding: gzip, but the gzip stream is truncated", 3)
        data = inflater.unused_data
    return bytes(out)


def _store_request(body: bytes, media: str, settings: Settings, store: Store,
                   cache: OtlpCache) -> WriteResult:
    try:
        window = TimeWindow(time.time(), max_future_s=settings.max_future_s,
                            max_age_s=settings.rollup_retention_s)
        batch = read_batch(body, media, window=window, cache=cache)
    except OtlpDecodeError as exc:
        raise IngestError(400, str(exc), 3) from exc
    try:
        return store.write(batch, max_series_per_job=settings.max_series_per_job)
    except (OperationalError, StoreUnavailableError) as exc:
        # Locked or unreachable database: retryable, so the exporter tries again.
        reason = exc.orig if isinstance(exc, OperationalError) else exc
        log.warning("ingest: store unavailable: %s", reason)
        raise IngestError(503, f"store unavailable, retry: {reason}", 14) from exc


def _cache(request: Request) -> OtlpCache:
    # One per app (and per store): what it remembers is only valid for the ids of one store.
    cache = getattr(request.app.state, "otlp_cache", None)
    if cache is None:
        cache = request.app.state.otlp_cache = OtlpCache()
    return cache


@router.post(
    "/v1/metrics",
    dependencies=[Depends(require_ingest_token)],
    summary="OTLP/HTTP metrics export (protobuf or JSON, gzip allowed)",
    response_class=Response,
    responses={
        200: {"description": "ExportMetricsServiceResponse; partial_success counts rejected "
                             "points (NaN/inf values, far-future timestamps or ones older "
                             "than rollup_retention_s, bad attributes, "
                             "series over the per-job limit)."},
        400: {"description": "Malformed protobuf/JSON or gzip (google.rpc.Status)."},
        401: {"description": "FORESHOCK_INGEST_TOKEN is set and the bearer token is missing."},
        413: {"description": "Body over max_body_bytes, before or after decompression."},
        415: {"description": "Content-Type other than application/x-protobuf or "
                             "application/json, or Content-Encoding other than gzip."},
        503: {"description": "Store temporarily unavailable; retry."},
    },
)
async def export_metrics(
    request: Request,
    settings: Settings = Depends(get_settings),
    store: Store = Depends(get_store),
) -> Response:
    """Receive OTLP metrics; the accepted points are durable when the 200 is sent."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    reply_media = media if media in (PROTOBUF, JSON) else JSON
    try:
        if media not in (PROTOBUF, JSON):
            raise IngestError(415, f"Content-Type {media or '(none)'!r} is not supported; "
                              f"send {PROTOBUF} or {JSON}", 3)
        encoding = request.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("gzip", "identity", ""):
            raise IngestError(415, f"Content-Encoding {encoding!r} is not supported; "
                              "send gzip or none", 3)
        body = await _read_body(request, limit=settings.max_body_bytes,
                                gzipped=encoding == "gzip")
        result = await run_in_threadpool(_store_request, body, media, settings, store,
                                         _cache(request))
    except IngestError as exc:
        return _error(exc, reply_media)
    response = ExportMetricsServiceResponse()
    if result.rejected:
        response.partial_success.rejected_data_points = result.rejected
        response.partial_success.error_message = result.error_message
    return Response(_encode(response, reply_media), media_type=reply_media)
