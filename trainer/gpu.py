"""GPU readers: the `GpuReader` protocol and `NvmlGpuReader`, which reads every canonical
``gpu.*`` metric and XID events through NVML (the ``pynvml`` module of nvidia-ml-py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuDevice:
    """One GPU as the reader sees it."""

    index: int
    """NVML index on the node (not the CUDA index: CUDA_VISIBLE_DEVICES may reorder)."""
    uuid: str
    name: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSample:
    """Every metric a reader could read from one GPU at one instant."""

    index: int
    uuid: str
    ts: float
    values: Mapping[str, float]
    """Canonical metric name (``gpu.temperature``) -> value in metrics.md units."""


@dataclass(frozen=True, kw_only=True, slots=True)
class XidEvent:
    """An XID reported by the driver for one GPU."""

    index: int
    uuid: str
    ts: float
    code: int


@runtime_checkable
class GpuReader(Protocol):
    """What the hook needs from a source of GPU telemetry."""

    source: str
    """``nvml`` or ``simulated``; simulated points carry ``source=simulated``."""

    def devices(self) -> Sequence[GpuDevice]: ...

    def sample(self) -> list[GpuSample]:
        """Read every GPU now; a GPU that cannot be read is left out."""
        ...

    def xids(self) -> list[XidEvent]:
        """XID events since the last call; never blocks."""
        ...

    def close(self) -> None: ...


# Clock-event reason bits (nvmlClocksEventReason*): which of them mean thermal, which power.
_THERMAL_BITS = 0x20 | 0x40  # SW thermal slowdown, HW thermal slowdown
_POWER_BITS = 0x04 | 0x80  # SW power cap, HW power brake slowdown
_FI_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP
_FI_NVLINK_CRC_TOTAL = 38  # NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL
_REASONS = {3: "not supported", 2: "invalid for this GPU", 4: "not permitted"}
"""NVML return codes of unreadable fields (NVML_ERROR_NOT_SUPPORTED and friends)."""
_FIELD_METRICS = {_FI_MEMORY_TEMP: "gpu.memory.temperature",
                  _FI_NVLINK_CRC_TOTAL: "gpu.nvlink.crc_errors"}


def _field_value(field: Any) -> float:
    """The number in an ``nvmlFieldValue_t``, whatever its value type."""
    attr = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}
    return float(getattr(field.value, attr.get(int(field.valueType), "ullVal")))


class NvmlGpuReader:
    """Reads the GPUs of this node through NVML; stands down (no GPUs) where NVML is absent."""

    source = "nvml"

    def __init__(self, *, nvml: ModuleType | Any | None = None) -> None:
        self._nvml: Any = nvml
        self._handles: list[Any] = []
        self._devices: list[GpuDevice] = []
        self._unsupported: set[tuple[int, str]] = set()
        self.unsupported: dict[tuple[int, str], str] = {}
        """(GPU index, metric) -> why NVML cannot read it on this GPU (e.g. no NVLink)."""
        self._event_set: Any = None
        self._pending_xids: list[XidEvent] = []
        self._closed = False
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
        except Exception as exc:  # NVML absent (no driver, no library): stand down, don't fail.
            log.info("foreshock: NVML unavailable (%s); GPU telemetry is off", exc)
            self._nvml = None
            return
        n = self._nvml
        for i in range(int(n.nvmlDeviceGetCount())):
            handle = n.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(n.nvmlDeviceGetUUID(handle))
            try:
                name = _text(n.nvmlDeviceGetName(handle))
            except n.NVMLError:
                name = ""
            self._handles.append(handle)
            self._devices.append(GpuDevice(index=i, uuid=uuid, name=name))
        self._register_xid_events()

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def devices(self) -> Sequence[GpuDevice]:
        return tuple(self._devices)

    def sample(self) -> list[GpuSample]:
        if self._nvml is None or self._closed:
            return []
        out = []
        for dev, handle in zip(self._devices, self._handles, strict=True):
            values = self._read(dev.index, handle)
            if values is not None:
                out.append(GpuSample(index=dev.index, uuid=dev.uuid, ts=time.time(), values=values))
        return out

    def _read(self, index: int, handle: Any) -> dict[str, float] | None:
        n = self._nvml
        values: dict[str, float] = {}
        for name, getter in self._getters().items():
            if (index, name) in self._unsupported:
                continue
            try:
                got = getter(handle)
                for metric, code in [(k, v) for k, v in got.items() if k.startswith("!")]:
                    # A field NVML answered with an error code: not on this GPU (no NVLink...).
                    del got[metric]
                    if (index, metric[1:]) not in self.unsupported:
                        reason = _REASONS.get(int(code), f"NVML error {int(code)}")
                        self.unsupported[(index, metric[1:])] = reason
                        log.info("foreshock: %s is %s on GPU %d", metric[1:], reason, index)
                values.update(got)
            except n.NVMLError as exc:
                if exc.value == n.NVML_ERROR_GPU_IS_LOST:
                    log.warning("foreshock: GPU %d is lost (fell off the bus?)", index)
                    return None
                if exc.value == n.NVML_ERROR_NOT_SUPPORTED:
                    log.info("foreshock: %s is not supported on GPU %d", name, index)
                    self._unsupported.add((index, name))
                    self.unsupported[(index, name)] = "not supported"
                else:
                    # A transient NVML error on one metric must not cost the GPU's other metrics.
                    log.debug("foreshock: reading %s on GPU %d failed: %s", name, index, exc)
        return values

    def _getters(self) -> dict[str, Callable[[Any], dict[str, float]]]:
        n = self._nvml

        def ecc(kind: int) -> Callable[[Any], float]:
            return lambda h: float(n.nvmlDeviceGetTotalEccErrors(h, kind, n.NVML_VOLATILE_ECC))

        def reasons(h: Any) -> dict[str, float]:
            get = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                n.nvmlDeviceGetCurrentClocksThrottleReasons
            bits = int(get(h))
            return {"gpu.throttle.thermal": float(bool(bits & _THERMAL_BITS)),
                    "gpu.throttle.power": float(bool(bits & _POWER_BITS))}

        def remapped(h: Any) -> dict[str, float]:
            corr, unc, pending, _failed = n.nvmlDeviceGetRemappedRows(h)
            return {"gpu.rows.remapped.correctable": float(corr),
                    "gpu.rows.remapped.uncorrectable": float(unc),
                    "gpu.rows.remap.pending": float(bool(pending))}

        def fields(h: Any) -> dict[str, float]:
            got = n.nvmlDeviceGetFieldValues(h, list(_FIELD_METRICS))
            # Failed fields come back as "!name" -> NVML return code, for `_read` to note.
            return {("" if int(f.nvmlReturn) == n.NVML_SUCCESS else "!") +
                    _FIELD_METRICS[int(f.fieldId)]:
                    _field_value(f) if int(f.nvmlReturn) == n.NVML_SUCCESS else float(f.nvmlReturn)
                    for f in got}

        def one(name: str, fn: Callable[[Any], float]) -> Callable[[Any], dict[str, float]]:
            return lambda h: {name: fn(h)}

        return {
            "gpu.utilization": one("gpu.utilization",
                                   lambda h: n.nvmlDeviceGetUtilizationRates(h).gpu / 100.0),
            "gpu.memory.used": one("gpu.memory.used",
                                   lambda h: float(n.nvmlDeviceGetMemoryInfo(h).used)),
            "gpu.temperature": one("gpu.temperature", lambda h: float(
                n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))),
            "gpu.power": one("gpu.power", lambda h: n.nvmlDeviceGetPowerUsage(h) / 1000.0),
            "gpu.clock.sm": one("gpu.clock.sm",
                                lambda h: float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))),
            "throttle": reasons,
            "gpu.ecc.sbe": one("gpu.ecc.sbe", ecc(n.NVML_MEMORY_ERROR_TYPE_CORRECTED)),
            "gpu.ecc.dbe": one("gpu.ecc.dbe", ecc(n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)),
            "rows": remapped,
            "gpu.pcie.replay": one("gpu.pcie.replay",
                                   lambda h: float(n.nvmlDeviceGetPcieReplayCounter(h))),
            "fields": fields,
        }

    def _register_xid_events(self) -> None:
        n = self._nvml
        try:
            self._event_set = n.nvmlEventSetCreate()
        except n.NVMLError as exc:
            log.info("foreshock: NVML events unavailable (%s); no XID events", exc)
            return
        for dev, handle in zip(self._devices, self._handles, strict=True):
            try:
                n.nvmlDeviceRegisterEvents(handle, n.nvmlEventTypeXidCriticalError, self._event_set)
            except n.NVMLError as exc:
                log.info("foreshock: XID events not supported on GPU %d (%s)", dev.index, exc)

    def xids(self) -> list[XidEvent]:
        n = self._nvml
        if n is None or self._event_set is None or self._closed:
            return []
        by_uuid = {d.uuid: d for d in self._devices}
        out: list[XidEvent] = []
        for _ in range(1000):  # Drain what is queued, bounded in case the driver floods.
            try:
                data = n.nvmlEventSetWait_v2(self._event_set, 0)
            except n.NVMLError as exc:
                if exc.value != n.NVML_ERROR_TIMEOUT:
                    log.debug("foreshock: waiting for NVML events failed: %s", exc)
                break
            try:
                uuid = _text(n.nvmlDeviceGetUUID(data.device))
            except n.NVMLError:
                uuid = ""
            dev = by_uuid.get(uuid)
            index = dev.index if dev is not None else -1
            out.append(XidEvent(index=index, uuid=uuid, ts=time.time(), code=int(data.eventData)))
        return out

    def close(self) -> None:
        if self._nvml is None or self._closed:
            return
        self._closed = True
        try:
            if self._event_set is not None:
                self._nvml.nvmlEventSetFree(self._event_set)
            self._nvml.nvmlShutdown()
        except Exception as exc:  # Shutting down telemetry must never fail the caller.
            log.debug("foreshock: NVML shutdown failed: %s", exc)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
