"""A held-out synthetic GPU-fleet trace (fleet-trace/1), written apart from the main generator.

Its purpose is to score a failure predictor on data shaped by other hands: every process below
is this file's own reading of how GPU fleets degrade and how exporters sample them.

Design, and the public evidence behind each choice:

* Failure mix. The Llama 3 paper (Dubey et al. 2024, table 5) counts 419 unexpected
  interruptions in 54 days on 16,384 H100s: faulty GPU 30.1 %, GPU HBM3 memory 17.2 %,
  network switch/cable 8.4 %, GPU SRAM 4.5 %, GPU system processor 4.1 %, NIC 1.7 %, thermal
  interface/sensor 1.4 %, power supply 0.7 %. The StepFun InfiniteHBD trace (584 node faults
  on 400 servers over 348 days, ../shared/data/stepfun-fault-trace) adds the node side: fan
  5.7 %, power supply 4.5 %, parameter-plane cable 6.9 %, NIC 5.1 %, and within GPU faults
  DBE > threshold 38 %, "device unknown error" 25 %, PCIe link width low 16 %. ``_KINDS``
  blends the two (HBM/ECC largest, then abrupt GPU faults, PCIe, NVLink, cable, fan, PSU, NIC).
* Rate. Llama 3 is ~0.004 interruptions per node-day; this fleet runs ~50x hotter
  (0.19 per node-day) so that a 2-day, 32-48 node trace holds enough failures to score.
* Repair. A failed node leaves the trace for a repair time drawn from the StepFun repair
  distribution (all classes pooled: 10 % under 13 min, median 0.85 days, 90 % under 13 days),
  then returns rebooted: volatile counters start again from 0 and a replaced GPU loses its
  remapped rows.
* Precursors. About two thirds of failures carry one, with a lognormal lead (median 0.7-3 h
  by kind, clipped to 10 min-9 h); the rest (GSP hangs, SRAM faults, abrupt bus drops,
  motherboard/CPU) give no warning, precursor_s=0. Signatures follow NVIDIA's XID catalogue
  and the row-remapping documentation: SBE growth, row remaps (XID 63) and XID 92 before a
  DBE (XID 48 then 94/95); rising PCIe replays before XID 79; NVLink CRC bursts before XID 74;
  a failing thermal interface that heats one GPU until it throttles, slows its clocks and makes
  the node a straggler before XID 79; a fan that heats a whole node; a PSU that trips the
  power brake (throttle.power) in bursts; a cable that flaps, and a NIC that trains down to a
  lower speed, both visible only in link probes (and in a slower collective).
* Visibility depends on the workload: ECC errors scale with memory traffic, NVLink CRC errors
  only appear while collectives run, heat only shows under load. Cable, PCIe and NVLink faults
  are intermittent: bursts whose duty rises towards the failure.
* Confounders, never followed by a failure on that entity: GPUs with a steady benign SBE or
  PCIe replay rate, SBE/CRC bursts that pass (some trip XID 92 or a benign remap), GPUs
  carrying old remapped rows, rack cooling excursions that throttle hot slots, job-wide NCCL
  stalls (utilisation stays at 100 % while power drops), checkpoint and eval phases, job
  restarts after any failure or application crash (XID 13/31/43 then 45), maintenance reboots
  that reset counters, exporter gaps and dropped scrapes, chronically slow power-capped nodes,
  and network congestion that hits many links at once.
* Sampling like a real exporter: each node scrapes at its own offset with jitter, integer °C
  temperatures and percent utilisation, an A100-PCIe SKU that reports no HBM temperature, link
  probes every minute over a ring-plus-chord peer set.
* Labels. failures.csv's ``kind`` is fleet-trace.md's ``gpu``, ``link`` (cable, NIC) or
  ``node`` (fan, PSU, board); the mechanism of each row is in meta.json's ``mechanisms``.
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.signal import lfilter

from collector.fleet_trace import FleetTrace, TraceMeta, write_trace
from collector.metrics import SBE_RATE_WINDOW_S, SBE_RATE_XID_PER_MIN

GPUS_PER_NODE = 8
START = 1_725_000_000.0
"""Trace start (Unix seconds); fixed so that a seed alone decides the trace."""
FAIL_RATE_PER_NODE_DAY = 0.19
HOUR = 3600.0
DAY = 86400.0
APP_XIDS = (13, 31, 43)


@dataclass(frozen=True, kw_only=True)
class KindSpec:
    """How one failure kind is drawn."""

    weight: float
    """Share of failures."""
    gpu_level: bool
    """True when one GPU fails, False when the node or its network does."""
    p_precursor: float
    """Probability that a precursor runs before it."""
    lead_median_s: float
    """Median precursor lead (lognormal, sigma 0.8)."""


_KINDS: dict[str, KindSpec] = {
    "ecc": KindSpec(weight=0.25, gpu_level=True, p_precursor=0.92, lead_median_s=3 * HOUR),
    "gpu": KindSpec(weight=0.12, gpu_level=True, p_precursor=0.0, lead_median_s=0.0),
    "pcie": KindSpec(weight=0.11, gpu_level=True, p_precursor=0.85, lead_median_s=1 * HOUR),
    "nvlink": KindSpec(weight=0.10, gpu_level=True, p_precursor=0.85, lead_median_s=2 * HOUR),
    "thermal": KindSpec(weight=0.09, gpu_level=True, p_precursor=0.90, lead_median_s=1 * HOUR),
    "cable": KindSpec(weight=0.11, gpu_level=False, p_precursor=0.80, lead_median_s=2 * HOUR),
    "nic": KindSpec(weight=0.06, gpu_level=False, p_precursor=0.75, lead_median_s=1.5 * HOUR),
    "fan": KindSpec(weight=0.06, gpu_level=False, p_precursor=0.85, lead_median_s=1.5 * HOUR),
    "psu": KindSpec(weight=0.06, gpu_level=False, p_precursor=0.60, lead_median_s=0.7 * HOUR),
    "node": KindSpec(weight=0.04, gpu_level=False, p_precursor=0.0, lead_median_s=0.0),
}

LINK_KINDS = frozenset({"cable", "nic"})
"""Kinds whose failure is the node's network (fleet-trace.md's ``link``)."""


def _scope(kind: str) -> str:
    """fleet-trace.md's failure ``kind`` (``gpu``, ``link`` or ``node``) of a mechanism; the
    mechanism itself goes to meta.json's ``mechanisms``, one per failure row."""
    if _KINDS[kind].gpu_level:
        return "gpu"
    return "link" if kind in LINK_KINDS else "node"


# StepFun repair times, all classes pooled (days): quantile -> duration.
_REPAIR_Q = np.array([0.0, 0.10, 0.25, 0.50, 0.75, 0.90, 1.0])
_REPAIR_D = np.array([0.004, 0.009, 0.086, 0.85, 3.16, 12.97, 40.0])


@dataclass(frozen=True, kw_only=True)
class SkuSpec:
    """What a GPU model reports and how hot and fast it runs."""

    tdp_w: float
    clock_max_mhz: float
    slowdown_c: float
    heat_c: float
    memory_bytes: float
    reports_hbm_temp: bool
    nic_bytes_s: float


_SKUS = {
    "H100-SXM": SkuSpec(tdp_w=700.0, clock_max_mhz=1980.0, slowdown_c=87.0, heat_c=44.0,
                        memory_bytes=80e9, reports_hbm_temp=True, nic_bytes_s=50e9),
    "A100-PCIe": SkuSpec(tdp_w=300.0, clock_max_mhz=1410.0, slowdown_c=85.0, heat_c=38.0,
                         memory_bytes=80e9, reports_hbm_temp=False, nic_bytes_s=25e9),
}


@dataclass(frozen=True, kw_only=True)
class Failure:
    """One ground-truth failure (times relative to the trace start)."""

    t: float
    node: int
    gpu: int
    kind: str
    precursor_s: float


class _Fleet:
    """Holds the time grid and the per-GPU arrays while signatures are layered onto them."""

    def __init__(self, seed: int, nodes: int, days: float, interval_s: float) -> None:
        self.rng = np.random.default_rng(seed)
        self.n, self.g, self.iv = nodes, GPUS_PER_NODE, interval_s
        self.dur = days * DAY
        self.T = max(2, round(self.dur / interval_s))
        self.t = np.arange(self.T) * interval_s
        rng = self.rng
        self.names = [f"gpu-node-{i:03d}" for i in range(nodes)]
        self.rack = np.arange(nodes) // 4
        self.sku = ["A100-PCIe" if rng.random() < 0.25 else "H100-SXM" for _ in range(nodes)]
        self.job = (np.arange(nodes) >= nodes // 2).astype(int) if nodes >= 16 else np.zeros(
            nodes, dtype=int)
        shape = (nodes, self.g, self.T)
        self.up = np.ones((nodes, self.T), dtype=bool)
        self.load = np.zeros((2, self.T))  # per job: memory/compute intensity
        self.util = np.zeros((2, self.T))
        self.alive = np.zeros((2, self.T), dtype=bool)  # job holds its memory
        self.training = np.zeros((2, self.T), dtype=bool)
        self.ckpt = np.zeros((2, self.T), dtype=bool)
        self.stall = np.zeros((2, self.T), dtype=bool)
        self.heat_extra = np.zeros(shape)
        self.power_brake = np.zeros(shape, dtype=bool)
        self.power_cap = np.ones(nodes)
        self.sbe_rate = np.zeros(shape)  # expected SBE per sample at full memory traffic
        self.sbe_burst = np.zeros(shape)  # SBE per sample independent of load
        self.pcie = np.zeros(shape)
        self.crc = np.zeros(shape)  # expected CRC errors per sample while collectives run
        self.dbe = np.zeros(shape)
        self.remap_c = np.zeros(shape)
        self.remap_u = np.zeros(shape)
        self.pending = np.zeros(shape, dtype=bool)
        self.resets: list[tuple[int, int, bool]] = []  # (node, sample, gpu replaced mask idx)
        self.replaced: list[tuple[int, int, int]] = []  # (node, gpu, sample)
        self.link_bw = np.zeros((nodes, self.T))  # node-side probe bandwidth factor loss 0..1
        self.link_lat = np.zeros((nodes, self.T))  # node-side latency multiplier excess
        self.link_drop = np.zeros((nodes, self.T))  # node-side probe loss probability
        self.events: list[tuple[float, int, int, int]] = []
        self.failures: list[Failure] = []
        self.busy: list[tuple[int, float, float]] = []  # (node, t0, t1) failure horizons

    # -- helpers ---------------------------------------------------------------------------
    def span(self, t0: float, t1: float) -> slice:
        k0 = int(np.clip(np.ceil(t0 / self.iv), 0, self.T))
        k1 = int(np.clip(np.ceil(t1 / self.iv), 0, self.T))
        return slice(k0, k1)

    def k_of(self, t: float) -> int:
        return int(np.clip(np.ceil(t / self.iv), 0, self.T - 1))

    def quiet(self, node: int, t0: float, t1: float) -> bool:
        """No failure on ``node`` from ``t0`` until 8 h after ``t1`` and the node is up."""
        for n, f0, f1 in self.busy:
            if n == node and f0 < t1 + 8 * HOUR and f1 > t0:
                return False
        return bool(self.up[node, self.span(t0, t1)].all())

    def flaps(self, n: int, duty: np.ndarray, block_s: float) -> np.ndarray:
        """On/off episodes of ``block_s`` whose chance of being on follows ``duty``."""
        b = max(1, round(block_s / self.iv))
        nb = -(-n // b)
        centre = duty[np.minimum(np.arange(nb) * b + b // 2, n - 1)] if n else duty[:0]
        on = self.rng.random(nb) < centre
        return np.repeat(on, b)[:n]

    def xid(self, t: float, node: int, gpu: int, code: int) -> None:
        if 0.0 <= t <= self.dur:
            self.events.append((t, node, gpu, code))


def _schedule_failures(f: _Fleet) -> None:
    rng = f.rng
    kinds = list(_KINDS)
    w = np.array([_KINDS[k].weight for k in kinds])
    w /= w.sum()
    for node in range(f.n):
        t = rng.exponential(DAY / FAIL_RATE_PER_NODE_DAY)
        back = 0.0
        while t < f.dur:
            if t < 0.5 * HOUR:
                t += rng.exponential(DAY / FAIL_RATE_PER_NODE_DAY)
                continue
            kind = str(rng.choice(kinds, p=w))
            spec = _KINDS[kind]
            lead = 0.0
            if rng.random() < spec.p_precursor:
                lead = float(np.clip(spec.lead_median_s * np.exp(rng.normal(0, 0.8)),
                                     600.0, 9 * HOUR))
                if back > 0:  # a precursor cannot run while the node was out for repair
                    lead = max(0.0, min(lead, t - back - 300.0))
            gpu = int(rng.integers(f.g)) if spec.gpu_level else -1
            f.failures.append(Failure(t=t, node=node, gpu=gpu, kind=kind, precursor_s=lead))
            f.busy.append((node, t - max(lead, 0.0) - 8 * HOUR, t))
            repair = float(np.interp(rng.random(), _REPAIR_Q, _REPAIR_D)) * DAY
            repair = max(repair, 600.0)
            f.up[node, f.span(t, t + repair)] = False
            back = t + repair
            if back < f.dur:
                f.resets.append((node, f.k_of(back), True))
                if gpu >= 0:
                    f.replaced.append((node, gpu, f.k_of(back)))
            t = back + rng.exponential(DAY / FAIL_RATE_PER_NODE_DAY)


def _workload(f: _Fleet) -> None:
    """Per-job phases: train, checkpoint, eval, stalls, restarts after failures and crashes."""
    rng = f.rng
    f.load[:] = 1.0
    f.util[:] = 0.97
    f.alive[:] = True
    f.training[:] = True
    for j in range(2):
        t = rng.uniform(0, 40 * 60)
        while t < f.dur:  # checkpoints every 25-45 min
            s = f.span(t, t + rng.uniform(60, 200))
            f.load[j, s], f.util[j, s], f.ckpt[j, s] = 0.12, 0.15, True
            t += rng.uniform(25, 45) * 60
        t = rng.uniform(1, 3) * HOUR
        while t < f.dur:  # evals every 3-4 h
            s = f.span(t, t + rng.uniform(6, 12) * 60)
            f.load[j, s], f.util[j, s], f.training[j, s] = 0.55, 0.6, False
            t += rng.uniform(3, 4) * HOUR
        for _ in range(max(1, rng.poisson(1.0 * f.dur / DAY))):  # NCCL stalls
            t0 = rng.uniform(0.05, 0.95) * f.dur
            s = f.span(t0, t0 + rng.uniform(4, 15) * 60)
            # Spinning NCCL kernels keep utilisation at 100 % while power falls.
            f.load[j, s], f.util[j, s], f.stall[j, s] = 0.3, 1.0, True
    restarts: list[tuple[int, float]] = [(int(f.job[x.node]), x.t) for x in f.failures]
    for j in range(2):
        members = np.flatnonzero(f.job == j)
        if not len(members):
            continue
        for _ in range(max(1, rng.poisson(0.8 * f.dur / DAY))):  # application crashes
            for _try in range(20):
                node = int(rng.choice(members))
                t0 = rng.uniform(0.05, 0.9) * f.dur
                if f.quiet(node, t0, t0 + 1800):
                    break
            else:
                continue
            gpus = rng.choice(f.g, size=int(rng.integers(1, 4)), replace=False)
            code = int(rng.choice(APP_XIDS))
            for gi in gpus:
                f.xid(t0 + rng.uniform(0, 2), node, int(gi), code)
                f.xid(t0 + rng.uniform(5, 30), node, int(gi), 45)
            restarts.append((j, t0 + 30))
    for j, t0 in restarts:
        s = f.span(t0, t0 + rng.uniform(8, 25) * 60)
        f.load[j, s], f.util[j, s], f.alive[j, s], f.training[j, s] = 0.0, 0.0, False, False
        f.stall[j, s] = f.ckpt[j, s] = False
        for member in np.flatnonzero(f.job == j):  # the killed job's ranks log XID 45
            if rng.random() < 0.1 and f.up[member, f.k_of(t0)]:
                f.xid(t0 + rng.uniform(2, 40), int(member), int(rng.integers(f.g)), 45)


def _precursor(f: _Fleet, x: Failure) -> None:
    """Layer the signature of failure ``x`` onto the arrays and log its XIDs."""
    rng, n, gi, tf = f.rng, x.node, x.gpu, x.t
    s = f.span(tf - x.precursor_s, tf)
    m = s.stop - s.start
    frac = (f.t[s] - (tf - x.precursor_s)) / max(x.precursor_s, 1.0)
    has = x.precursor_s > 0 and m > 0
    per_min = f.iv / 60.0
    if x.kind == "ecc":
        if has:
            lo, hi = rng.uniform(0.1, 0.8), rng.uniform(12, 60)
            f.sbe_rate[n, gi, s] += lo * (hi / lo) ** frac * per_min
            for tr in np.sort(tf - x.precursor_s * rng.uniform(0.0, 0.6, rng.integers(1, 4))):
                k = f.k_of(tr)
                f.remap_c[n, gi, k] += 1
                f.pending[n, gi, k:f.k_of(tf)] = True
                f.xid(tr, n, gi, 63)
        k = f.k_of(tf)
        f.dbe[n, gi, k] += 1
        f.remap_u[n, gi, k] += 1
        f.xid(tf, n, gi, 48)
        f.xid(tf + 1, n, gi, 94 if rng.random() < 0.6 else 95)
    elif x.kind == "gpu":
        f.xid(tf, n, gi, int(rng.choice([79, 119, 120, 48])))
    elif x.kind == "pcie":
        if has:
            on = f.flaps(m, 0.15 + 0.75 * frac, 300)
            f.pcie[n, gi, s] += on * rng.uniform(20, 80) * (0.05 + frac**2) * per_min * 4
        f.xid(tf, n, gi, 79)
    elif x.kind == "nvlink":
        if has:
            on = f.flaps(m, 0.2 + 0.7 * frac, 600)
            f.crc[n, gi, s] += on * rng.uniform(50, 400) * (0.1 + frac) * per_min
            if rng.random() < 0.35:
                f.xid(tf - x.precursor_s * rng.uniform(0.05, 0.4), n, gi, 74)
        f.xid(tf, n, gi, 74)
    elif x.kind == "thermal":
        if has:
            f.heat_extra[n, gi, s] += rng.uniform(14, 26) * frac**1.5
        f.xid(tf, n, gi, 79)
    elif x.kind == "fan":
        if has:
            f.heat_extra[n, :, s] += rng.uniform(9, 16) * frac[None, :] ** 1.2
    elif x.kind == "psu":
        if has:
            on = f.flaps(m, 0.1 + 0.6 * frac, 120)
            f.power_brake[n, :, s] |= on[None, :]
    elif x.kind == "cable" and has:
        on = f.flaps(m, 0.1 + 0.8 * frac, 240)
        f.link_bw[n, s] = np.maximum(f.link_bw[n, s], on * rng.uniform(0.6, 0.95))
        f.link_lat[n, s] += on * rng.uniform(3, 20)
        f.link_drop[n, s] = np.maximum(f.link_drop[n, s], on * 0.3)
    elif x.kind == "nic" and has:
        step = frac > rng.uniform(0.1, 0.5)  # link retrains to half speed, then gets erratic
        f.link_bw[n, s] = np.maximum(f.link_bw[n, s], step * 0.5 + frac * rng.uniform(0, 0.3))
        f.link_lat[n, s] += step * rng.uniform(0.5, 2.0) + frac * rng.uniform(0, 3)


def _confounders(f: _Fleet) -> None:
    """Benign look-alikes, each placed where no failure follows on that entity."""
    rng, per_min = f.rng, f.iv / 60.0
    fail_gpus = {(x.node, x.gpu) for x in f.failures}
    fail_nodes = {x.node for x in f.failures}
    healthy = [(n, gi) for n in range(f.n) for gi in range(f.g) if (n, gi) not in fail_gpus]
    order = rng.permutation(len(healthy))
    pick = itertools.cycle([healthy[i] for i in order])
    n_gpus = f.n * f.g
    # Steady benign SBE rates (weak cells that ECC corrects forever) and old remapped rows.
    for _ in range(max(1, round(0.02 * n_gpus))):
        n, gi = next(pick)
        f.sbe_rate[n, gi] += rng.uniform(0.3, 4.0) * per_min
    for _ in range(max(1, round(0.03 * n_gpus))):
        n, gi = next(pick)
        f.remap_c[n, gi, 0] += rng.integers(1, 5)
    for _ in range(max(1, round(0.03 * n_gpus))):  # marginal PCIe slots replay steadily
        n, gi = next(pick)
        f.pcie[n, gi] += rng.uniform(0.05, 0.5) * per_min
    for _ in range(max(1, round(0.03 * n_gpus))):  # benign NVLink CRC trickle
        n, gi = next(pick)
        f.crc[n, gi] += rng.uniform(0.5, 5) * per_min
    bursts = max(2, rng.poisson(0.15 * f.n * f.dur / DAY))
    for i in range(bursts):  # error bursts that pass
        for _try in range(20):
            n, gi = next(pick)
            t0 = rng.uniform(0.05, 0.9) * f.dur
            t1 = t0 + rng.uniform(3, 25) * 60
            if f.quiet(n, t0, t1):
                break
        else:
            continue
        s = f.span(t0, t1)
        if i % 3 == 2:
            f.crc[n, gi, s] += rng.uniform(100, 600) * per_min
        else:
            f.sbe_burst[n, gi, s] += rng.uniform(5, 40) * per_min
            if rng.random() < 0.3:
                f.remap_c[n, gi, s.start] += 1
                f.pending[n, gi, s.start:] = True
                f.xid(t0, n, gi, 63)
    # Chronically slow nodes: a lower power cap, healthy for the whole trace.
    for n in rng.permutation([i for i in range(f.n) if i not in fail_nodes])[:max(1, f.n // 20)]:
        f.power_cap[n] = rng.uniform(0.7, 0.82)
    # Maintenance reboots / driver reloads: a gap, then counters from 0.
    for _ in range(max(1, rng.poisson(0.08 * f.n * f.dur / DAY))):
        for _try in range(20):
            n = int(rng.integers(f.n))
            t0 = rng.uniform(0.1, 0.9) * f.dur
            t1 = t0 + rng.uniform(5, 15) * 60
            if f.quiet(n, t0, t1):
                f.up[n, f.span(t0, t1)] = False
                f.resets.append((n, f.k_of(t1), False))
                break


def _apply_resets(f: _Fleet, cum: np.ndarray, persistent: bool) -> np.ndarray:
    """Counters restart at 0 after a reboot (volatile) or a GPU swap (persistent ones)."""
    if persistent:
        for n, gi, k in sorted(f.replaced, key=lambda r: r[2]):
            cum[n, gi, k:] -= cum[n, gi, k - 1] if k > 0 else 0
        return cum
    for n, k, _ in sorted(f.resets, key=lambda r: r[1]):
        if k > 0:
            cum[n, :, k:] -= cum[n, :, k - 1:k]
    return cum


def _gpu_frame(f: _Fleet) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """GPU telemetry rows, and the per-node scrape times and slowdown factor for node rows."""
    rng, n, g, T, iv = f.rng, f.n, f.g, f.T, f.iv
    job = f.job
    load = f.load[job][:, None, :] * (1 + rng.normal(0, 0.02, (n, g, T)))
    load = np.clip(load, 0, 1)
    util = np.clip(np.round(f.util[job][:, None, :] + rng.normal(0, 0.01, (n, g, T)), 2), 0, 1)
    sku = [_SKUS[s] for s in f.sku]
    tdp = np.array([s.tdp_w for s in sku])[:, None, None]
    clk_max = np.array([s.clock_max_mhz for s in sku])[:, None, None]
    slow_c = np.array([s.slowdown_c for s in sku])[:, None, None]
    heat = np.array([s.heat_c for s in sku])[:, None, None]
    # Rack inlet air: a slow drift, noise and cooling excursions that end without harm.
    racks = int(f.rack.max()) + 1
    inlet = 24 + rng.uniform(-2, 2, (racks, 1)) + 1.5 * np.sin(
        2 * np.pi * (f.t / DAY + rng.uniform(0, 1, (racks, 1))))
    for _ in range(max(1, rng.poisson(0.5 * racks * f.dur / DAY))):
        r = int(rng.integers(racks))
        t0 = rng.uniform(0, 0.95) * f.dur
        s = f.span(t0, t0 + rng.uniform(20, 70) * 60)
        bump = rng.uniform(6, 11)
        inlet[r, s] += bump * np.sin(np.linspace(0, np.pi, s.stop - s.start))
    slot = rng.uniform(0, 9, (n, g, 1))
    steady = inlet[f.rack][:, None, :] + slot + load * heat * (1 + f.heat_extra / 40) + \
        f.heat_extra * (0.3 + 0.7 * load)
    a = 1 - np.exp(-iv / 90.0)  # the heat sink's ~90 s time constant
    temp = lfilter([a], [1, a - 1], steady, axis=2, zi=steady[:, :, :1] * (1 - a))[0]
    temp = temp + rng.normal(0, 0.4, temp.shape)
    over = np.clip(temp - slow_c, 0, None)
    th_thermal = over > 0
    cap = f.power_cap[:, None, None] * tdp
    eff = rng.uniform(0.80, 0.95, (n, g, 1))
    power = 70 + load * (tdp - 70) * eff + rng.normal(0, 6, temp.shape)
    th_power = (power > cap * 0.97) | f.power_brake
    power = np.minimum(power, cap)
    power = np.where(f.power_brake, 0.5 * tdp, power)
    clock_f = 1 - 0.035 * over
    limited = np.where(f.power_brake, 0.55, np.sqrt(cap / tdp))
    clock_f = np.where(th_power, np.minimum(clock_f, limited), clock_f)
    clock_f = np.clip(clock_f, 0.3, 1)
    idle = load < 0.05
    clock = np.round(np.where(idle, 345.0, clk_max * clock_f) / 15) * 15
    slowdown = (1 / clock_f).max(axis=1)  # node straggles behind its slowest GPU
    mem_cap = np.array([s.memory_bytes for s in sku])[:, None, None]
    mem = np.where(f.alive[job][:, None, :], mem_cap * rng.uniform(0.86, 0.93, (n, g, 1)),
                   5e8) + rng.normal(0, 2e7, (n, g, T))
    # Counters. Memory traffic (load) gates ECC; collectives (training) gate NVLink CRCs.
    sbe_inc = rng.poisson(f.sbe_rate * (0.15 + 0.85 * load) + f.sbe_burst).astype(float)
    pcie_inc = rng.poisson(f.pcie).astype(float)
    crc_on = f.training[job][:, None, :] & ~f.stall[job][:, None, :]
    crc_inc = rng.poisson(f.crc * crc_on).astype(float)
    sbe_inc *= f.up[:, None, :]
    cols: dict[str, np.ndarray] = {}
    boot = rng.random((n, g, 1)) < 0.1  # some GPUs carry errors since the last reboot
    sbe = _apply_resets(f, np.cumsum(sbe_inc, axis=2) + boot * rng.integers(1, 40, (n, g, 1)),
                        False)
    _xid92(f, sbe_inc)
    cols["gpu.utilization"] = util
    cols["gpu.memory.used"] = np.round(mem)
    cols["gpu.temperature"] = np.round(temp)
    hbm = np.round(temp + 5 + rng.normal(0, 0.5, temp.shape))
    no_hbm = np.array([not s.reports_hbm_temp for s in sku])
    hbm[no_hbm] = np.nan
    cols["gpu.memory.temperature"] = hbm
    cols["gpu.power"] = np.round(power, 2)
    cols["gpu.clock.sm"] = clock
    cols["gpu.throttle.thermal"] = th_thermal.astype(float)
    cols["gpu.throttle.power"] = th_power.astype(float)
    cols["gpu.ecc.sbe"] = sbe
    cols["gpu.ecc.dbe"] = _apply_resets(f, np.cumsum(f.dbe, axis=2), False)
    cols["gpu.rows.remapped.correctable"] = _apply_resets(f, np.cumsum(f.remap_c, axis=2), True)
    cols["gpu.rows.remapped.uncorrectable"] = _apply_resets(
        f, np.cumsum(f.remap_u, axis=2), True)
    pending = f.pending.copy()
    for node, k, _ in f.resets:
        pending[node, :, k:] = False
    cols["gpu.rows.remap.pending"] = pending.astype(float)
    cols["gpu.pcie.replay"] = _apply_resets(f, np.cumsum(pcie_inc, axis=2), False)
    cols["gpu.nvlink.crc_errors"] = _apply_resets(f, np.cumsum(crc_inc, axis=2), False)
    # Scrape timing: each node's exporter has its own phase and jitter; gaps drop rows.
    scrape = f.t[None, :] + rng.uniform(0, 0.4 * iv, (n, 1)) + np.clip(
        rng.normal(0, 0.04 * iv, (n, T)), -0.2 * iv, 0.2 * iv)
    keep = f.up.copy()
    for _ in range(rng.poisson(1.5 * f.n * f.dur / DAY)):
        node = int(rng.integers(n))
        t0 = rng.uniform(0, f.dur)
        keep[node, f.span(t0, t0 + float(np.clip(rng.lognormal(np.log(240), 0.8), 60, 2400)))] \
            = False
    ts = scrape[:, None, :] + rng.uniform(0, 0.05, (n, g, 1))
    mask = keep[:, None, :] & (rng.random((n, g, T)) > 0.003)
    idx = np.nonzero(mask.transpose(2, 0, 1))  # time-major order keeps rows near sorted
    def take(a: np.ndarray) -> np.ndarray:
        return a.transpose(2, 0, 1)[idx]
    names = np.array(f.names, dtype=object)
    frame = pd.DataFrame({"ts": START + take(ts), "node": names[idx[1]], "gpu": idx[2]})
    for name, arr in cols.items():
        frame[name] = take(np.broadcast_to(arr, (n, g, T)).astype(float))
    frame = frame.sort_values("ts", kind="stable").reset_index(drop=True)
    return frame, np.where(keep, scrape, np.nan), slowdown


def _xid92(f: _Fleet, sbe_inc: np.ndarray) -> None:
    """XID 92 when the SBE count within the driver's window crosses its threshold."""
    w = max(1, round(SBE_RATE_WINDOW_S / f.iv))
    c = np.cumsum(sbe_inc, axis=2)
    win = c - np.concatenate([np.zeros_like(c[:, :, :w]), c[:, :, :-w]], axis=2)
    hot = win >= SBE_RATE_XID_PER_MIN * SBE_RATE_WINDOW_S / 60.0
    rise = hot & ~np.concatenate([np.zeros_like(hot[:, :, :1]), hot[:, :, :-1]], axis=2)
    last: dict[tuple[int, int], float] = {}
    for n, gi, k in zip(*np.nonzero(rise), strict=True):
        key, t = (int(n), int(gi)), float(f.t[k])
        if t - last.get(key, -1e9) >= 600:  # the driver rate-limits repeats
            f.xid(t - f.rng.uniform(0, f.iv * 0.9), *key, 92)
            last[key] = t


def _node_frame(f: _Fleet, scrape: np.ndarray, slowdown: np.ndarray) -> pd.DataFrame:
    rng, n, T = f.rng, f.n, f.T
    base_compute = np.array([rng.uniform(2.5, 4.0), rng.uniform(2.5, 4.0)])[f.job][:, None]
    base_coll = np.array([rng.uniform(0.6, 1.2), rng.uniform(0.6, 1.2)])
    compute = base_compute * slowdown * (1 + rng.normal(0, 0.01, (n, T)))
    ckpt = f.ckpt[f.job]
    compute = np.where(ckpt, compute * rng.uniform(1.8, 3.0, (n, 1)), compute)
    # Congestion events and degraded node links slow the whole job's collectives.
    congest = np.zeros(T)
    for _ in range(max(1, rng.poisson(3 * f.dur / DAY))):
        t0 = rng.uniform(0, 0.97) * f.dur
        congest[f.span(t0, t0 + rng.uniform(3, 15) * 60)] = rng.uniform(0.3, 0.6)
    step = np.full((n, T), np.nan)
    for j in range(2):
        members = np.flatnonzero(f.job == j)
        if not len(members):
            continue
        live = f.up[members]
        net = 1 + 2 * congest + f.link_bw[members].max(axis=0) * 1.5
        slowest = np.where(live, compute[members], 0).max(axis=0)
        coll = base_coll[j] * net * (1 + rng.normal(0, 0.03, T))
        s = slowest + coll
        s = np.where(f.stall[j], rng.uniform(30, 300), s)
        step[members] = s
    ok = f.training[f.job] & np.isfinite(scrape)
    rows = np.nonzero(ok.T)
    step_v = step.T[rows] * (1 + rng.normal(0, 0.005, len(rows[0])))
    comp_v = np.minimum(compute.T[rows], step_v)
    frame = pd.DataFrame({
        "ts": START + scrape.T[rows] + 0.1,
        "node": np.array(f.names, dtype=object)[rows[1]],
        "train.step.duration": np.round(step_v, 4),
        "train.compute.duration": np.round(comp_v, 4),
        "train.collective.duration": np.round(step_v - comp_v, 4),
    })
    return frame.sort_values("ts", kind="stable").reset_index(drop=True)


def _link_frame(f: _Fleet) -> pd.DataFrame:
    rng, n = f.rng, f.n
    if n < 2:
        return pd.DataFrame(columns=["ts", "src", "dst", "net.link.bandwidth", "net.link.latency"])
    pairs = sorted({(i, (i + d) % n) for i in range(n) for d in (1, n - 1, n // 2)
                    if (i + d) % n != i})
    src = np.array([p[0] for p in pairs])
    dst = np.array([p[1] for p in pairs])
    period = max(60.0, f.iv)
    kp = np.arange(int(f.dur // period))
    tk = np.minimum((kp * period / f.iv).astype(int), f.T - 1)
    nic = np.array([_SKUS[s].nic_bytes_s for s in f.sku])
    base = np.minimum(nic[src], nic[dst])[:, None] * rng.uniform(0.9, 0.96, (len(pairs), 1))
    loss = np.maximum(f.link_bw[src][:, tk], f.link_bw[dst][:, tk])
    bw = base * (1 - loss) * (1 + rng.normal(0, 0.015, (len(pairs), len(kp))))
    lat = rng.uniform(3e-6, 6e-6, (len(pairs), 1)) * rng.lognormal(0, 0.08, bw.shape)
    lat *= 1 + f.link_lat[src][:, tk] + f.link_lat[dst][:, tk]
    spikes = rng.random(bw.shape) < 0.004  # lone slow probes: a busy CPU, an ARP refresh
    lat = np.where(spikes, lat * rng.uniform(3, 10, bw.shape), lat)
    for _ in range(max(1, rng.poisson(3 * f.dur / DAY))):  # congestion on many links at once
        t0 = rng.uniform(0, 0.97) * f.dur
        s = slice(int(t0 // period), int((t0 + rng.uniform(3, 15) * 60) // period) + 1)
        hit = rng.random(len(pairs)) < rng.uniform(0.4, 0.8)
        bw[hit, s] *= rng.uniform(0.35, 0.7)
        lat[hit, s] *= rng.uniform(2, 6)
    drop = np.maximum(f.link_drop[src][:, tk], f.link_drop[dst][:, tk]) + 0.003
    keep = f.up[src][:, tk] & f.up[dst][:, tk] & (rng.random(bw.shape) > drop)
    ts = kp[None, :] * period + rng.uniform(0, 20, (len(pairs), 1)) + rng.uniform(
        0, 2, bw.shape)
    r = np.nonzero(keep.T)
    names = np.array(f.names, dtype=object)
    frame = pd.DataFrame({
        "ts": START + ts.T[r],
        "src": names[src[r[1]]],
        "dst": names[dst[r[1]]],
        "net.link.bandwidth": np.round(bw.T[r], -3),
        "net.link.latency": lat.T[r],
    })
    return frame.sort_values("ts", kind="stable").reset_index(drop=True)


def generate(seed: int, nodes: int = 32, days: float = 2.0, interval_s: float = 30.0
             ) -> FleetTrace:
    """A complete synthetic fleet trace with ground-truth failures; deterministic per seed."""
    if nodes < 1:
        raise ValueError(f"nodes={nodes} must be >= 1")
    if not days > 0:
        raise ValueError(f"days={days} must be > 0")
    if not interval_s > 0:
        raise ValueError(f"interval_s={interval_s} must be > 0")
    f = _Fleet(seed, nodes, days, interval_s)
    _schedule_failures(f)
    _workload(f)
    for x in f.failures:
        _precursor(f, x)
    _confounders(f)
    gpu, scrape, slowdown = _gpu_frame(f)
    node = _node_frame(f, scrape, slowdown)
    links = _link_frame(f)
    names = np.array(f.names, dtype=object)
    ev = sorted(f.events)
    events = pd.DataFrame({
        "ts": [START + e[0] for e in ev],
        "node": [names[e[1]] for e in ev],
        "gpu": np.array([e[2] for e in ev], dtype="int64"),
        "kind": ["xid"] * len(ev),
        "code": np.array([e[3] for e in ev], dtype="int64"),
    })
    fl = sorted(f.failures, key=lambda x: x.t)
    failures = pd.DataFrame({
        "ts": [START + x.t for x in fl],
        "node": [names[x.node] for x in fl],
        "gpu": np.array([x.gpu for x in fl], dtype="int64"),
        "kind": [_scope(x.kind) for x in fl],
        "precursor_s": [round(x.precursor_s, 1) for x in fl],
    })
    meta = TraceMeta(start=START, end=START + f.dur, interval_s=interval_s,
                     nodes=tuple(f.names), gpus_per_node=GPUS_PER_NODE,
                     extra={"generator": "benchmarks/fifth_generator.py", "seed": seed,
                            "mechanisms": [x.kind for x in fl]})
    return FleetTrace(meta=meta, gpu=gpu, node=node, links=links, events=events,
                      failures=failures)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out_dir", type=Path, help="directory to write the fleet trace into")
    parser.add_argument("--seed", type=int, default=0, help="random seed (same seed, same trace)")
    parser.add_argument("--nodes", type=int, default=32, help="number of 8-GPU nodes")
    parser.add_argument("--days", type=float, default=2.0, help="length of the trace in days")
    parser.add_argument("--interval", type=float, default=30.0,
                        help="nominal sampling interval in seconds")
    args = parser.parse_args(argv)
    trace = generate(args.seed, nodes=args.nodes, days=args.days, interval_s=args.interval)
    write_trace(args.out_dir, trace)
    fl = trace.failures if trace.failures is not None else pd.DataFrame()
    print(f"wrote {args.out_dir}: {len(trace.gpu)} GPU rows, {len(trace.links)} probes, "
          f"{len(trace.events)} events, {len(fl)} failures "
          f"({int((fl['precursor_s'] > 0).sum()) if len(fl) else 0} with a precursor)")


if __name__ == "__main__":
    main()
