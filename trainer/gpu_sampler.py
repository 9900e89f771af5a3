"""`GpuSampler`: reads a `GpuReader` in a background thread and publishes what it read as
OpenTelemetry instruments (gauges, cumulative sums, ``gpu.xid`` points)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from collector.metrics import GPU_METRICS, XID
from trainer.gpu import GpuReader, GpuSample, XidEvent

log = logging.getLogger(__name__)

_MAX_PENDING_XIDS = 1024


class GpuSampler:
    """Samples every ``interval_s`` on its own thread; the exporter reads the latest sample."""

    def __init__(self, reader: GpuReader, meter: Meter, *, interval_s: float = 1.0) -> None:
        if not 0 < interval_s < math.inf:  # NaN would spin the thread, inf never sample
            raise ValueError(f"hook.gpu_sample_interval_s={interval_s} must be > 0 seconds and "
                             "finite")
        self.reader = reader
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._latest: dict[int, GpuSample] = {}
        self._xids: deque[XidEvent] = deque(maxlen=_MAX_PENDING_XIDS)
        self._stop = threading.Event()
        self._extra = {"source": "simulated"} if reader.source == "simulated" else {}
        self.samples_read = 0
        self.failures = 0
        for spec in GPU_METRICS:
            if spec.kind == "cumulative":
                meter.create_observable_counter(spec.name, [self._observer(spec.name)],
                                                unit=spec.unit, description=spec.help)
            else:
                meter.create_observable_gauge(spec.name, [self._observer(spec.name)],
                                              unit=spec.unit, description=spec.help)
        meter.create_observable_gauge(XID.name, [self._observe_xids], unit=XID.unit,
                                      description=XID.help)
        self._thread = threading.Thread(target=self._run, name="foreshock-gpu", daemon=True)
        self._thread.start()

    def _attrs(self, index: int, uuid: str) -> dict[str, str | int]:
        return {"gpu": index, "gpu.uuid": uuid, **self._extra}

    def _observer(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            # A GPU that stopped answering (lost, off the bus) stops reporting rather than
            # repeating its last values.
            fresh_after = time.time() - 3 * self.interval_s - 1.0
            with self._lock:
                samples = list(self._latest.values())
            return [Observation(s.values[name], self._attrs(s.index, s.uuid))
                    for s in samples if name in s.values and s.ts >= fresh_after]

        return observe

    def _observe_xids(self, options: CallbackOptions) -> Iterable[Observation]:
        # A gauge holds one value per attribute set and collection, so send at most one XID per
        # GPU each export and keep the rest for the next: none is lost, some arrive late.
        out: dict[int, XidEvent] = {}
        kept: list[XidEvent] = []
        with self._lock:
            while self._xids:
                x = self._xids.popleft()
                if x.index in out:
                    kept.append(x)
                else:
                    out[x.index] = x
            self._xids.extend(kept)
        return [Observation(x.code, self._attrs(x.index, x.uuid)) for x in out.values()]

    def sample_once(self) -> None:
        """Read the GPUs and XIDs now (the thread calls this every interval)."""
        samples = self.reader.sample()
        xids = self.reader.xids()
        with self._lock:
            for s in samples:
                self._latest[s.index] = s
            self._xids.extend(xids)
        self.samples_read += len(samples)
        for x in xids:
            log.warning("foreshock: XID %d on GPU %d (%s)", x.code, x.index, x.uuid)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:
                # A sampler is a background loop: log and carry on, training must not notice.
                self.failures += 1
                if self.failures == 1:
                    log.exception("foreshock: GPU sampling failed; retrying every interval "
                                  "(further failures are logged at debug level)")
                else:
                    log.debug("foreshock: GPU sampling failed again", exc_info=True)
            self._stop.wait(self.interval_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self.reader.close()
        except Exception as exc:  # Closing telemetry must never fail the caller.
            log.debug("foreshock: closing the GPU reader failed: %s", exc)
