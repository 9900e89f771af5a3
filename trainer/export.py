"""Export: an OpenTelemetry `MeterProvider` with a periodic OTLP/HTTP exporter that counts what
it could not deliver and what the collector refused, warns once of each, and never blocks or
raises into training."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import requests
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource

log = logging.getLogger(__name__)

_CREDENTIAL_PROVIDER_ENV = ("OTEL_PYTHON_EXPORTER_OTLP_HTTP_METRICS_CREDENTIAL_PROVIDER",
                            "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER")
"""Name a ``requests.Session`` factory (an entry point) that the OTLP exporter loads itself."""
_OTLP_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.metric_exporter",
                 "opentelemetry.exporter.otlp.common.http")


@dataclass(frozen=True, kw_only=True, slots=True)
class ExportTarget:
    """Where and how often to send; ``None`` fields fall back to ``OTEL_EXPORTER_OTLP_*``."""

    endpoint: str | None
    headers: Mapping[str, str] | None
    interval_s: float | None
    timeout_s: float | None


def metrics_url(endpoint: str) -> str:
    """``http://host:4318`` -> ``http://host:4318/v1/metrics`` (a full URL is kept)."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/metrics") else f"{endpoint}/v1/metrics"


def _count_points(data: MetricsData) -> int:
    return sum(len(m.data.data_points) for rm in data.resource_metrics
               for sm in rm.scope_metrics for m in sm.metrics)


class _OnlyOnce(logging.Filter):
    """Silences the OTLP exporter's own per-attempt errors: `CountingExporter` reports instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.CRITICAL


class Refusals:
    """Reads the collector's ``partial_success`` from each export's response, which the SDK's
    exporter drops: points the collector received and refused (a clock far off, values it cannot
    store) are counted, and the first refusal's reason is logged, where they were counted as
    delivered and lost without a word. A ``requests`` response hook; never raises."""

    def __init__(self, *, where: str) -> None:
        self._where = where
        self._lock = threading.Lock()
        self.points = 0
        self._warned = False

    def __call__(self, response: requests.Response, *args: object,
                 **kwargs: object) -> None:
        try:
            if (response.status_code != 200
                    or not response.headers.get("content-type", "").startswith(
                        "application/x-protobuf")):
                return
            partial = ExportMetricsServiceResponse.FromString(response.content).partial_success
            if partial.rejected_data_points <= 0:
                return
            with self._lock:
                self.points += partial.rejected_data_points
                first, self._warned = not self._warned, True
            if first:
                why = partial.error_message
                log.warning("foreshock: %s refused %d metric point(s): %s; counting them "
                            "(hook.stats.rejected_points); training continues", self._where,
                            partial.rejected_data_points,
                            why if len(why) <= 500 else why[:500] + "...")
        except Exception as exc:  # A response we cannot read costs its count, never training.
            log.debug("foreshock: unreadable export response: %r", exc)


class CountingExporter(MetricExporter):
    """Wraps an exporter: counts delivered and dropped points, warns once, never raises."""

    def __init__(self, inner: MetricExporter, *, where: str) -> None:
        super().__init__(preferred_temporality={Histogram: AggregationTemporality.DELTA})
        self._inner = inner
        self._where = where
        self._lock = threading.Lock()
        self.exported_points = 0
        self.dropped_points = 0
        self.failed_exports = 0
        self._warned = False
        self._failing = False

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: object) -> MetricExportResult:
        n = _count_points(metrics_data)
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis)
            error = "the collector refused the batch or is down"
        except Exception as exc:  # An exporter bug must cost points, never the training run.
            result, error = MetricExportResult.FAILURE, repr(exc)
        with self._lock:
            if result == MetricExportResult.SUCCESS:
                self.exported_points += n
                if self._failing:
                    log.warning("foreshock: metrics reach %s again", self._where)
                self._failing = False
                return result
            self.dropped_points += n
            self.failed_exports += 1
            first, self._warned = not self._warned, True
            self._failing = True
        if first:
            log.warning("foreshock: could not send metrics to %s (%s); dropping them and counting "
                        "(hook.stats.dropped_points); training continues", self._where, error)
        return MetricExportResult.SUCCESS if n == 0 else MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        try:
            self._inner.shutdown(timeout_millis=timeout_millis)
        except Exception as exc:  # Shutdown of telemetry must not fail the caller.
            log.debug("foreshock: exporter shutdown failed: %s", exc)


class Export:
    """The hook's meter provider: resource ``job``/``node``/``rank``, periodic OTLP export."""

    def __init__(self, target: ExportTarget, *, resource: Mapping[str, str | int],
                 exporter: MetricExporter | None = None) -> None:
        for name in _OTLP_LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, _OnlyOnce) for f in logger.filters):
                logger.addFilter(_OnlyOnce())
        endpoint = metrics_url(target.endpoint) if target.endpoint else None
        timeout_s = target.timeout_s
        if timeout_s is None and not _env("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
                                          "OTEL_EXPORTER_OTLP_TIMEOUT"):
            timeout_s = 5.0
        session = None
        if exporter is None:
            # A session of our own reads the responses; one from a credential provider named in
            # the environment is the exporter's to load, and its responses go unread.
            if not _env(*_CREDENTIAL_PROVIDER_ENV):
                session = requests.Session()
            exporter = OTLPMetricExporter(endpoint=endpoint, headers=target.headers,
                                          timeout=timeout_s, session=session)
        where = str(endpoint or getattr(exporter, "_endpoint", "the OTLP endpoint"))
        self.exporter = CountingExporter(exporter, where=where)
        self.refusals: Refusals | None = None
        if session is not None:  # an exporter passed in keeps its own responses
            self.refusals = Refusals(where=where)
            session.hooks["response"].append(self.refusals)
        interval_s = target.interval_s
        if interval_s is None and not _env("OTEL_METRIC_EXPORT_INTERVAL"):
            interval_s = 5.0
        self.timeout_s = timeout_s if timeout_s is not None else 10.0
        self.reader = PeriodicExportingMetricReader(
            self.exporter,
            export_interval_millis=None if interval_s is None else interval_s * 1000,
            export_timeout_millis=self.timeout_s * 1000,
        )
        self.provider = MeterProvider(metric_readers=[self.reader],
                                      resource=Resource.create(dict(resource)))
        self.meter: Meter = self.provider.get_meter("foreshock.trainer")
        self.meter.create_observable_counter(
            "foreshock.hook.dropped_points", [self._observe_dropped], unit="1",
            description="metric points the hook could not deliver")

    def _observe_dropped(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self.exporter.dropped_points)]

    def flush(self) -> bool:
        """Export now (bounded by the export timeout)."""
        try:
            return self.provider.force_flush(timeout_millis=self.timeout_s * 1000)
        except Exception as exc:  # Flushing telemetry must never fail the caller.
            log.debug("foreshock: flush failed: %s", exc)
            return False

    def close(self) -> None:
        """Final export and shutdown, bounded by the export timeout."""
        try:
            self.provider.shutdown(timeout_millis=self.timeout_s * 1000 + 1000)
        except Exception as exc:  # Shutdown of telemetry must not fail the caller.
            log.debug("foreshock: meter provider shutdown failed: %s", exc)


def _env(*names: str) -> bool:
    return any(os.environ.get(n) for n in names)
