"""`SimulatedGpuReader`: realistic, seeded H100-like GPU telemetry for machines without a GPU
and for the demo, with injectable degradations that end in a failure at a set time."""

from __future__ import annotations

import math
import random
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from collector.metrics import SBE_RATE_WINDOW_S, SBE_RATE_XID_PER_MIN
from trainer.gpu import GpuDevice, GpuSample, XidEvent

DegradationKind = Literal["ecc", "thermal", "nvlink", "pcie", "power"]
KINDS: tuple[str, ...] = get_args(DegradationKind)
_FAILURE_XID: dict[str, int] = {"ecc": 48, "thermal": 79, "nvlink": 74, "pcie": 79, "power": 79}
"""The XID each kind ends with (48 double-bit ECC, 74 NVLink error, 79 fell off the bus)."""
_LOST_AT_FAILURE = frozenset({"thermal", "pcie", "power"})
_HBM_BYTES = 80 * 1024**3


@dataclass(frozen=True, kw_only=True, slots=True)
class Degradation:
    """A developing fault on one GPU: it starts at ``start_at`` and fails at ``failure_at``."""

    kind: DegradationKind
    gpu: int
    start_at: float
    """Unix seconds when the precursor begins."""
    failure_at: float
    """Unix seconds when the failure strikes (its XID is reported, the GPU may be lost)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"degradation kind={self.kind!r} must be one of {', '.join(KINDS)}")
        if self.failure_at <= self.start_at:
            raise ValueError(
                f"degradation failure_at={self.failure_at} must be after start_at={self.start_at}")

    def progress(self, t: float) -> float:
        """0 before the start, rising to 1 at the failure."""
        return min(1.0, max(0.0, (t - self.start_at) / (self.failure_at - self.start_at)))


@dataclass(kw_only=True)
class _GpuState:
    rng: random.Random
    temp_offset_c: float
    benign_sbe_per_s: float
    last_t: float
    counters: dict[str, float] = field(default_factory=dict)
    remap_pending: float = 0.0
    lost: bool = False
    xids_sent: set[str] = field(default_factory=set)
    sbe_seen: deque[tuple[float, float]] = field(default_factory=deque)
    """(time, single-bit count) over the last minute: what the driver's XID 92 reads."""


def node_seed(seed: int, node: str) -> int:
    """The seed of ``node``'s simulated GPUs in a run seeded ``seed``: the hook's own reader,
    the example trainer's injected one, and tests that rebuild a run all draw the same GPUs."""
    return seed ^ zlib.crc32(node.encode())


class SimulatedGpuReader:
    """Seeded simulated GPUs of one node; `inject` a degradation to watch it develop and fail."""

    source = "simulated"

    def __init__(self, *, gpus: int = 8, seed: int = 0, load: float = 0.9,
                 clock: Callable[[], float] = time.time) -> None:
        if gpus < 1:
            raise ValueError(f"simulated gpus={gpus} must be >= 1")
        if not 0.0 <= load <= 1.0:
            raise ValueError(f"simulated load={load} must be within 0..1")
        self.load = load
        self._clock = clock
        now = clock()
        master = random.Random(seed)
        self._devices = [GpuDevice(index=i, uuid=_uuid(master), name="NVIDIA H100 80GB HBM3 (sim)")
                         for i in range(gpus)]
        self._state = [
            _GpuState(rng=random.Random(master.getrandbits(32)),
                      temp_offset_c=master.uniform(-4.0, 4.0),
                      # A few healthy GPUs show a trickle of corrected errors; that is normal.
                      benign_sbe_per_s=(1 / 900 if master.random() < 0.25 else 0.0),
                      last_t=now,
                      counters=dict.fromkeys(_COUNTERS, 0.0))
            for _ in range(gpus)
        ]
        self._degradations: list[Degradation] = []
        self._pending_xids: list[XidEvent] = []

    def inject(self, kind: DegradationKind, *, gpu: int, start_at: float | None = None,
               failure_at: float | None = None, develop_s: float = 90.0) -> Degradation:
        """Start a degradation on ``gpu`` (now by default) that fails ``develop_s`` later."""
        if not 0 <= gpu < len(self._devices):
            raise ValueError(f"simulated gpu={gpu} is not one of 0..{len(self._devices) - 1}")
        start = self._clock() if start_at is None else start_at
        d = Degradation(kind=kind, gpu=gpu, start_at=start,
                        failure_at=start + develop_s if failure_at is None else failure_at)
        self._degradations.append(d)
        return d

    @property
    def degradations(self) -> tuple[Degradation, ...]:
        return tuple(self._degradations)

    @property
    def failure_at(self) -> float | None:
        """When the earliest injected failure strikes (None when nothing was injected)."""
        return min((d.failure_at for d in self._degradations), default=None)

    @property
    def failed(self) -> bool:
        """Whether an injected failure has struck by now."""
        at = self.failure_at
        return at is not None and self._clock() >= at

    def devices(self) -> Sequence[GpuDevice]:
        return tuple(self._devices)

    def sample(self) -> list[GpuSample]:
        t = self._clock()
        out = []
        for dev, st in zip(self._devices, self._state, strict=True):
            values = self._advance(dev, st, t)
            if values is not None:
                out.append(GpuSample(index=dev.index, uuid=dev.uuid, ts=t, values=values))
        return out

    def xids(self) -> list[XidEvent]:
        t = self._clock()
        for dev, st in zip(self._devices, self._state, strict=True):
            if not st.lost:
                self._advance(dev, st, t)
        out, self._pending_xids = self._pending_xids, []
        return out

    def close(self) -> None:
        """Nothing to release."""

    def _advance(self, dev: GpuDevice, st: _GpuState, t: float) -> dict[str, float] | None:
        if st.lost:
            return None
        dt = min(max(t - st.last_t, 0.0), 60.0)
        st.last_t = max(t, st.last_t)
        r = st.rng
        load = self.load * (1.0 + r.gauss(0, 0.02))
        temp = 33.0 + st.temp_offset_c + 34.0 * load + r.gauss(0, 0.6)
        power = 90.0 + 540.0 * load + r.gauss(0, 15.0)
        clock = 1980.0 - 15.0 * r.choice((0, 0, 0, 1, 2))
        thermal = power_thr = 0.0
        rates = {"gpu.ecc.sbe": st.benign_sbe_per_s, "gpu.pcie.replay": 0.0,
                 "gpu.nvlink.crc_errors": 0.0}
        for d in self._degradations:
            if d.gpu != dev.index or t < d.start_at:
                continue
            p = d.progress(t)
            if d.kind == "ecc":
                rates["gpu.ecc.sbe"] += 0.5 + 40.0 * p * p
                remaps = 0 if p < 0.35 else 1 if p < 0.6 else 2 if p < 0.8 else 4
                c = st.counters
                c["gpu.rows.remapped.correctable"] = max(c["gpu.rows.remapped.correctable"], remaps)
                if remaps:
                    self._xid(dev, st, t, "remap", 63)
            elif d.kind == "thermal":
                temp += 30.0 * p + r.gauss(0, 0.5 * p)
            elif d.kind == "nvlink":
                rates["gpu.nvlink.crc_errors"] += 2.0 + 600.0 * p * p
            elif d.kind == "pcie":
                rates["gpu.pcie.replay"] += 0.1 + 40.0 * p * p
            elif d.kind == "power":
                power += 160.0 * p * math.sin(t * 2.1 + r.uniform(0, math.pi)) + r.gauss(0, 40 * p)
                if r.random() < 0.8 * p:
                    power_thr = 1.0
                    clock -= 200.0 * p
            if t >= d.failure_at:
                self._fail(dev, st, t, d)
        if temp > 87.0:
            thermal = 1.0
            clock -= min(900.0, (temp - 85.0) * 45.0)
        for name, rate in rates.items():
            st.counters[name] += _events(r, rate * dt)
        # The driver flags a high single-bit rate from the counter, whatever its cause (as
        # predictor.signatures.sbe_rate_xids does for generated fleets): 10 or more in a minute.
        st.sbe_seen.append((t, st.counters["gpu.ecc.sbe"]))
        while st.sbe_seen[0][0] < t - SBE_RATE_WINDOW_S:
            st.sbe_seen.popleft()
        if st.counters["gpu.ecc.sbe"] - st.sbe_seen[0][1] >= SBE_RATE_XID_PER_MIN:
            self._xid(dev, st, t, "sbe-rate", 92)
        if st.lost:
            return None
        return {
            "gpu.utilization": min(1.0, max(0.0, load * 0.97)),
            "gpu.memory.used": float(int(_HBM_BYTES * (0.78 + 0.1 * self.load))),
            "gpu.temperature": round(temp),
            "gpu.memory.temperature": round(temp + 6.0 + r.gauss(0, 0.5)),
            "gpu.power": max(60.0, power),
            "gpu.clock.sm": clock,
            "gpu.throttle.thermal": thermal,
            "gpu.throttle.power": power_thr,
            **{name: st.counters[name] for name in _COUNTERS},
            "gpu.rows.remap.pending": st.remap_pending,
        }

    def _fail(self, dev: GpuDevice, st: _GpuState, t: float, d: Degradation) -> None:
        if f"fail-{d.kind}" in st.xids_sent:
            return
        if d.kind == "ecc":
            st.counters["gpu.ecc.dbe"] += 1
            st.counters["gpu.rows.remapped.uncorrectable"] += 1
            st.remap_pending = 1.0
        self._xid(dev, st, max(t, d.failure_at), f"fail-{d.kind}", _FAILURE_XID[d.kind])
        if d.kind in _LOST_AT_FAILURE:
            st.lost = True

    def _xid(self, dev: GpuDevice, st: _GpuState, t: float, key: str, code: int) -> None:
        if key not in st.xids_sent:
            st.xids_sent.add(key)
            self._pending_xids.append(XidEvent(index=dev.index, uuid=dev.uuid, ts=t, code=code))


_COUNTERS = ("gpu.ecc.sbe", "gpu.ecc.dbe", "gpu.rows.remapped.correctable",
             "gpu.rows.remapped.uncorrectable", "gpu.pcie.replay", "gpu.nvlink.crc_errors")


def _events(r: random.Random, expected: float) -> int:
    """A Poisson-distributed count with the given mean (normal approximation when large)."""
    if expected <= 0:
        return 0
    if expected > 30:
        return max(0, round(r.gauss(expected, math.sqrt(expected))))
    k, p, limit = 0, 1.0, math.exp(-expected)
    while True:
        p *= r.random()
        if p <= limit:
            return k
        k += 1


def _uuid(r: random.Random) -> str:
    h = f"{r.getrandbits(128):032x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
