"""A fourth, held-out fleet-trace generator: latent degradation with hazard-timed failures.

    python benchmarks/fourth_generator.py OUT_DIR --seed 7 --nodes 32 --days 2 --interval 30

Written from ../shared/fleet-trace.md, ../shared/metrics.md, ``collector.fleet_trace`` and public
failure data only, never from the predictor or the other generators, so that scoring the
predictor on its traces tests whether it generalises. Design choices:

* No ramps. A degrading component carries a latent state s(t) >= 0, a regime-switching jump
  process on a 60-s grid: while *active* it drifts up and takes compound-Poisson jumps, while
  *dormant* it heals; plus diffusion, reflected at 0. Precursors therefore plateau, dip and resume.
* The failure time is not chosen first: the component fails when its cumulative hazard
  exp(kappa (s - 1)) / scale passes an Exp(1) draw, so some fail soon after a weak rise and
  others linger. ``precursor_s`` is the time from the state's onset to that failure. Some
  degradations heal and never fail (confounders built by the same process).
* Observations are counts: corrected ECC errors, PCIe replays, NVLink CRC errors are Poisson with a
  gamma-mixed (bursty) rate driven by strength * s**1.5; strength is log-normal and ~30% are weak.
  Row remaps thin the ECC errors (XID 63 each, remap pending until a reset); XID 92 follows the
  driver rule of ``collector.metrics`` (10 corrected errors within 60 s) for every GPU alike.
* Heterogeneous fleets: per seed A100-SXM4-80GB, H100-SXM5 or H200 clocks, power, temperatures;
  4 or 8 GPUs a node, 4-8 nodes a rack; some optional GPU columns absent for the whole fleet.
* Physics-like coupling: power follows each job's phase (train, checkpoint, eval, NCCL hang with
  100% utilisation at low power, storage stall, restart reload, post-repair burn-in);
  temperature is a first-order thermal lag of power above the rack inlet; clocks fall with GPU
  Boost warming, power capping, PSU power brake and thermal slowdown. Synchronous training makes
  a step the slowest node's compute plus communication, so a throttled GPU shows as a node with
  high ``train.compute.duration`` and peers with high ``train.collective.duration``.
* Several concurrent jobs and a spare pool. A failure hangs its job until the watchdog fires
  (XID 45 on survivors), then the job reloads and carries on without the node.
* Repair times follow the StepFun InfiniteHBD trace (../shared/data/stepfun-fault-trace, 584
  faults over 348 days): per-kind quantiles below, at least 15 minutes. A repaired node burns in,
  then idles; its volatile counters restart at 0, row-remap counters (InfoROM) only when the GPU
  was replaced.
* Link probes run on their own period (not a multiple of the GPU interval) in a rotating ring:
  each round every node probes one peer. NIC/cable degradation shows only there (bandwidth
  down in steps as the link retrains, latency and retransmission spikes up).
* Sampling: per-node phase and jitter, exporter gaps, a fleet-wide scrape outage, lost rows.
* Confounders: steady benign error rates, error bursts that pass, healed degradations, rack
  cooling events, leaf-switch congestion, job stalls, checkpoints, evals, restarts after other
  failures and after software crashes (XID 13/31/43/45), maintenance reboots (counter resets),
  power-capped chronically slow nodes, a chronically slow NIC, routine single row remaps.

Failure mix: Llama 3 (Dubey et al. 2024, table 5; 419 interruptions in 54 days on 16,384 H100:
faulty GPU 30.1%, HBM3 17.2%, network switch/cable 8.4%, GPU SRAM 4.5%, GPU system processor
4.1%, NIC 1.7%) and StepFun (GPU 27%, cable and NIC 12%, fan and PSU 10% of faults; 60 of 158
GPU faults DBE over threshold, 25 PCIe link width low). Failures are over-represented (~0.28 a
node-day) so that a small fleet yields enough to score; ~70% have a precursor.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.signal import lfilter, lfilter_zi

from collector.fleet_trace import FleetTrace, TraceMeta, write_trace
from collector.metrics import GPU_COLUMNS, SBE_RATE_WINDOW_S, SBE_RATE_XID_PER_MIN

FloatA = npt.NDArray[np.float64]
IntA = npt.NDArray[np.int64]
BoolA = npt.NDArray[np.bool_]
Kind = Literal["gpu", "link", "node"]
Channel = Literal["ecc", "thermal", "pcie", "nvlink", "nic", "fan", "psu", "none"]

DAY_S = 86_400.0
MIB = 1 << 20
LATENT_DT_S = 60.0
HAZARD_KAPPA = 3.5
OBS_EXPONENT = 1.5
P_PRECURSOR = 0.7
FAILURES_PER_NODE_DAY = 0.28
RATE_PER_MIN = {"ecc": 30.0, "pcie": 20.0, "nvlink": 400.0}
"""Counts per minute a channel adds at observed degradation x = 1."""
APP_XIDS = (13, 31, 43, 45)


class Phase(IntEnum):
    """What a node is doing at a sample."""

    TRAIN = 0
    CKPT = 1
    EVAL = 2
    HANG = 3
    STALL = 4
    LOAD = 5
    IDLE = 6
    BURN = 7
    DOWN = 8


# Per phase: utilisation, fraction of the power range drawn, fraction of the job's memory.
# TRAIN's utilisation and power are the job's own.
_UTIL = np.array([0.0, 0.12, 0.6, 1.0, 0.0, 0.05, 0.0, 1.0, 0.0])
_POWER = np.array([0.0, 0.10, 0.45, 0.14, 0.03, 0.08, 0.0, 0.97, 0.0])
_MEMORY = np.array([1.0, 1.0, 0.8, 1.0, 1.0, 0.5, 0.0, 0.0, 0.0])


@dataclass(frozen=True, kw_only=True)
class Sku:
    """A GPU model's envelope (NVIDIA data sheets; typical nvidia-smi -q values)."""

    name: str
    clock_max_mhz: float
    clock_idle_mhz: float
    power_idle_w: float
    power_max_w: float
    memory_bytes: float
    slowdown_c: float
    rise_c_per_w: float
    """Die temperature above inlet per watt, at steady state."""
    hbm_offset_c: float


SKUS = (
    Sku(name="A100-SXM4-80GB", clock_max_mhz=1410, clock_idle_mhz=210, power_idle_w=62,
        power_max_w=400, memory_bytes=81920 * MIB, slowdown_c=88, rise_c_per_w=0.095,
        hbm_offset_c=4),
    Sku(name="H100-SXM5-80GB", clock_max_mhz=1980, clock_idle_mhz=345, power_idle_w=72,
        power_max_w=700, memory_bytes=81559 * MIB, slowdown_c=87, rise_c_per_w=0.062,
        hbm_offset_c=7),
    Sku(name="H200-SXM-141GB", clock_max_mhz=1980, clock_idle_mhz=345, power_idle_w=78,
        power_max_w=700, memory_bytes=143771 * MIB, slowdown_c=87, rise_c_per_w=0.060,
        hbm_offset_c=9),
)


@dataclass(frozen=True, kw_only=True)
class Mechanism:
    """One way a component fails."""

    name: str
    kind: Kind
    channel: Channel
    """What its precursor changes."""
    precursor_weight: float
    sudden_weight: float
    scale_s: tuple[float, float]
    """Range of the latent process's time scale (log-uniform)."""
    gpu_lost: bool
    """NVML loses the GPU at the failure (fell off the bus, GSP hang): its rows stop."""


MECHANISMS = (
    Mechanism(name="hbm_ecc", kind="gpu", channel="ecc", precursor_weight=0.28,
              sudden_weight=0.22, scale_s=(1200, 8 * 3600), gpu_lost=False),
    Mechanism(name="thermal", kind="gpu", channel="thermal", precursor_weight=0.12,
              sudden_weight=0.0, scale_s=(900, 3 * 3600), gpu_lost=True),
    Mechanism(name="pcie", kind="gpu", channel="pcie", precursor_weight=0.14,
              sudden_weight=0.14, scale_s=(600, 4 * 3600), gpu_lost=True),
    Mechanism(name="nvlink", kind="gpu", channel="nvlink", precursor_weight=0.10,
              sudden_weight=0.06, scale_s=(600, 3 * 3600), gpu_lost=False),
    Mechanism(name="gsp", kind="gpu", channel="none", precursor_weight=0.0,
              sudden_weight=0.12, scale_s=(0, 0), gpu_lost=True),
    Mechanism(name="nic", kind="link", channel="nic", precursor_weight=0.20,
              sudden_weight=0.20, scale_s=(1800, 8 * 3600), gpu_lost=False),
    Mechanism(name="fan", kind="node", channel="fan", precursor_weight=0.10,
              sudden_weight=0.0, scale_s=(1800, 5 * 3600), gpu_lost=False),
    Mechanism(name="psu", kind="node", channel="psu", precursor_weight=0.06,
              sudden_weight=0.26, scale_s=(600, 2 * 3600), gpu_lost=False),
)

# Repair hours at these quantiles, per kind, from the StepFun trace's fault_start/fault_end
# pairs (gpu: class GPU; link: NIC and Parameter Plane Cable; node: power supply, fan,
# motherboard, CPU, riser card).
_REPAIR_Q = (0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95)
_REPAIR_H: dict[Kind, tuple[float, ...]] = {
    "gpu": (0.20, 0.21, 0.23, 16.8, 73.4, 430.8, 891.1),
    "link": (0.13, 0.32, 2.82, 37.4, 123.1, 539.1, 878.7),
    "node": (11.6, 16.5, 26.2, 77.5, 326.8, 1018.5, 1322.7),
}


@dataclass(frozen=True, kw_only=True)
class Failure:
    """A planned failure (ground truth) and what it does to the node."""

    mech: Mechanism
    node: int
    gpu: int
    t_fail: float
    precursor_s: float
    t_down: float
    t_return: float | None
    replaced: bool
    path: tuple[FloatA, FloatA] | None
    """Latent state (times, s) up to the failure, for a failure with a precursor."""
    strength: float


@dataclass(frozen=True, kw_only=True)
class Episode:
    """A change in one channel of one entity over the sample grid."""

    channel: Channel
    node: int
    gpu: int
    x: FloatA
    """Observed degradation at the node's sample times."""


@dataclass(frozen=True, kw_only=True)
class Job:
    """A training job on a fixed set of nodes."""

    nodes: IntA
    util: float
    power: float
    memory: float
    step_s: float
    compute_frac: float


@dataclass(kw_only=True)
class _Sim:
    """The fleet being built, shared by the steps of ``generate``."""

    rng: np.random.Generator
    sku: Sku
    names: tuple[str, ...]
    gpn: int
    rack: IntA
    start: float
    end: float
    interval_s: float
    ts: FloatA
    """[node, k] the node's sample times."""
    columns: tuple[str, ...]
    phase: npt.NDArray[np.int8] = field(default_factory=lambda: np.zeros((0, 0), np.int8))
    member: BoolA = field(default_factory=lambda: np.zeros((0, 0), bool))
    job_of: IntA = field(default_factory=lambda: np.zeros(0, np.int64))
    jobs: list[Job] = field(default_factory=list)
    events: list[tuple[float, int, int, int]] = field(default_factory=list)
    resets: list[tuple[int, int, int]] = field(default_factory=list)
    """(node, gpu, k): counters restart at k; gpu -1 for volatile counters of every GPU."""

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def k(self) -> int:
        return int(self.ts.shape[1])

    def kat(self, node: int, t: float) -> int:
        """The first sample of ``node`` at or after ``t``."""
        return int(np.searchsorted(self.ts[node], t))

    def set_phase(self, node: int, t_from: float, t_to: float, phase: Phase) -> None:
        a, b = self.kat(node, t_from), self.kat(node, t_to)
        seg = self.phase[node, a:b]
        self.phase[node, a:b] = np.where(seg == Phase.DOWN, Phase.DOWN, phase)


def _loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _latent_path(rng: np.random.Generator, *, t0: float, scale_s: float, until: float,
                 heal_after_s: float | None = None) -> tuple[FloatA, FloatA]:
    """A regime-switching, jumping, healing degradation state from ``t0`` to ``until``."""
    n = max(2, int((until - t0) // LATENT_DT_S) + 1)
    rel = LATENT_DT_S * np.arange(n, dtype=np.float64)
    bounds, flags, acc, active = [], [], 0.0, True
    while acc <= rel[-1]:
        acc += rng.exponential(0.4 * scale_s if active else 0.17 * scale_s)
        bounds.append(acc)
        flags.append(active)
        active = not active
    on = np.array(flags)[np.searchsorted(bounds, rel, side="right").clip(max=len(flags) - 1)]
    heal = np.full(n, 0.4 / scale_s)
    if heal_after_s is not None:
        on &= rel < heal_after_s
        heal[rel >= heal_after_s] = 1.5 / scale_s
    inc = np.where(on, 0.8 / (0.7 * scale_s), -heal) * LATENT_DT_S
    inc += (rng.random(n) < on * 3 * LATENT_DT_S / scale_s) * rng.exponential(0.1, n)
    inc += rng.normal(0.0, 0.2 * math.sqrt(LATENT_DT_S / scale_s), n)
    inc[0] = 0.0
    c = np.cumsum(inc)
    return t0 + rel, c - np.minimum(0.0, np.minimum.accumulate(c))  # reflected at 0


def _draw_precursor(sim: _Sim, mech: Mechanism, lo_t: float,
                    hi_t: float) -> tuple[float, FloatA, FloatA] | None:
    """(failure time, latent times, latent state) of a hazard-timed failure inside the window."""
    rng = sim.rng
    for _ in range(40):
        scale = _loguniform(rng, *mech.scale_s)
        t0 = rng.uniform(lo_t, hi_t) - scale * rng.uniform(0.6, 1.2)
        t, s = _latent_path(rng, t0=t0, scale_s=scale, until=sim.end)
        cum = np.cumsum(np.exp(HAZARD_KAPPA * (s - 1.0)) / scale * LATENT_DT_S)
        k = int(np.searchsorted(cum, rng.exponential()))
        if k >= len(t):
            continue  # still degrading at the end of the trace: try another onset
        t_fail = float(t[k] + rng.uniform(0.0, LATENT_DT_S))
        if lo_t <= t_fail <= hi_t and t_fail - t0 >= 600 and s[k] >= 0.6:
            return t_fail, t[: k + 1], s[: k + 1]
    return None


def _pick(rng: np.random.Generator, precursor: bool) -> Mechanism:
    w = np.array([m.precursor_weight if precursor else m.sudden_weight for m in MECHANISMS])
    return MECHANISMS[int(rng.choice(len(MECHANISMS), p=w / w.sum()))]


def _repair_s(rng: np.random.Generator, kind: Kind) -> float:
    hours = math.exp(float(np.interp(rng.uniform(0.05, 0.95), _REPAIR_Q,
                                     np.log(_REPAIR_H[kind]))))
    return max(900.0, hours * 3600)


def _build_fleet(rng: np.random.Generator, nodes: int, days: float, interval_s: float) -> _Sim:
    sku = SKUS[int(rng.choice(len(SKUS), p=[0.3, 0.5, 0.2]))]
    gpn = 8 if rng.random() < 0.75 else 4
    per_rack = int(rng.integers(4, 9))
    rack = np.arange(nodes, dtype=np.int64) // per_rack
    names = tuple(f"rk{r:02d}-n{i % per_rack:02d}" for i, r in enumerate(rack))
    start = 1_718_000_000.0 + float(rng.integers(0, 60)) * DAY_S
    steps = int(days * DAY_S // interval_s)
    grid = start + interval_s * np.arange(steps, dtype=np.float64)
    offset = rng.uniform(0.05, 0.6, nodes) * interval_s
    jitter = np.clip(rng.normal(0.0, 0.01 * interval_s, (nodes, steps)),
                     -0.03 * interval_s, 0.03 * interval_s)
    # Columns a DCGM profile may leave out (fleet-trace/1: "a column may be absent").
    optional = {"gpu.memory.temperature": 0.35, "gpu.rows.remap.pending": 0.3,
                "gpu.throttle.power": 0.2, "gpu.memory.used": 0.15}
    drop = {c for c, p in optional.items() if rng.random() < p}
    return _Sim(rng=rng, sku=sku, names=names, gpn=gpn, rack=rack, start=start,
                end=start + days * DAY_S, interval_s=interval_s,
                ts=grid[None, :] + offset[:, None] + jitter,
                columns=tuple(c for c in GPU_COLUMNS if c not in drop))


def _plan_jobs(sim: _Sim) -> None:
    """Split the fleet into jobs and a spare pool; lay out each job's phases."""
    rng, n, k = sim.rng, sim.n, sim.k
    spare = rng.choice(n, max(1, round(n * rng.uniform(0.05, 0.12))), replace=False)
    workers = np.setdiff1d(np.arange(n), spare)
    n_jobs = max(1, min(int(rng.integers(1, 5)), len(workers) // 2))
    cuts = np.sort(rng.choice(np.arange(1, len(workers)), n_jobs - 1, replace=False))
    sim.job_of = np.full(n, -1, np.int64)
    sim.phase = np.full((n, k), Phase.IDLE, np.int8)
    sim.member = np.zeros((n, k), bool)
    grid = sim.ts[0] - sim.ts[0, 0]
    for j, group in enumerate(np.split(workers, cuts)):
        sim.jobs.append(Job(nodes=group, util=rng.uniform(0.86, 0.99),
                            power=rng.uniform(0.68, 0.98), memory=rng.uniform(0.55, 0.95),
                            step_s=rng.uniform(1.5, 12.0), compute_frac=rng.uniform(0.55, 0.85)))
        sim.job_of[group] = j
        sim.member[group] = True
        base = np.full(k, Phase.TRAIN, np.int8)
        period, dur = rng.uniform(1200, 5400), rng.uniform(30, 240)
        base[(grid - rng.uniform(0, period)) % period < dur] = Phase.CKPT
        if rng.random() < 0.5:
            period, dur = rng.uniform(2, 6) * 3600, rng.uniform(240, 900)
            base[(grid - rng.uniform(0, period)) % period < dur] = Phase.EVAL
        for _ in range(rng.poisson(0.4 * (sim.end - sim.start) / DAY_S)):
            a = rng.uniform(0, grid[-1])
            base[(grid >= a) & (grid < a + rng.uniform(120, 900))] = (
                Phase.HANG if rng.random() < 0.5 else Phase.STALL)
        sim.phase[group] = base


def _plan_failures(sim: _Sim) -> list[Failure]:
    rng, n = sim.rng, sim.n
    dur = sim.end - sim.start
    lo_t, hi_t = sim.start + min(3600.0, 0.2 * dur), sim.end - min(300.0, 0.05 * dur)
    nd = n * dur / DAY_S
    count = int(np.clip(rng.poisson(FAILURES_PER_NODE_DAY * nd), 0.22 * nd, 0.33 * nd))
    count = max(1, min(count, n))
    weight = np.where(sim.job_of >= 0, 1.0, 0.3)
    # Stratified, not one coin per failure: every fleet gets close to the intended share.
    with_precursor = rng.permutation(np.arange(count) < round(count * P_PRECURSOR))
    out = []
    for node, precursor in zip(rng.choice(n, count, replace=False, p=weight / weight.sum()),
                               with_precursor, strict=True):
        mech = _pick(rng, bool(precursor))
        drawn = _draw_precursor(sim, mech, lo_t, hi_t) if precursor else None
        if drawn is None and mech.sudden_weight == 0:
            mech = _pick(rng, False)
        if drawn is None:
            t_fail, path = rng.uniform(lo_t, hi_t), None
        else:
            t_fail, path = drawn[0], (drawn[1], drawn[2])
        delay = {"gpu": rng.uniform(0, 150), "link": rng.uniform(30, 300), "node": 0.0}
        t_down = t_fail + delay[mech.kind]
        t_return = t_down + _repair_s(rng, mech.kind)
        strength = rng.lognormal(0.0, 0.35) * (rng.uniform(0.2, 0.45)
                                               if rng.random() < 0.3 else 1.0)
        out.append(Failure(
            mech=mech, node=int(node), gpu=int(rng.integers(sim.gpn)) if mech.kind == "gpu"
            else -1, t_fail=float(t_fail),
            precursor_s=0.0 if path is None else round(float(t_fail - path[0][0])),
            t_down=float(t_down), t_return=t_return if t_return < sim.end else None,
            replaced=mech.kind == "gpu" and rng.random() < 0.6, path=path, strength=strength))
    return sorted(out, key=lambda f: f.t_fail)


def _restart_job(sim: _Sim, job: int, t: float, *, kill_xid_on: list[int]) -> None:
    """The job hangs until the watchdog fires (XID 45 on ``kill_xid_on``), then reloads."""
    rng = sim.rng
    detect, load = rng.uniform(60, 900), rng.uniform(180, 900)
    for m in sim.jobs[job].nodes:
        if not sim.member[m, min(sim.kat(m, t), sim.k - 1)]:
            continue
        sim.set_phase(m, t, t + detect, Phase.HANG)
        sim.set_phase(m, t + detect, t + detect + load, Phase.LOAD)
        if m in kill_xid_on and rng.random() < 0.15:  # some ranks die with work in flight
            for g in np.flatnonzero(rng.random(sim.gpn) < 0.5):
                sim.events.append((t + detect + rng.uniform(0, 3), int(m), int(g), 45))


def _apply_failures(sim: _Sim, failures: list[Failure]) -> None:
    rng = sim.rng
    for f in failures:
        n, kf = f.node, sim.kat(f.node, f.t_fail)
        codes = {"hbm_ecc": [48, 94 if rng.random() < 0.7 else 95], "thermal": [79],
                 "pcie": [79], "nvlink": [74], "gsp": [119 if rng.random() < 0.6 else 120]}
        for i, code in enumerate(codes.get(f.mech.name, [])):
            sim.events.append((f.t_fail + 0.001 * i, n, f.gpu, code))
        job, was_member = int(sim.job_of[n]), bool(sim.member[n, min(kf, sim.k - 1)])
        sim.member[n, kf:] = False
        sim.set_phase(n, f.t_fail, f.t_down, Phase.IDLE)
        sim.phase[n, sim.kat(n, f.t_down):] = Phase.DOWN
        if f.t_return is not None:
            kr = sim.kat(n, f.t_return)
            sim.phase[n, kr:] = Phase.IDLE
            sim.set_phase(n, f.t_return, f.t_return + rng.uniform(1800, 7200), Phase.BURN)
            sim.resets.append((n, -1, kr))
            if f.replaced:
                sim.resets.append((n, f.gpu, kr))
        if job >= 0 and was_member:
            survivors = [int(m) for m in sim.jobs[job].nodes if m != n]
            _restart_job(sim, job, f.t_fail, kill_xid_on=survivors)


def _software_events(sim: _Sim, failures: list[Failure]) -> None:
    """Software crashes that restart a job, stray application XIDs, maintenance reboots."""
    rng, days = sim.rng, (sim.end - sim.start) / DAY_S
    failing = {f.node for f in failures}
    for _ in range(max(1, rng.poisson(0.04 * sim.n * days))):
        for _ in range(30):
            t = rng.uniform(sim.start + 1800, sim.end - 1800)
            j = int(rng.integers(len(sim.jobs)))
            alive = [int(m) for m in sim.jobs[j].nodes if sim.member[m, sim.kat(m, t) - 1]
                     and sim.phase[m, sim.kat(m, t) - 1] in (Phase.TRAIN, Phase.CKPT)]
            if alive:
                break
        else:
            continue
        n = alive[int(rng.integers(len(alive)))]
        gpus = list(range(sim.gpn)) if rng.random() < 0.5 else [int(rng.integers(sim.gpn))]
        code = 13 if len(gpus) > 1 else 31
        for g in gpus:
            sim.events.append((t + rng.uniform(0, 0.5), n, g, code))
            if rng.random() < 0.5:
                sim.events.append((t + rng.uniform(1, 10), n, g, 43))
        _restart_job(sim, j, t, kill_xid_on=[m for m in alive if m != n])
    for _ in range(rng.poisson(0.03 * sim.n * days)):
        n, t = int(rng.integers(sim.n)), rng.uniform(sim.start, sim.end)
        if sim.phase[n, min(sim.kat(n, t), sim.k - 1)] != Phase.DOWN:
            sim.events.append((t, n, int(rng.integers(sim.gpn)), int(rng.choice([13, 31, 43]))))
    for spare in (int(m) for m in np.flatnonzero(sim.job_of < 0)):
        if spare not in failing and rng.random() < min(0.6, 0.3 * days):
            t = rng.uniform(sim.start + 3600, sim.end - 3600)
            back = t + rng.uniform(600, 2400)
            sim.set_phase(spare, t, back, Phase.DOWN)
            sim.resets.append((spare, -1, sim.kat(spare, back)))


def _on_grid(sim: _Sim, node: int, t: FloatA, s: FloatA, strength: float) -> FloatA:
    return strength * np.interp(sim.ts[node], t, s, left=0.0, right=0.0) ** OBS_EXPONENT


def _episodes(sim: _Sim, failures: list[Failure]) -> list[Episode]:
    """Precursors of the failures, then confounders: healed degradations and passing bursts."""
    rng, days = sim.rng, (sim.end - sim.start) / DAY_S
    out = [Episode(channel=f.mech.channel, node=f.node, gpu=f.gpu,
                   x=_on_grid(sim, f.node, *f.path, f.strength))
           for f in failures if f.path is not None]
    channels: tuple[Channel, ...] = ("ecc", "pcie", "nvlink", "thermal", "nic", "fan")
    for _ in range(rng.poisson(0.05 * sim.n * days)):
        ch = channels[int(rng.choice(6, p=[0.3, 0.15, 0.15, 0.15, 0.15, 0.1]))]
        scale = _loguniform(rng, 1200, 4 * 3600)
        t0 = rng.uniform(sim.start - scale / 2, sim.end - 1800)
        t, s = _latent_path(rng, t0=t0, scale_s=scale, until=min(sim.end, t0 + 5 * scale),
                            heal_after_s=scale * rng.uniform(0.3, 0.8))
        node = int(rng.integers(sim.n))
        out.append(Episode(channel=ch, node=node, gpu=int(rng.integers(sim.gpn)),
                           x=_on_grid(sim, node, t, s, rng.lognormal(-0.3, 0.4))))
    gpus = sim.n * sim.gpn
    bursts: tuple[tuple[Channel, float], ...] = (("ecc", 0.01), ("pcie", 0.006), ("nvlink", 0.006))
    for ch, per_gpu_day in bursts:
        for _ in range(rng.poisson(per_gpu_day * gpus * days)):
            node, tb = int(rng.integers(sim.n)), rng.uniform(sim.start, sim.end)
            u = np.clip((sim.ts[node] - tb) / rng.uniform(180, 1500), 0.0, None)
            out.append(Episode(channel=ch, node=node, gpu=int(rng.integers(sim.gpn)),
                               x=_loguniform(rng, 0.2, 2.5) * u * np.exp(1.0 - u)))
    return out


def _channel(sim: _Sim, episodes: list[Episode], ch: Channel, *, per_gpu: bool,
             saturate_at: tuple[float, float] | None = None) -> FloatA:
    """Sum of a channel's episodes, [gpu, k] or [node, k]; with ``saturate_at`` each episode
    is a soft-saturating (tanh) effect whose ceiling is drawn from that range."""
    out = np.zeros((sim.n * sim.gpn if per_gpu else sim.n, sim.k))
    for e in episodes:
        if e.channel == ch:
            effect = e.x if saturate_at is None else sim.rng.uniform(*saturate_at) * np.tanh(e.x)
            out[e.node * sim.gpn + e.gpu if per_gpu else e.node] += effect
    return out


def _inlet(sim: _Sim) -> FloatA:
    """Rack inlet temperature [rack, k]: a diurnal swing plus cooling events that pass."""
    rng, racks = sim.rng, int(sim.rack.max()) + 1
    t = sim.ts[0]
    phase = rng.uniform(0, 2 * math.pi, racks)[:, None]
    out = rng.uniform(21, 27, racks)[:, None] + np.sin(2 * math.pi * t / DAY_S + phase)
    for _ in range(rng.poisson(0.25 * racks * (sim.end - sim.start) / DAY_S)):
        a = rng.uniform(sim.start, sim.end)
        knots = np.cumsum([a, rng.uniform(600, 1800), rng.uniform(600, 3600),
                           rng.uniform(1200, 2700)])
        out[int(rng.integers(racks))] += np.interp(t, knots, [0, 1, 1, 0]) * rng.uniform(5, 12)
    return out


def _counts(sim: _Sim, benign_per_min: FloatA, episode_per_min: FloatA,
            down: BoolA) -> tuple[FloatA, FloatA]:
    """Poisson increments per sample: (all, the episodes' share), zero while down."""
    rng, dt_min = sim.rng, sim.interval_s / 60.0
    total, part = np.zeros(episode_per_min.shape), np.zeros(episode_per_min.shape)
    rows = np.flatnonzero((benign_per_min > 0) | episode_per_min.any(axis=1))
    if len(rows):
        rate = episode_per_min[rows] * dt_min
        part[rows] = rng.poisson(rate * rng.gamma(0.7, 1 / 0.7, rate.shape))
        total[rows] = part[rows] + rng.poisson(
            np.broadcast_to(benign_per_min[rows, None] * dt_min, rate.shape))
    total[down], part[down] = 0.0, 0.0
    return total, part


def _cumulative(sim: _Sim, inc: FloatA, init: FloatA, *, persistent: bool) -> FloatA:
    """Counter values with resets: volatile counters at every reboot, others at a GPU swap."""
    c = init[:, None] + np.cumsum(inc, axis=1)
    # A repair that swaps a GPU also reboots its node: one reset of that GPU at that sample.
    restarts: set[tuple[int, int]] = set()
    for node, gpu, k in sim.resets:
        if 0 < k < sim.k and (gpu >= 0 or not persistent):
            rows = [node * sim.gpn + gpu] if gpu >= 0 else range(node * sim.gpn,
                                                                   (node + 1) * sim.gpn)
            restarts.update((g, k) for g in rows)
    for g, k in sorted(restarts, key=lambda r: r[1]):
        c[g, k:] -= c[g, k - 1]
    return c


def _benign_rate(rng: np.random.Generator, size: int, share: float, lo: float,
                 hi: float) -> FloatA:
    rate = np.exp(rng.uniform(math.log(lo), math.log(hi), size))
    return np.where(rng.random(size) < share, rate, 0.0)


def _xid_at_increments(sim: _Sim, hits: npt.NDArray[np.intp], code: int, ts: FloatA, *,
                       cooldown_s: float = 0.0) -> None:
    """One XID per hit (gpu row, k), logged between the previous sample and this one."""
    last: dict[int, float] = {}
    for g, k in hits:
        t = float(ts[g, k] - sim.rng.uniform(0, 0.9 * sim.interval_s))
        if t - last.get(int(g), -math.inf) >= cooldown_s:
            last[int(g)] = t
            sim.events.append((t, int(g) // sim.gpn, int(g) % sim.gpn, code))


def _gpu_frame(sim: _Sim, failures: list[Failure],
               episodes: list[Episode]) -> tuple[pd.DataFrame, FloatA]:
    """GPU samples, and each node's compute slow-down factor [node, k]."""
    rng, sku, p, n, k = sim.rng, sim.sku, sim.gpn, sim.n, sim.k
    g_all = n * p
    ph = np.repeat(sim.phase, p, axis=0)
    down, train = ph == Phase.DOWN, ph == Phase.TRAIN
    util_t, power_t = np.tile(_UTIL, (n, 1)), np.tile(_POWER, (n, 1))
    mem_t = np.tile(_MEMORY, (n, 1))
    for job in sim.jobs:
        util_t[job.nodes, Phase.TRAIN], power_t[job.nodes, Phase.TRAIN] = job.util, job.power
        mem_t[job.nodes, : Phase.LOAD + 1] *= job.memory
    mem_t[:, Phase.IDLE], mem_t[:, Phase.BURN] = 0.006, 0.92

    def per_phase(table: FloatA) -> FloatA:
        return np.take_along_axis(np.repeat(table, p, axis=0), ph.astype(np.intp), axis=1)

    util = per_phase(util_t) - train * np.abs(rng.normal(0, 0.02, (g_all, k)))
    demand = per_phase(power_t) * rng.normal(1.0, 0.03, (g_all, 1))
    demand = np.clip(demand + rng.normal(0, 0.01, (g_all, k)) * (1 + 3 * train), 0, 1.15)
    # A few nodes run power-capped: healthy, but always slow (and power-throttled).
    cap_n = np.ones(n)
    cap_n[rng.choice(n, 1 + n // 24, replace=False)] = rng.uniform(0.68, 0.8)
    cap = np.repeat(cap_n, p)[:, None]
    brake_p = np.clip(0.4 * _channel(sim, episodes, "psu", per_gpu=False), 0, 0.7)
    brake = np.repeat(rng.random((n, k)) < brake_p, p, axis=0) & ~down
    capped = demand > cap
    raw, demand = demand, np.minimum(demand, cap)
    demand = np.where(brake, 0.45 * demand, demand)
    power = sku.power_idle_w + (sku.power_max_w - sku.power_idle_w) * demand
    power += rng.normal(0, 2.0, (g_all, k))
    # First-order thermal lag (time constant ~100 s) of power over the rack's inlet.
    steady = _inlet(sim)[np.repeat(sim.rack, p)] + sku.rise_c_per_w * power
    alpha = 1 - math.exp(-sim.interval_s / 100.0)
    b, a = [alpha], [1.0, alpha - 1.0]
    temp = lfilter(b, a, steady, axis=1, zi=lfilter_zi(b, a)[None, :] * steady[:, :1])[0]
    # A failing cold plate or fan heats toward (not past) a ceiling set by the GPU's headroom
    # under load: a strong thermal precursor ends in slowdown, a fan's rarely does.
    headroom = sku.slowdown_c - 24 - sku.rise_c_per_w * (
        sku.power_idle_w + 0.85 * (sku.power_max_w - sku.power_idle_w))
    d_temp = _channel(sim, episodes, "thermal", per_gpu=True,
                      saturate_at=(headroom + 6, headroom + 14))
    d_temp += np.repeat(_channel(sim, episodes, "fan", per_gpu=False,
                                 saturate_at=(headroom - 6, headroom + 4)), p, axis=0)
    temp = np.round(temp + rng.uniform(-3, 4, (g_all, 1)) + d_temp
                    + rng.normal(0, 0.4, (g_all, k)))
    over = temp - sku.slowdown_c
    thermal = (over >= 0) & ~down
    clock = sku.clock_max_mhz - 2.0 * np.clip(temp - 55, 0, None)  # GPU Boost backs off warm
    clock = np.where(capped & ~brake, clock * np.sqrt(cap / np.maximum(raw, 1e-9)), clock)
    clock = np.where(brake, 0.5 * clock, clock)
    clock = np.where(thermal, clock * (1 - np.clip(0.05 * (over + 1), 0, 0.55)), clock)
    power = np.where(thermal, power * (0.75 + 0.25 * clock / sku.clock_max_mhz), power)
    clock = np.where((ph == Phase.IDLE) | down, sku.clock_idle_mhz, clock)
    clock = np.round(clock / 15) * 15
    ratio = np.where(train, np.clip(0.985 * sku.clock_max_mhz / clock, 1, None), 1.0)
    straggle = 1 + 0.85 * (ratio.reshape(n, p, k).max(axis=1) - 1)

    uptime_min = np.repeat(rng.uniform(1, 45, n), p) * 1440
    cols: dict[str, FloatA] = {}
    parts: dict[str, FloatA] = {}
    steady_sbe = _benign_rate(rng, g_all, 0.03, 0.01, 2.0)
    # Most GPUs see an odd corrected error now and then; a few a steady benign stream.
    benign_sbe = np.where(steady_sbe > 0, steady_sbe, _benign_rate(rng, g_all, 0.2, 1e-4, 5e-3))
    counters: tuple[tuple[str, Channel, FloatA], ...] = (
            ("gpu.ecc.sbe", "ecc", benign_sbe),
            ("gpu.pcie.replay", "pcie", _benign_rate(rng, g_all, 0.05, 1e-3, 0.3)),
            ("gpu.nvlink.crc_errors", "nvlink", _benign_rate(rng, g_all, 0.04, 0.01, 5.0)))
    for name, ch, benign in counters:
        episode = RATE_PER_MIN[ch] * _channel(sim, episodes, ch, per_gpu=True)
        inc, parts[ch] = _counts(sim, benign, episode, down)
        cols[name] = _cumulative(sim, inc, rng.poisson(benign * uptime_min).astype(float),
                                 persistent=False)
    remap = rng.binomial(parts["ecc"].astype(np.int64), 0.003).astype(float)
    remap += rng.poisson(np.where(steady_sbe > 0, 0.3 * sim.interval_s / DAY_S, 0.0)[:, None],
                         (g_all, k)) * ~down
    dbe, unc = np.zeros((g_all, k)), np.zeros((g_all, k))
    for f in failures:
        if f.mech.name == "hbm_ecc":
            kf = sim.kat(f.node, f.t_fail)
            if kf < k:
                dbe[f.node * p + f.gpu, kf] = 1 + rng.poisson(0.5)
                unc[f.node * p + f.gpu, kf] = 1
    init_remap = np.where(rng.random(g_all) < 0.04, rng.integers(1, 4, g_all), 0)
    cols["gpu.ecc.dbe"] = _cumulative(sim, dbe, np.zeros(g_all), persistent=False)
    cols["gpu.rows.remapped.correctable"] = _cumulative(sim, remap, init_remap.astype(float),
                                                        persistent=True)
    cols["gpu.rows.remapped.uncorrectable"] = _cumulative(
        sim, unc, (rng.random(g_all) < 0.01).astype(float), persistent=True)
    since_reset = _cumulative(sim, remap + unc, np.zeros(g_all), persistent=False)
    cols["gpu.rows.remap.pending"] = (since_reset > 0).astype(float)

    ts = np.repeat(sim.ts, p, axis=0) + 0.002 * np.tile(np.arange(p), n)[:, None]
    _xid_at_increments(sim, np.argwhere(remap > 0), 63, ts)
    w = max(1, round(SBE_RATE_WINDOW_S / sim.interval_s))
    sbe = cols["gpu.ecc.sbe"]
    threshold = SBE_RATE_XID_PER_MIN * max(1.0, sim.interval_s / 60.0)
    hits = np.argwhere(sbe[:, w:] - sbe[:, :-w] >= threshold) + np.array([0, w])
    _xid_at_increments(sim, hits, 92, ts, cooldown_s=600.0)

    present = ~down & (rng.random((g_all, k)) >= 0.0005)
    present &= np.repeat(_gaps(sim), p, axis=0)
    for f in failures:
        if f.mech.gpu_lost:  # NVML cannot read the GPU from the failure until the repair
            g, end = f.node * p + f.gpu, f.t_return if f.t_return is not None else math.inf
            present[g] &= ~((ts[g] >= f.t_fail) & (ts[g] < end))
    cols.update({
        "gpu.utilization": np.round(np.clip(util, 0, 1), 2),
        "gpu.memory.used": np.round(per_phase(mem_t) * sku.memory_bytes / MIB) * MIB,
        "gpu.temperature": temp,
        "gpu.memory.temperature": np.round(temp + sku.hbm_offset_c * demand
                                           + rng.uniform(-2, 2, (g_all, 1))),
        "gpu.power": np.round(power, 2),
        "gpu.clock.sm": clock,
        "gpu.throttle.thermal": thermal.astype(float),
        "gpu.throttle.power": ((capped | brake) & ~down).astype(float),
    })
    sel = np.flatnonzero(present.ravel())
    idx = sel[np.argsort(ts.ravel()[sel], kind="stable")]
    row = idx // k
    frame = pd.DataFrame({"ts": ts.ravel()[idx], "node": np.array(sim.names, object)[row // p],
                          "gpu": (row % p).astype(np.int64)})
    for c in sim.columns:
        frame[c] = cols[c].ravel()[idx].astype(np.float64)
    return frame, straggle


def _gaps(sim: _Sim) -> BoolA:
    """[node, k] True where the exporter delivered: per-node gaps and one fleet-wide outage."""
    rng, keep = sim.rng, np.ones((sim.n, sim.k), bool)
    days = (sim.end - sim.start) / DAY_S
    spans = [(int(rng.integers(sim.n)), rng.uniform(sim.start, sim.end), _loguniform(rng, 60,
                                                                                      2400))
             for _ in range(rng.poisson(0.5 * sim.n * days))]
    if rng.random() < 0.5:
        t, d = rng.uniform(sim.start, sim.end), rng.uniform(120, 720)
        spans += [(m, t, d) for m in range(sim.n)]
    for m, t, d in spans:
        keep[m, sim.kat(m, t): sim.kat(m, t + d)] = False
    return keep


def _node_frame(sim: _Sim, straggle: FloatA) -> pd.DataFrame:
    """``train.*`` per node and sample: a step waits for the slowest node of its job."""
    rng, k = sim.rng, sim.k
    ts = sim.ts + rng.uniform(0.5, 3.0, (sim.n, 1))
    stepping = sim.member & np.isin(sim.phase, (Phase.TRAIN, Phase.CKPT))
    stepping &= rng.random((sim.n, k)) >= 0.002
    compute, step = np.full((sim.n, k), np.nan), np.full((sim.n, k), np.nan)
    for job in sim.jobs:
        c = job.step_s * job.compute_frac * straggle[job.nodes]
        c = c * rng.normal(1.0, 0.01, c.shape)
        slowest = np.where(stepping[job.nodes], c, -np.inf).max(axis=0)
        s = slowest + job.step_s * (1 - job.compute_frac) * rng.normal(1.0, 0.03, k)
        s = np.where(sim.phase[job.nodes] == Phase.CKPT, s * rng.uniform(1.5, 4.0, k), s)
        compute[job.nodes], step[job.nodes] = c, s
    n_idx, k_idx = np.nonzero(stepping)
    order = np.argsort(ts[n_idx, k_idx], kind="stable")
    n_idx, k_idx = n_idx[order], k_idx[order]
    st, cp = step[n_idx, k_idx], compute[n_idx, k_idx]
    return pd.DataFrame({"ts": ts[n_idx, k_idx], "node": np.array(sim.names, object)[n_idx],
                         "train.step.duration": np.round(st, 4),
                         "train.compute.duration": np.round(cp, 4),
                         "train.collective.duration": np.round(st - cp, 4)})


def _link_frame(sim: _Sim, failures: list[Failure], episodes: list[Episode]) -> pd.DataFrame:
    """Ring-rotation probes on their own period; NIC/cable degradation only shows here."""
    rng, n = sim.rng, sim.n
    period = rng.uniform(40, 150)
    rounds = int((sim.end - sim.start) // period)
    offsets = np.concatenate([rng.permutation(np.arange(1, n))
                              for _ in range(rounds // (n - 1) + 1)])[:rounds]
    src = np.tile(np.arange(n), rounds)
    r = np.repeat(np.arange(rounds), n)
    dst = (src + offsets[r]) % n
    t = sim.start + r * period + rng.uniform(0, 0.5 * period, n)[src]
    t += rng.uniform(0, 0.1 * period, len(t))
    k = np.clip(((t - sim.start) / sim.interval_s).astype(np.int64), 0, sim.k - 1)
    keep = (t < sim.end) & (sim.phase[src, k] != Phase.DOWN) & (sim.phase[dst, k] != Phase.DOWN)
    for f in failures:
        if f.mech.kind == "link":  # the link is dead from the failure until the repair
            end = f.t_return if f.t_return is not None else math.inf
            keep &= ~(((src == f.node) | (dst == f.node)) & (t >= f.t_fail) & (t < end))
    keep &= rng.random(len(t)) >= 0.003
    src, dst, t, k = src[keep], dst[keep], t[keep], k[keep]
    nic = _channel(sim, episodes, "nic", per_gpu=False)
    x = nic[src, k] + nic[dst, k]
    retrained = x > rng.uniform(0.5, 1.2, n)[src]  # the link renegotiates at half speed
    line = 50e9 if rng.random() < 0.6 else 25e9  # NDR 400 Gb/s or HDR 200 Gb/s per port
    same_rack = sim.rack[src] == sim.rack[dst]
    bw = line * 0.93 * np.where(same_rack, 1.0, 0.97) * rng.lognormal(0, 0.015, len(t))
    lat = np.where(same_rack, 3.2e-6, 4.8e-6) * rng.lognormal(0, 0.08, len(t))
    busy = sim.phase[src, k] == Phase.TRAIN
    bw *= 1 - busy * rng.uniform(0, 0.12, len(t))
    lat *= 1 + busy * rng.exponential(0.3, len(t))
    slow = int(rng.integers(n))  # a healthy NIC that always probes ~15% slower
    bw *= np.where((src == slow) | (dst == slow), rng.uniform(0.8, 0.9), 1.0)
    for _ in range(rng.poisson(0.2 * (int(sim.rack.max()) + 1) * (sim.end - sim.start) / DAY_S)):
        rk, a = int(rng.integers(sim.rack.max() + 1)), rng.uniform(sim.start, sim.end)
        hit = ((sim.rack[src] == rk) | (sim.rack[dst] == rk)) & (t >= a) & (
            t < a + rng.uniform(300, 1200))
        bw *= np.where(hit, rng.uniform(0.45, 0.8), 1.0)
        lat *= np.where(hit, rng.uniform(1.5, 4.0), 1.0)
    bw *= np.where(retrained, 0.5, 1.0) / (1 + 1.2 * x)
    spike = rng.random(len(t)) < 0.003 + 0.1 * np.minimum(x, 1.0)  # retransmissions
    lat *= (1 + 1.5 * x) * np.where(spike, rng.uniform(3, 30, len(t)), 1.0)
    order = np.argsort(t, kind="stable")
    names = np.array(sim.names, object)
    return pd.DataFrame({"ts": t[order], "src": names[src[order]], "dst": names[dst[order]],
                         "net.link.bandwidth": np.round(bw[order], -3),
                         "net.link.latency": np.round(lat[order], 9)})


def _events_frame(sim: _Sim, failures: list[Failure]) -> pd.DataFrame:
    fail_at = {f.node: f.t_fail for f in failures}
    rows = [(t, m, g, c) for t, m, g, c in sim.events if sim.start <= t <= sim.end and not (
        c in APP_XIDS and abs(t - fail_at.get(m, math.inf)) < 300)]
    rows.sort()
    names = np.array(sim.names, object)
    return pd.DataFrame({"ts": np.array([r[0] for r in rows], np.float64),
                         "node": names[np.array([r[1] for r in rows], np.int64)],
                         "gpu": np.array([r[2] for r in rows], np.int64),
                         "kind": np.array(["xid"] * len(rows), object),
                         "code": np.array([r[3] for r in rows], np.int64)})


def generate(seed: int, nodes: int = 32, days: float = 2.0, interval_s: float = 30.0) -> FleetTrace:
    """A fleet trace with its ground-truth failures, the same for the same arguments."""
    if nodes < 3:
        raise ValueError(f"nodes={nodes} must be >= 3")
    if not days * DAY_S >= 4 * 3600:
        raise ValueError(f"days={days} must cover at least 4 hours")
    if not 1.0 <= interval_s <= 600.0:
        raise ValueError(f"interval_s={interval_s} must be within [1, 600]")
    sim = _build_fleet(np.random.default_rng(seed), nodes, days, interval_s)
    _plan_jobs(sim)
    failures = _plan_failures(sim)
    _apply_failures(sim, failures)
    _software_events(sim, failures)
    episodes = _episodes(sim, failures)
    gpu, straggle = _gpu_frame(sim, failures, episodes)
    names = np.array(sim.names, object)
    truth = pd.DataFrame({
        "ts": np.array([f.t_fail for f in failures], np.float64),
        "node": names[np.array([f.node for f in failures], np.int64)],
        "gpu": np.array([f.gpu for f in failures], np.int64),
        "kind": np.array([f.mech.kind for f in failures], object),
        "precursor_s": np.array([f.precursor_s for f in failures], np.float64)})
    meta = TraceMeta(start=sim.start, end=sim.end, interval_s=interval_s, nodes=sim.names,
                     gpus_per_node=sim.gpn,
                     extra={"generator": "fourth_generator", "seed": seed,
                            "gpu_model": sim.sku.name})
    return FleetTrace(meta=meta, gpu=gpu, node=_node_frame(sim, straggle),
                      links=_link_frame(sim, failures, episodes),
                      events=_events_frame(sim, failures), failures=truth)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out_dir", type=Path, help="directory to write the fleet trace into")
    parser.add_argument("--seed", type=int, default=7, help="random seed (same seed, same trace)")
    parser.add_argument("--nodes", type=int, default=32, help="number of nodes in the fleet")
    parser.add_argument("--days", type=float, default=2.0, help="length of the trace in days")
    parser.add_argument("--interval", type=float, default=30.0,
                        help="nominal GPU sampling interval in seconds")
    args = parser.parse_args(argv)
    trace = generate(args.seed, nodes=args.nodes, days=args.days, interval_s=args.interval)
    write_trace(args.out_dir, trace)
    assert trace.failures is not None
    print(f"{args.out_dir}: {len(trace.gpu)} GPU rows, {len(trace.node)} node rows, "
          f"{len(trace.links)} probes, {len(trace.events)} events, "
          f"{len(trace.failures)} failures")


if __name__ == "__main__":
    main()
