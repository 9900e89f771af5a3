"""A fake ``pynvml`` for machines without a GPU: the same calls, constants and error classes
(the real ``pynvml.NVMLError`` family) as nvidia-ml-py, over a scripted device state."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml


@dataclass
class FakeDevice:
    uuid: str
    util: int = 87
    mem_used: int = 70 * 1024**3
    temp: int = 66
    mem_temp: int = 74
    power_mw: int = 612_000
    sm_clock: int = 1980
    reasons: int = 0
    sbe: int = 3
    dbe: int = 0
    remapped: tuple[int, int, int, int] = (1, 0, 0, 0)
    pcie_replay: int = 2
    nvlink_crc: int = 11
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)


class FakeNvml:
    """Honours the subset of pynvml calls NvmlGpuReader makes, raising pynvml's own errors."""

    def __init__(self, devices: list[FakeDevice], *, library_missing: bool = False) -> None:
        self.devices = devices
        self.library_missing = library_missing
        self.events: list[tuple[int, int]] = []
        """Queued XIDs: (device index, code)."""
        self.initialized = False
        self.shutdown_called = False
        for name in dir(pynvml):
            if name.startswith(("NVML_", "nvmlClocks", "nvmlEventType")) or \
                    name.startswith("NVMLError"):
                setattr(self, name, getattr(pynvml, name))

    def _err(self, code: int) -> pynvml.NVMLError:
        return pynvml.NVMLError(code)

    def _dev(self, h: Any, what: str) -> FakeDevice:
        dev = self.devices[h]
        if dev.lost:
            raise self._err(pynvml.NVML_ERROR_GPU_IS_LOST)
        if what in dev.unsupported:
            raise self._err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return dev

    def nvmlInit(self) -> None:
        if self.library_missing:
            raise self._err(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.shutdown_called = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if not 0 <= i < len(self.devices):
            raise self._err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.devices[h].uuid

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=self._dev(h, "util").util, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(used=self._dev(h, "mem").mem_used, total=80 * 1024**3)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._dev(h, "temp").temp

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._dev(h, "power").power_mw

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        assert clock == pynvml.NVML_CLOCK_SM
        return self._dev(h, "clock").sm_clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._dev(h, "reasons").reasons

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        assert counter == pynvml.NVML_VOLATILE_ECC
        dev = self._dev(h, "ecc")
        return dev.sbe if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else dev.dbe

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return self._dev(h, "remap").remapped

    def nvmlDeviceGetPcieReplayCounter(self, h: int) -> int:
        return self._dev(h, "pcie").pcie_replay

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[int]) -> list[Any]:
        dev = self._dev(h, "fields")
        out = []
        for fid in ids:
            if fid == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                ok, val = "mem_temp" not in dev.unsupported, dev.mem_temp
            elif fid == pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL:
                ok, val = "nvlink" not in dev.unsupported, dev.nvlink_crc
            else:
                ok, val = False, 0
            out.append(SimpleNamespace(
                fieldId=fid, valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                nvmlReturn=pynvml.NVML_SUCCESS if ok else pynvml.NVML_ERROR_NOT_SUPPORTED,
                value=SimpleNamespace(ullVal=val, uiVal=val, dVal=float(val))))
        return out

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: int, types: int, event_set: str) -> None:
        assert types & pynvml.nvmlEventTypeXidCriticalError

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Any:
        if not self.events:
            raise self._err(pynvml.NVML_ERROR_TIMEOUT)
        index, code = self.events.pop(0)
        return SimpleNamespace(device=index, eventType=pynvml.nvmlEventTypeXidCriticalError,
                               eventData=code)

    def nvmlEventSetFree(self, event_set: str) -> None:
        pass
