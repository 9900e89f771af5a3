"""A third, independent synthetic GPU-fleet trace generator (fleet-trace/1, shared/fleet-trace.md).

It exists as a held-out test of the failure predictor: it was designed from the trace format, the
metric catalogue and public failure statistics alone, without reading the predictor or the
project's other generators, so a predictor tuned to those cannot have been tuned to this one.

    python benchmarks/third_generator.py OUT_DIR --seed 7 --nodes 32 --days 2 --interval 30

How it deliberately differs from a "textbook" synthetic fleet:

- Physics first. GPU power follows the job's phase, core temperature follows power and the
  rack's inlet air through a thermal lag, throttling lowers the SM clock and the power, and the
  node's compute time comes from the clocks of its GPUs. A synchronous job waits for its slowest
  rank, so a straggler slows the step of every node on its job (their collective wait grows);
  its own step time is only a little longer, its *compute* time is what stands out.
- Several jobs share the fleet (one large, some small ones that end and start), spares idle.
- Precursors are not only smooth ramps: intermittent episodes whose frequency rises, step changes,
  sigmoids, late surges; amplitudes are drawn log-uniformly, so many are weak, and some precursors
  began before the trace did.
- About 30 % of failures come with no precursor at all, under the same kind names as the ones
  that have one (a DBE can follow hours of corrected errors, or come out of the blue).
- Confounders that are never failures: GPUs with steady benign SBE / NVLink CRC / PCIe replay
  rates, error bursts that pass (some with XID 92), benign row remaps (XID 63, remap pending),
  rack cooling events that throttle the hottest GPUs of four nodes, leaf-switch congestion in the
  link probes, checkpoints and evaluations (a whole job slows), job-wide stalls, job restarts
  after failures and after application crashes (XID 13/31/43, then XID 45), planned reboots
  (node absent, counters reset), collector outages and exporter/hook gaps, chronically slow or
  power-capped healthy nodes, post-repair burn-in at full load, per-GPU static offsets.
- The exporter may lack optional columns (HBM temperature, the row-remap counters, the power
  throttle bit) for the whole fleet, or HBM temperature on some nodes only.
- Failed nodes are drained, repaired (absent minutes to a day), burned in and rejoin their job
  with reset counters; a failed GPU is often replaced.

``failures.csv`` kinds are fleet-trace.md's: ``gpu`` (ECC, thermal, NVLink, PCIe, a GPU lost),
``link`` (the node's network) and ``node`` (a dead node, a fan heating the whole node); ``gpu``
is empty for the last two.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace, TraceMeta, write_trace

DAY_S = 86_400.0
HOUR_S = 3_600.0
NODES_PER_RACK = 4  # an air-cooled 40 kW rack holds about four 10 kW HGX H100 servers
HBM_BYTES = 81_559 * 2**20  # H100 SXM 80 GB, the total NVML reports
BOOST_MHZ = 1980.0  # H100 SXM maximum SM clock
IDLE_MHZ = 345.0
LINK_BYTES_S = 50e9  # one 400 Gb/s NDR InfiniBand rail
GIB = 2.0**30

# Failure mix. Llama 3 (Dubey et al. 2024, table 5): 419 unexpected interruptions in 54 days on
# 16,384 H100s, 58.7 % GPU (faulty GPU 30.1 %, HBM3 17.2 %, SRAM 4.5 %, ...), network
# switch/cable 8.4 %, NIC 1.7 %, host/other the rest. StepFun InfiniteHBD trace
# (/work/shared/data/stepfun-fault-trace, 584 faults): GPU 27 % (DBE > threshold the largest
# cause, then "unknown error" and PCIe link width low), parameter-plane cable 6.9 % + NIC 5.1 %,
# fan 5.7 %, power supply 4.5 %, unknown 25 %. Kinds with a precursor, by weight:
PRECURSOR_KINDS: tuple[str, ...] = ("ecc", "thermal", "nvlink", "pcie", "network")
PRECURSOR_WEIGHTS: tuple[float, ...] = (0.35, 0.11, 0.16, 0.14, 0.24)
# Sudden failures (no precursor): a DBE out of the blue, a GPU that falls off the bus or whose
# GSP hangs, a node that dies (power supply, kernel panic, motherboard), a cable that just breaks.
SUDDEN_KINDS: tuple[str, ...] = ("ecc", "gpu", "node", "network")
SUDDEN_WEIGHTS: tuple[float, ...] = (0.30, 0.37, 0.23, 0.10)

_OPTIONAL_DROPS: dict[str, tuple[float, tuple[str, ...]]] = {
    # Older dcgm-exporter profiles do not collect these; the probability is per fleet.
    "hbm": (0.35, ("gpu.memory.temperature",)),
    "remap": (0.30, ("gpu.rows.remapped.correctable", "gpu.rows.remapped.uncorrectable",
                     "gpu.rows.remap.pending")),
    "power_throttle": (0.20, ("gpu.throttle.power",)),
}


@dataclass(frozen=True, kw_only=True)
class GeneratorConfig:
    """What to generate."""

    seed: int
    """Seed of the only random generator: the same seed gives the same trace."""
    nodes: int = 32
    """Nodes in the fleet (four to a rack)."""
    gpus: int = 8
    """GPUs per node."""
    days: float = 2.0
    """Length of the trace."""
    interval_s: float = 30.0
    """GPU and node sampling interval."""
    link_interval_s: float = 60.0
    """Interval between rounds of link probes."""
    failure_rate: float | None = None
    """Failures per 1,000 node-days; None draws 45-75 per seed."""

    def __post_init__(self) -> None:
        if self.nodes < 2:
            raise ValueError(f"nodes={self.nodes} must be >= 2")
        if self.gpus < 1:
            raise ValueError(f"gpus={self.gpus} must be >= 1")
        if not (math.isfinite(self.interval_s) and self.interval_s > 0):
            raise ValueError(f"interval_s={self.interval_s} must be > 0")
        if not (math.isfinite(self.link_interval_s) and self.link_interval_s > 0):
            raise ValueError(f"link_interval_s={self.link_interval_s} must be > 0")
        if not (math.isfinite(self.days) and self.days * DAY_S >= 4 * self.interval_s):
            raise ValueError(f"days={self.days} must cover at least four intervals")
        if self.failure_rate is not None and not self.failure_rate >= 0:
            raise ValueError(f"failure_rate={self.failure_rate} must be >= 0")


@dataclass(kw_only=True)
class _Failure:
    t: float
    node: int
    gpu: int  # -1: the node or its network
    kind: str
    precursor_s: float
    t_down: float  # the node stops reporting (a few samples after a GPU failure)
    t_up: float  # back from repair
    burn_in_s: float
    replaced: bool  # the failed GPU was swapped: its persistent counters start at 0


@dataclass(kw_only=True)
class _Job:
    nodes: list[int]
    t0: float
    t1: float
    compute_s: float
    comm_s: float
    mem_frac: float
    restarts: list[tuple[float, float]] = field(default_factory=list)


def _loguniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _shape(rng: np.random.Generator, tau: np.ndarray, dur_s: float, style: str) -> np.ndarray:
    """Precursor intensity in [0, 1] over normalized time ``tau`` (0 = onset, 1 = failure)."""
    if style == "ramp":
        return np.asarray(tau ** rng.uniform(0.6, 3.0))
    if style == "sigmoid":
        k, c = rng.uniform(8, 20), rng.uniform(0.3, 0.85)
        lo, hi = 1 / (1 + math.exp(k * c)), 1 / (1 + math.exp(-k * (1 - c)))
        return np.clip((1 / (1 + np.exp(-k * (tau - c))) - lo) / (hi - lo), 0, 1)
    if style == "steps":
        m = int(rng.integers(1, 4))
        pos, levels = np.sort(rng.uniform(0.05, 0.9, m)), np.sort(rng.uniform(0.2, 1.0, m))
        levels[-1] = 1.0
        out, prev = np.zeros_like(tau), 0.0
        for p, lv in zip(pos, levels, strict=True):
            out += (tau >= p) * (lv - prev)
            prev = lv
        return out
    if style == "surge":
        a = rng.uniform(4, 12)
        return np.expm1(a * tau) / math.expm1(a)
    # "episodic": bursts that come and go, ever more often (onset density ~ tau^q).
    n_ep = min(80, max(2, int(rng.poisson(2 + dur_s / HOUR_S * rng.uniform(1.5, 4)))))
    onsets = rng.random(n_ep) ** (1 / (rng.uniform(1, 3) + 1))
    lengths = np.exp(rng.uniform(math.log(60), math.log(900), n_ep)) / dur_s
    out = np.zeros_like(tau)
    for o, ln, lv in zip(onsets, lengths, rng.uniform(0.4, 1.0, n_ep), strict=True):
        m = (tau >= o) & (tau < o + ln)
        out[m] = np.maximum(out[m], lv)
    return out


class _Fleet:
    """One simulated fleet; ``build()`` runs the stages in a fixed order (determinism)."""

    def __init__(self, cfg: GeneratorConfig) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng(cfg.seed)
        rng = self.rng
        self.start = 1_717_200_000.0 + DAY_S * (cfg.seed % 365)
        self.span = cfg.days * DAY_S
        self.end = self.start + self.span
        self.dt = cfg.interval_s
        self.T, self.N, self.G = int(self.span // self.dt), cfg.nodes, cfg.gpus
        self.tk = self.start + (np.arange(self.T) + 0.5) * self.dt
        self.rack = np.arange(self.N) // NODES_PER_RACK
        self.names = np.array([f"rk{r + 1:02d}-hgx{s + 1}" for r, s in
                               zip(self.rack, np.arange(self.N) % NODES_PER_RACK, strict=True)],
                              dtype=object)
        self.events: list[tuple[float, int, int, int]] = []  # ts, node, gpu (-1), xid
        self.failures: list[_Failure] = []
        self.maint: list[tuple[int, float, float]] = []  # node, down, up (planned reboots)
        shape3 = (self.T, self.N, self.G)
        self.temp_delta = np.zeros(shape3, np.float32)
        self.hbm_delta = np.zeros(shape3, np.float32)
        self.power_delta = np.zeros(shape3, np.float32)
        self.sbe_rate = np.zeros(shape3, np.float32)  # errors per second
        self.crc_rate = np.zeros(shape3, np.float32)
        self.replay_rate = np.zeros(shape3, np.float32)
        self.remap_c = np.zeros(shape3, np.float32)  # increments
        self.remap_u = np.zeros(shape3, np.float32)
        self.dbe_inc = np.zeros(shape3, np.float32)
        self.pending_from: list[tuple[int, int, int]] = []  # k, node, gpu
        self.nic_bw = np.ones((self.T, self.N), np.float32)
        self.nic_lat = np.ones((self.T, self.N), np.float32)
        self.nic_aff = np.zeros((self.T, self.N), np.float32)
        self.comm_slow = np.ones((self.T, self.N), np.float32)
        # Silicon lottery: static per-GPU offsets that never mean anything is wrong.
        self.temp_off = rng.normal(0, 2.5, (self.N, self.G)) + np.where(
            np.arange(self.G) >= self.G / 2, 2.5, 0.0)  # rear GPUs get pre-heated air
        self.therm_res = rng.normal(1.0, 0.05, (self.N, self.G))
        self.pmax = rng.normal(655, 23, (self.N, self.G))
        self.pidle = rng.uniform(65, 95, (self.N, self.G))
        self.sil_clk = BOOST_MHZ - 15 * rng.integers(0, 5, (self.N, self.G))
        self.thr_c = 87 + rng.normal(0, 0.8, (self.N, self.G))
        self.hbm_off = rng.uniform(2, 9, (self.N, self.G))
        # Chronically slow but healthy nodes (a lower power cap, a slow host): never fail.
        self.cap_w = np.full(self.N, 700.0)
        self.chronic = np.ones(self.N)
        for n in rng.choice(self.N, size=min(self.N, int(rng.poisson(self.N / 20))),
                            replace=False):
            if rng.random() < 0.5:
                self.cap_w[n] = rng.uniform(540, 620)
            else:
                self.chronic[n] = rng.uniform(1.05, 1.14)
        self.drop: dict[str, bool] = {k: bool(rng.random() < p)
                                      for k, (p, _) in _OPTIONAL_DROPS.items()}

    # ---- time helpers -------------------------------------------------------------------
    def k(self, t: float) -> int:
        """Index of the first sample whose nominal time is at or after ``t`` (clipped)."""
        return int(min(self.T, max(0, math.ceil((t - self.start) / self.dt - 0.5))))

    def window(self, t0: float, t1: float) -> slice:
        return slice(self.k(t0), self.k(t1))

    def xid(self, t: float, node: int, gpu: int, code: int) -> None:
        if self.start < t < self.end:
            self.events.append((t, node, gpu, code))

    # ---- failures and repairs -----------------------------------------------------------
    def _repair_s(self) -> float:
        # StepFun repair times: median ~20 h, IQR 2-76 h, 10 % under 15 min (a reboot). We keep
        # the quick-reboot share and compress the rest to a median of 5 h so that a two-day
        # trace shows nodes coming back.
        rng = self.rng
        if rng.random() < 0.3:
            s = rng.uniform(600, 2400)
        else:
            s = float(np.clip(rng.lognormal(math.log(5 * HOUR_S), 0.8), HOUR_S, 40 * HOUR_S))
        return max(s, 4 * self.dt)

    def schedule_failures(self) -> None:
        rng, cfg = self.rng, self.cfg
        rate = cfg.failure_rate if cfg.failure_rate is not None else rng.uniform(45, 75)
        # Deliberately ~15x StepFun's 4.2 faults per 1,000 node-days (584 / 400 nodes / 348
        # days) so that a small, short fleet has a handful. Per-node frailty: StepFun's faults
        # cluster on few nodes (one node had 14), so hazards are gamma-distributed, and a node
        # is three times as likely to fail in the 12 h after a repair (repeat faults).
        hazard = rate / 1000 / DAY_S * rng.gamma(0.8, 1 / 0.8, self.N)
        p_sudden = rng.uniform(0.25, 0.35)
        for n in range(self.N):
            t, last_up = self.start - 2 * DAY_S, -math.inf
            while hazard[n] > 0:
                t += rng.exponential(1 / (3 * hazard[n]))
                if t >= self.end - 1:
                    break
                if t - last_up > 12 * HOUR_S and rng.random() > 1 / 3:
                    continue
                f = self._draw_failure(t, n, last_up, p_sudden)
                if f.t_up > self.start:  # one before the start only keeps the node away
                    self.failures.append(f)
                last_up = t = f.t_up

    def _draw_failure(self, t: float, n: int, last_up: float, p_sudden: float) -> _Failure:
        rng = self.rng
        sudden = rng.random() < p_sudden
        kinds, weights = (SUDDEN_KINDS, SUDDEN_WEIGHTS) if sudden else (
            PRECURSOR_KINDS, PRECURSOR_WEIGHTS)
        kind = str(rng.choice(kinds, p=np.array(weights) / sum(weights)))
        gpu = int(rng.integers(self.G))
        if kind in ("node", "network") or (kind == "thermal" and rng.random() < 0.55):
            gpu = -1  # a fan (StepFun "Speed Critical") heats the whole node
        # Precursor length: log-uniform between 8 minutes and 18 hours, cut at the last repair.
        pre = 0.0 if sudden else min(_loguniform(rng, 480, 18 * HOUR_S), t - last_up - 60)
        if pre < 300:
            pre = 0.0
        tail = float(rng.integers(0, 4)) * self.dt if gpu >= 0 else 0.0
        t_up = t + tail + self._repair_s()
        return _Failure(t=t, node=n, gpu=gpu, kind=kind, precursor_s=pre, t_down=t + tail,
                        t_up=t_up, burn_in_s=rng.uniform(600, 1800),
                        replaced=gpu >= 0 and rng.random() < 0.6)

    def schedule_maintenance(self) -> None:
        """Planned reboots (driver update, host maintenance): absent a while, counters reset."""
        rng = self.rng
        for n in range(self.N):
            for _ in range(int(rng.poisson(0.012 * self.cfg.days))):
                t0 = rng.uniform(self.start, self.end)
                t1 = t0 + max(rng.uniform(180, 900), 4 * self.dt)
                if all(t1 + HOUR_S < f.t - f.precursor_s or t0 - HOUR_S > f.t_up
                       for f in self.failures if f.node == n):
                    self.maint.append((n, t0, t1))

    def apply_failures(self) -> None:
        for f in self.failures:
            if f.t <= self.start:
                continue
            if f.precursor_s > 0:
                self._precursor(f)
            self._at_failure(f)

    def _precursor(self, f: _Failure) -> None:
        rng, n, g = self.rng, f.node, f.gpu
        t0 = f.t - f.precursor_s
        w = self.window(t0, f.t)
        if w.stop <= w.start:
            return
        tau = ((self.tk[w] - t0) / f.precursor_s).astype(np.float32)
        styles = {
            "ecc": ("ramp", "sigmoid", "episodic", "steps", "surge"),
            "thermal": ("ramp", "sigmoid", "steps", "surge"),
            "nvlink": ("episodic", "ramp", "surge", "steps"),
            "pcie": ("episodic", "steps", "ramp"),
            "network": ("episodic", "episodic", "steps", "ramp", "surge"),
        }[f.kind]
        s = _shape(rng, tau, f.precursor_s, str(rng.choice(styles))).astype(np.float32)
        if f.kind == "ecc":
            # HBM: corrected errors grow, rows get remapped (XID 63), the driver flags a high
            # single-bit rate (XID 92), then the DBE (Llama 3: HBM3 is 17 % of interruptions).
            lo, hi = 0.3 / HOUR_S, 20 / 60
            a = _loguniform(rng, lo, hi)
            strength = math.log(a / lo) / math.log(hi / lo)
            self.sbe_rate[w, n, g] += a * s
            for k in self._pick(s, int(rng.poisson(0.3 + 2.5 * strength)), w.start):
                self.remap_c[k, n, g] += 1
                self.pending_from.append((k, n, g))
                self.xid(self.tk[k] + rng.uniform(-2, 2), n, g, 63)
            if a > 1 / 60 and rng.random() < 0.7:
                for k in self._pick(s**2, int(rng.integers(1, 4)), w.start):
                    self.xid(self.tk[k] + rng.uniform(-2, 2), n, g, 92)
        elif f.kind == "thermal":
            # Thermal interface wear or a failing fan: drift up to throttling, clocks drop.
            # A loaded GPU runs ~20 C under its slowdown point; most drifts get there.
            amp = rng.uniform(12, 34) if rng.random() < 0.8 else rng.uniform(5, 12)
            gpus = [g] if g >= 0 else list(range(self.G))
            fac = np.ones(1) if g >= 0 else rng.uniform(0.6, 1.1, self.G)
            for i, gi in enumerate(gpus):
                self.temp_delta[w, n, gi] += amp * fac[i] * s
                self.hbm_delta[w, n, gi] += amp * fac[i] * rng.uniform(0.5, 1.0) * s
                self.power_delta[w, n, gi] += 0.6 * amp * fac[i] * s  # leakage rises with heat
        elif f.kind == "nvlink":
            a = _loguniform(rng, 0.5 / HOUR_S, 5.0)
            self.crc_rate[w, n, g] += a * s
            # Flit replays slow the node's intra-node collectives a little.
            self.comm_slow[w, n] *= 1 + 0.12 * s * min(1.0, a)
        elif f.kind == "pcie":
            # StepFun: "GPU PCI link width low" is 16 % of its GPU faults.
            self.replay_rate[w, n, g] += _loguniform(rng, 0.3 / HOUR_S, 100 / 60) * s
        else:  # network: a flapping or degrading cable / NIC, visible only to the link probes
            self.nic_bw[w, n] *= 1 - rng.uniform(0.08, 0.7) * s
            self.nic_lat[w, n] *= 1 + _loguniform(rng, 0.3, 8.0) * s
            self.nic_aff[w, n] = np.maximum(self.nic_aff[w, n], rng.uniform(0.5, 1.0))

    def _pick(self, weight: np.ndarray, m: int, offset: int) -> np.ndarray:
        w = weight.astype(np.float64)
        total = float(w.sum())
        if m <= 0 or total <= 0:
            return np.zeros(0, dtype=np.int64)
        return offset + self.rng.choice(len(w), size=m, p=w / total)

    def _at_failure(self, f: _Failure) -> None:
        rng, n, g = self.rng, f.node, f.gpu
        k = self.k(f.t)
        t_x = f.t - rng.uniform(0, 3)
        if f.kind == "ecc":
            if k < self.T:
                self.dbe_inc[k, n, g] += int(rng.integers(1, 4))
                self.remap_u[k, n, g] += 1
                self.pending_from.append((k, n, g))
            code = 48 if rng.random() < 0.4 else (94 if rng.random() < 0.6 else 95)
            self.xid(t_x, n, g, code)
        elif f.kind in ("thermal", "pcie", "gpu"):
            if f.kind == "gpu":
                code = int(rng.choice([79, 79, 119, 62]))
            else:
                code = 79 if rng.random() < (0.8 if f.kind == "pcie" else 0.6) else -1
            if g < 0 and code > 0 and rng.random() < 0.3:
                g = int(rng.integers(self.G))
            if code > 0 and g >= 0:
                self.xid(t_x, n, g, code)
        elif f.kind == "nvlink":
            self.xid(t_x, n, g, 74)

    # ---- benign behaviour (confounders) -------------------------------------------------
    def benign_errors(self) -> None:
        """Steady error rates, bursts that pass, benign row remaps: none of them fail."""
        rng, N, G, days = self.rng, self.N, self.G, self.cfg.days
        for rate, frac, lo, hi in ((self.sbe_rate, 0.04, 1 / (4 * HOUR_S), 1 / 300),
                                   (self.crc_rate, 0.10, 1 / (2 * HOUR_S), 2 / 60),
                                   (self.replay_rate, 0.05, 1 / (6 * HOUR_S), 1 / 600)):
            for idx in np.flatnonzero(rng.random(N * G) < frac):
                rate[:, idx // G, idx % G] += _loguniform(rng, lo, hi)
        for rate, per_node_day, cmax, xid92 in ((self.sbe_rate, 0.25, 300, True),
                                                (self.crc_rate, 0.35, 2000, False),
                                                (self.replay_rate, 0.2, 100, False)):
            for _ in range(int(rng.poisson(per_node_day * N * days))):
                n, g = int(rng.integers(N)), int(rng.integers(G))
                t0 = rng.uniform(self.start, self.end)
                dur = rng.uniform(60, 600)
                count = _loguniform(rng, 3, cmax)
                w = self.window(t0, t0 + dur)
                if w.stop > w.start:
                    rate[w, n, g] += count / max(dur, self.dt * (w.stop - w.start))
                if xid92 and count > 60:
                    self.xid(t0 + dur / 2, n, g, 92)
        for _ in range(int(rng.poisson(0.05 * N * days))):  # a correctable remap, then nothing
            n, g, k = int(rng.integers(N)), int(rng.integers(G)), int(rng.integers(self.T))
            self.remap_c[k, n, g] += 1
            self.pending_from.append((k, n, g))
            self.sbe_rate[max(0, k - 3):k + 1, n, g] += rng.uniform(2, 10) / (4 * self.dt)
            self.xid(self.tk[k], n, g, 63)

    def benign_xids(self) -> None:
        """Application XIDs (13 graphics exception, 31 page fault, 43 channel reset)."""
        rng = self.rng
        for _ in range(int(rng.poisson(0.3 * self.N * self.cfg.days))):
            n, g, t = int(rng.integers(self.N)), int(rng.integers(self.G)), rng.uniform(
                self.start, self.end)
            code = int(rng.choice([13, 31, 31, 43]))
            for i in range(int(rng.integers(1, 4))):
                self.xid(t + 20 * i + rng.uniform(0, 5), n, g, code)

    # ---- jobs and node state ------------------------------------------------------------
    def schedule_jobs(self) -> list[_Job]:
        rng, N = self.rng, self.N
        jobs: list[_Job] = []

        def job(nodes: list[int], t0: float, t1: float) -> _Job:
            c = rng.uniform(1.5, 9.0)
            return _Job(nodes=nodes, t0=t0, t1=t1, compute_s=c, comm_s=c * rng.uniform(0.15, 0.45),
                        mem_frac=rng.uniform(0.6, 0.95))

        big = max(2, round(N * rng.uniform(0.55, 0.85)))
        jobs.append(job(list(range(big)), self.start - DAY_S, self.end + DAY_S))
        n = big
        while N - n >= 2:
            size = min(N - n, int(rng.integers(2, 9)))
            t = self.start - rng.uniform(0, DAY_S)
            while t < self.end:
                t1 = t + _loguniform(rng, 3 * HOUR_S, 30 * HOUR_S)
                if t1 > self.start:
                    jobs.append(job(list(range(n, n + size)), t, t1))
                t = t1 + rng.uniform(600, 2 * HOUR_S)
            n += size
        # Whatever is left over is a spare node that idles the whole time.
        return jobs

    def node_state(self, jobs: list[_Job]) -> None:
        T, N = self.T, self.N
        self.up = np.ones((T, N), bool)
        self.load = np.zeros((T, N), np.float32)
        self.mem_on = np.zeros((T, N), bool)
        self.burn = np.zeros((T, N), bool)
        self.running = np.zeros((T, N), bool)
        self.job_of = np.full((T, N), -1, np.int32)
        self.cmult = np.ones((T, N), np.float32)
        self.extra = np.zeros((T, N), np.float32)
        self.hang = np.zeros((T, N), np.float32)
        self.lost = np.zeros((T, N, self.G), bool)  # a GPU that fell off the bus
        self.resets: list[tuple[int, int, int]] = []  # k, node, replaced gpu or -1
        absences: list[tuple[int, float, float, float]] = []  # node, stop, down, up
        for f in self.failures:
            absences.append((f.node, f.t, f.t_down, f.t_up))
            if f.gpu >= 0 and f.kind in ("pcie", "gpu", "thermal"):
                self.lost[self.window(f.t, f.t_down), f.node, f.gpu] = True
        absences += [(n, t0, t0, t1) for n, t0, t1 in self.maint]
        for n, _stop, down, up in absences:
            self.up[self.window(down, up), n] = False
            self.resets.append((self.k(up), n, -1))
        for f in self.failures:
            if f.replaced:
                self.resets.append((self.k(f.t_up), f.node, f.gpu))
            self.burn[self.window(f.t_up, f.t_up + f.burn_in_s), f.node] = True
        for j, jb in enumerate(jobs):
            self._job_restarts(jb, absences)
            arr = self._job_arrays(jb)
            for n in jb.nodes:
                member = np.zeros(T, bool)
                member[self.window(jb.t0, jb.t1)] = True
                for m, stop, _down, up in absences:
                    if m == n:
                        burn = next((f.burn_in_s for f in self.failures
                                     if f.node == n and f.t_up == up), 0.0)
                        member[self.window(stop, up + burn)] = False
                self.job_of[member, n] = j
                self.load[member, n] = arr["load"][member]
                self.running[member, n] = arr["running"][member]
                self.mem_on[member, n] = arr["mem_on"][member]
                self.cmult[member, n] = arr["cmult"][member]
                self.extra[member, n] = arr["extra"][member]
                self.hang[member, n] = arr["hang"][member]
        self.load[self.burn] = 1.0  # post-repair stress test (StepFun's "Stress Test" class)
        self.mem_on |= self.burn
        self.load[~self.up] = 0
        self.jobs = jobs

    def _job_restarts(self, jb: _Job, absences: list[tuple[int, float, float, float]]) -> None:
        """A member's failure or planned reboot kills the job; rejoining restarts it again."""
        rng = self.rng
        for n, stop, _down, up in absences:
            if n not in jb.nodes or not jb.t0 < stop < jb.t1:
                continue
            jb.restarts.append((stop, rng.uniform(240, 900)))
            for m in jb.nodes:
                for g in range(self.G):
                    if m != n and rng.random() < 0.3:  # XID 45: processes killed, cleanup
                        self.xid(stop + rng.uniform(2, 30), m, g, 45)
            burn = next((f.burn_in_s for f in self.failures if f.node == n and f.t_up == up), 0.0)
            if jb.t0 < up + burn < jb.t1:
                jb.restarts.append((up + burn, rng.uniform(180, 480)))
        # Application crashes (a bad batch, a bug): XID 13/31/43 on one node, then a restart.
        span = max(0.0, min(jb.t1, self.end) - max(jb.t0, self.start))
        for _ in range(int(rng.poisson(span / (36 * HOUR_S)))):
            t = rng.uniform(max(jb.t0, self.start), min(jb.t1, self.end))
            n = int(rng.choice(jb.nodes))
            code = int(rng.choice([13, 31, 43]))
            for g in rng.choice(self.G, size=int(rng.integers(1, self.G + 1)), replace=False):
                self.xid(t + rng.uniform(0, 3), n, int(g), code)
            jb.restarts.append((t + 5, rng.uniform(300, 900)))

    def _job_arrays(self, jb: _Job) -> dict[str, np.ndarray]:
        rng, T = self.rng, self.T
        load = np.zeros(T, np.float32)
        running, mem_on = np.zeros(T, bool), np.zeros(T, bool)
        cmult, extra, hang = np.ones(T, np.float32), np.zeros(T, np.float32), np.zeros(T,
                                                                                      np.float32)
        w = self.window(jb.t0, jb.t1)
        load[w], running[w], mem_on[w] = 1.0, True, True
        step = jb.compute_s + jb.comm_s
        lo, hi = max(jb.t0, self.start - DAY_S), min(jb.t1, self.end)
        # Checkpoints every 20-60 min (GPUs mostly wait on storage; the step that holds it is
        # long) and evaluations every 2-6 h (slower steps). Everyone on the job slows together.
        period, dur = rng.uniform(1200, 3600), rng.uniform(40, 240)
        for t in np.arange(lo + rng.uniform(0, period), hi, period):
            c = self.window(t, t + dur)
            load[c] = np.minimum(load[c], 0.25)
            extra[c] += rng.uniform(0.5, 2.5) * step
        period, dur = rng.uniform(2, 6) * HOUR_S, rng.uniform(300, 900)
        for t in np.arange(lo + rng.uniform(0, period), hi, period):
            c = self.window(t, t + dur)
            load[c] = np.minimum(load[c], 0.65)
            cmult[c] *= 1.2
            extra[c] += 0.3 * jb.compute_s
        # Job-wide stalls (storage hiccup, a slow collective): no step completes, then one
        # very long step, mostly spent waiting in a collective.
        for _ in range(int(rng.poisson((hi - lo) / (12 * HOUR_S)))):
            t, d = rng.uniform(lo, hi), rng.uniform(120, 900)
            c = self.window(t, t + d)
            load[c] = np.minimum(load[c], 0.03)
            running[c] = False
            if c.stop < T:
                hang[c.stop] += d * min(1.0, step / self.dt)
        for t, d in [(jb.t0, 0.0), *jb.restarts]:
            c = self.window(t, t + d)
            load[c], running[c], mem_on[c] = 0.0, False, False
            ramp = self.window(t + d, t + d + rng.uniform(90, 300))
            load[ramp], running[ramp] = np.minimum(load[ramp], 0.3), False
        return {"load": load, "running": running, "mem_on": mem_on, "cmult": cmult,
                "extra": extra, "hang": hang}

    # ---- GPU gauges ---------------------------------------------------------------------
    def _smooth_noise(self, sigma: float, every_s: float, shape: tuple[int, ...]) -> np.ndarray:
        """Slowly varying noise: knots every ``every_s`` joined by straight lines."""
        step = max(1.0, every_s / self.dt)
        knots = self.rng.normal(0, sigma, (int(self.T / step) + 2, *shape)).astype(np.float32)
        pos = np.arange(self.T) / step
        i0 = pos.astype(np.int64)
        wt = (pos - i0).astype(np.float32).reshape(-1, *([1] * len(shape)))
        return np.asarray(knots[i0] * (1 - wt) + knots[i0 + 1] * wt)

    def gpu_gauges(self) -> dict[str, np.ndarray]:
        rng, T, N, G = self.rng, self.T, self.N, self.G
        R = int(self.rack.max()) + 1
        # Inlet air per rack: a diurnal swing of the chillers plus rack cooling events (a CRAH
        # unit trips, a door left open): +3-18 C on every GPU of the rack for 15-120 min.
        hours = (self.tk - self.start) / HOUR_S
        inlet = (rng.uniform(22, 27, R)[None, :]
                 + rng.uniform(0.5, 2, R)[None, :] * np.sin(
                     2 * np.pi * hours[:, None] / 24 + rng.uniform(0, 6.3, R)[None, :])
                 + self._smooth_noise(0.4, 1800, (R,)))
        for _ in range(int(rng.poisson(0.5 * R * self.cfg.days))):
            r, t0 = int(rng.integers(R)), rng.uniform(self.start - HOUR_S, self.end)
            dur, rise = rng.uniform(900, 7200), rng.uniform(180, 600)
            amp = _loguniform(rng, 3, 18)  # the strongest push the hottest GPUs into throttling
            x = self.tk - t0
            inlet[:, r] += amp * np.clip(np.minimum(x / rise, (dur - x) / rise), 0, 1)
        amb = inlet[:, self.rack].astype(np.float32)[:, :, None]  # (T, N, 1)
        load = self.load[:, :, None]
        demand = (self.pidle + (self.pmax - self.pidle) * load ** 1.15
                  + self.power_delta * (load > 0.1)
                  + (rng.normal(0, 10, (T, N, G)).astype(np.float32)
                     + self._smooth_noise(8, 300, (N, G))) * np.where(load > 0.1, 1.0, 0.15)
                  ).astype(np.float32)
        cap = self.cap_w[None, :, None]
        p_throttle = demand > cap
        f_pow = np.where(p_throttle, np.sqrt(cap / np.maximum(demand, 1)), 1).astype(np.float32)
        base_temp = (amb + 9 + self.temp_off + self._smooth_noise(0.8, 240, (N, G))
                     + self.temp_delta)
        target = base_temp + 0.052 * self.therm_res * np.minimum(demand, cap)
        excess = target - self.thr_c
        t_throttle = excess > 0
        f_th = np.where(t_throttle, np.clip(1 - 0.04 * excess, 0.45, 1), 1).astype(np.float32)
        power = np.minimum(demand, cap - np.abs(rng.normal(0, 3, (T, N, G)))) * f_th ** 1.3
        target = base_temp + 0.052 * self.therm_res * power
        temp = np.where(t_throttle, self.thr_c + 0.3 * excess, target).astype(np.float32)
        temp = self._lag(temp, tau_s=60.0)
        active = load > 0.05
        clk = np.where(active, self.sil_clk * f_pow * f_th, IDLE_MHZ) + rng.normal(
            0, 6, (T, N, G))
        # The node's compute time scales with its GPUs' slowdown: mean for the node's own
        # compute, max for the slowest rank that gates the whole job.
        ratio = np.where(active, self.sil_clk / np.maximum(clk, 1), 1.0)
        self.slow_mean, self.slow_max = ratio.mean(axis=2), ratio.max(axis=2)
        util = np.clip(load * rng.uniform(0.96, 1.0, (T, N, G)) + rng.normal(0, 0.01, (T, N, G))
                       * active, 0, 1)
        mem_job = np.zeros((T, N, 1), np.float32)
        for j, jb in enumerate(self.jobs):
            mem_job[:, :, 0] = np.where(self.job_of == j, jb.mem_frac * HBM_BYTES,
                                        mem_job[:, :, 0])
        mem_job[:, :, 0] = np.where(self.burn, 0.85 * HBM_BYTES, mem_job[:, :, 0])
        mem = np.where(self.mem_on[:, :, None], mem_job * rng.normal(1, 0.01, (1, N, G)),
                       0.55 * GIB) + rng.normal(0, 0.002 * GIB, (T, N, G)) * self.mem_on[:, :, None]
        hbm = temp + self.hbm_off + 2 * load + self.hbm_delta + rng.normal(0, 0.4, (T, N, G))
        out = {
            "gpu.utilization": np.round(util, 2),
            "gpu.memory.used": np.round(np.clip(mem, 0, HBM_BYTES) / 2**20) * 2**20,
            "gpu.temperature": np.round(temp),
            "gpu.memory.temperature": np.round(hbm),
            "gpu.power": np.round(power, 2),
            "gpu.clock.sm": np.minimum(np.round(clk / 15) * 15, BOOST_MHZ),
            "gpu.throttle.thermal": t_throttle.astype(np.float32),
            "gpu.throttle.power": (p_throttle & active).astype(np.float32),
        }
        return {k: v.astype(np.float32) for k, v in out.items()}

    def _lag(self, x: np.ndarray, *, tau_s: float) -> np.ndarray:
        """First-order thermal lag as a short causal exponential filter."""
        taps = min(30, math.ceil(4 * tau_s / self.dt))
        if taps <= 1:
            return x
        w = np.exp(-np.arange(taps) * self.dt / tau_s)
        w /= w.sum()
        out = x * np.float32(w[0])
        for i in range(1, taps):
            out[i:] += x[:-i] * np.float32(w[i])
            out[:i] += x[0] * np.float32(w[i])  # the past before the trace was like its start
        return out

    # ---- cumulative counters ------------------------------------------------------------
    def counters(self) -> dict[str, np.ndarray]:
        rng, T, N, G = self.rng, self.T, self.N, self.G
        up = self.up[:, :, None]
        down_at_start = ~self.up[0]
        out: dict[str, np.ndarray] = {}
        for name, rate, base_scale in (("gpu.ecc.sbe", self.sbe_rate, 20.0),
                                       ("gpu.pcie.replay", self.replay_rate, 5.0),
                                       ("gpu.nvlink.crc_errors", self.crc_rate, 50.0)):
            lam = rate * np.float32(self.dt) * up
            inc = np.zeros((T, N, G), np.float64)
            cols = np.flatnonzero(lam.reshape(T, -1).any(axis=0))
            flat = inc.reshape(T, -1)
            flat[:, cols] = rng.poisson(lam.reshape(T, -1)[:, cols])
            # Volatile counters count since the last driver load: days of steady errors.
            base = np.floor(rate[0] * rng.uniform(1, 20, (N, G)) * DAY_S
                            + rng.geometric(1 / base_scale, (N, G)) * (rng.random((N, G)) < 0.2))
            out[name] = self._cumulate(inc, base * ~down_at_start[:, None], persistent=False)
        base_dbe = np.zeros((N, G))
        out["gpu.ecc.dbe"] = self._cumulate(self.dbe_inc.astype(np.float64), base_dbe,
                                            persistent=False)
        # Remapped rows persist in the InfoROM across reboots; only a new GPU starts at 0.
        old = rng.random((N, G)) < 0.03
        out["gpu.rows.remapped.correctable"] = self._cumulate(
            self.remap_c.astype(np.float64), old * rng.integers(1, 8, (N, G)), persistent=True)
        out["gpu.rows.remapped.uncorrectable"] = self._cumulate(
            self.remap_u.astype(np.float64), (rng.random((N, G)) < 0.005) * 1.0, persistent=True)
        pending = np.zeros((T, N, G), np.float32)
        for k, n, g in self.pending_from:
            nxt = min([kr for kr, m, _ in self.resets if m == n and kr > k], default=T)
            pending[k:nxt, n, g] = 1
        out["gpu.rows.remap.pending"] = pending
        return out

    def _cumulate(self, inc: np.ndarray, base: np.ndarray, *, persistent: bool) -> np.ndarray:
        c = np.cumsum(inc, axis=0)
        c += base
        for k, n, g in sorted(self.resets):
            # Volatile counters reset with the node; persistent ones only on a new GPU.
            if persistent != (g >= 0):
                continue
            sel = slice(None) if g < 0 else g
            if k <= 0:
                c[:, n, sel] -= c[0, n, sel] - inc[0, n, sel]
            elif k < self.T:
                c[k:, n, sel] -= c[k - 1, n, sel]
        return c.astype(np.float32)  # counts stay far below 2**24, exact in float32

    # ---- training metrics ---------------------------------------------------------------
    def node_metrics(self) -> dict[str, np.ndarray]:
        rng, T, N = self.rng, self.T, self.N
        comp = np.full((T, N), np.nan)
        coll = np.full((T, N), np.nan)
        stepd = np.full((T, N), np.nan)
        for j, jb in enumerate(self.jobs):
            member = self.job_of == j
            if not member.any():
                continue
            c = jb.compute_s * self.cmult * self.chronic[None, :]
            mine = c * self.slow_mean * (1 + rng.normal(0, 0.012, (T, N)))
            gate = np.where(member, c * self.slow_max, 0).max(axis=1)
            comm = jb.comm_s * np.where(member, self.comm_slow, 1).max(axis=1)
            wait = np.maximum(gate[:, None] - mine, 0) + comm[:, None] * (
                1 + rng.normal(0, 0.03, (T, N))) + self.hang
            st = mine + wait + self.extra + 0.01 * jb.compute_s + 0.08 * (mine - c)
            comp = np.where(member, mine, comp)
            coll = np.where(member, np.maximum(wait, 1e-3), coll)
            stepd = np.where(member, st, stepd)
        return {"train.step.duration": np.round(stepd, 4),
                "train.compute.duration": np.round(comp, 4),
                "train.collective.duration": np.round(coll, 4)}

    # ---- link probes --------------------------------------------------------------------
    def links(self, visible: np.ndarray) -> pd.DataFrame:
        rng, N, L = self.rng, self.N, self.cfg.link_interval_s
        rounds = int(self.span // L)
        r = np.repeat(np.arange(rounds), 2 * N)
        src = np.tile(np.concatenate([np.arange(N), np.arange(N)]), rounds)
        # Each round every node probes its ring neighbour and one rotating peer.
        off = np.where(np.tile(np.repeat([0, 1], N), rounds) == 0, 1,
                       2 + r % max(1, N - 2) if N > 2 else 1)
        dst = (src + off) % N
        ts = self.start + (r + 0.1) * L + 0.8 * L * src / N + rng.uniform(0, 0.05 * L, len(r))
        k = np.clip(((ts - self.start) / self.dt).astype(np.int64), 0, self.T - 1)
        same_rack = self.rack[src] == self.rack[dst]
        pair_eff = rng.uniform(0.93, 0.985, (N, N))
        busy = (self.load[k, src] > 0.5) | (self.load[k, dst] > 0.5)
        bw = LINK_BYTES_S * pair_eff[src, dst] * np.exp(rng.normal(0, 0.015, len(r)))
        bw *= 1 - busy * rng.uniform(0, 0.12, len(r))
        lat = np.where(same_rack, 2.1e-6, 3.3e-6) * np.exp(rng.normal(0, 0.08, len(r)))
        spike = rng.random(len(r)) < 0.004 + 0.02 * busy  # contention, a slow probe
        lat = np.where(spike, lat * rng.uniform(1.5, 6, len(r)), lat)
        bw = np.where(rng.random(len(r)) < 0.003, bw * rng.uniform(0.3, 0.8, len(r)), bw)
        # Leaf-switch congestion: every node of a rack sees worse probes for a while.
        R = int(self.rack.max()) + 1
        for _ in range(int(rng.poisson(0.5 * R * self.cfg.days))):
            rk, t0 = int(rng.integers(R)), rng.uniform(self.start, self.end)
            hit = (((self.rack[src] == rk) | (self.rack[dst] == rk))
                   & (ts > t0) & (ts < t0 + rng.uniform(300, 2400))
                   & (rng.random(len(r)) < 0.7))
            bw = np.where(hit, bw * rng.uniform(0.55, 0.9, len(r)), bw)
            lat = np.where(hit, lat * rng.uniform(1.3, 4, len(r)), lat)
        for node in (src, dst):
            aff = rng.random(len(r)) < self.nic_aff[k, node]
            bw = np.where(aff, bw * self.nic_bw[k, node], bw)
            lat = np.where(aff, lat * self.nic_lat[k, node], lat)
        keep = visible[k, src] & visible[k, dst] & (rng.random(len(r)) > 0.005)
        return pd.DataFrame({
            "ts": ts[keep], "src": self.names[src[keep]], "dst": self.names[dst[keep]],
            "net.link.bandwidth": np.round(np.minimum(bw[keep], 0.99 * LINK_BYTES_S), -6),
            "net.link.latency": np.round(lat[keep], 8)})

    # ---- telemetry gaps and assembly ----------------------------------------------------
    def gaps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Masks of what the exporter (GPU rows), the hook (node rows) and the collector kept."""
        rng, T, N = self.rng, self.T, self.N
        outage = np.zeros(T, bool)
        for _ in range(int(rng.poisson(1.0 * self.cfg.days))):  # the collector restarts
            t0 = rng.uniform(self.start, self.end)
            outage[self.window(t0, t0 + rng.uniform(120, 600))] = True
        exporter = np.ones((T, N), bool)
        hook = np.ones((T, N), bool)
        for mask, per_node_day in ((exporter, 0.5), (hook, 0.3)):
            for _ in range(int(rng.poisson(per_node_day * N * self.cfg.days))):
                n, t0 = int(rng.integers(N)), rng.uniform(self.start, self.end)
                mask[self.window(t0, t0 + _loguniform(rng, 60, 2400)), n] = False
        return exporter & ~outage[:, None], hook & ~outage[:, None], ~outage

    def _reported(self, e: tuple[float, int, int, int]) -> bool:
        """A down node reports nothing; an idle GPU runs no application that could fault."""
        k = min(self.T - 1, max(0, math.floor((e[0] - self.start) / self.dt - 0.5)))
        return bool(self.up[k, e[1]]) and (e[3] not in (13, 31, 43) or self.load[k, e[1]] > 0.2)

    def build(self) -> FleetTrace:
        rng, T, N, G = self.rng, self.T, self.N, self.G
        self.schedule_failures()
        self.schedule_maintenance()
        self.apply_failures()
        self.benign_errors()
        self.benign_xids()
        self.node_state(self.schedule_jobs())
        # A derived exporter stamps every GPU of a node at once, at its own phase and jitter.
        phase = rng.uniform(-0.3, 0.3, N) * self.dt
        jitter = rng.uniform(-0.04, 0.04, (T, N)) * self.dt
        exporter, hook, collector = self.gaps()
        metrics = {**self.gpu_gauges(), **self.counters()}
        keep = (self.up & exporter)[:, :, None] & ~self.lost & (rng.random((T, N, G)) > 0.002)
        flat = np.flatnonzero(keep)
        ts_grid = self.tk[:, None] + phase[None, :] + jitter
        # Sorting the indices here is several times cheaper than sorting the frame.
        flat = flat[np.argsort(ts_grid.reshape(-1)[flat // G], kind="stable")]
        kk, rest = np.divmod(flat, N * G)
        nn, gg = np.divmod(rest, G)
        gpu_cols: dict[str, np.ndarray] = {"ts": ts_grid[kk, nn], "node": self.names[nn],
                                           "gpu": gg.astype(np.int64)}
        dropped = {c for key, (_, cols) in _OPTIONAL_DROPS.items() if self.drop[key]
                   for c in cols}
        old_driver = rng.random(N) < 0.2  # some nodes' exporter lacks HBM temperature
        for name in ("gpu.utilization", "gpu.memory.used", "gpu.temperature",
                     "gpu.memory.temperature", "gpu.power", "gpu.clock.sm",
                     "gpu.throttle.thermal", "gpu.throttle.power", "gpu.ecc.sbe",
                     "gpu.ecc.dbe", "gpu.rows.remapped.correctable",
                     "gpu.rows.remapped.uncorrectable", "gpu.rows.remap.pending",
                     "gpu.pcie.replay", "gpu.nvlink.crc_errors"):
            if name in dropped:
                continue
            # Round in float64: the float32 work arrays would print as 0.9900000095367432.
            col = np.round(metrics[name].reshape(-1)[flat].astype(np.float64),
                           2 if name in ("gpu.utilization", "gpu.power") else 0)
            if name == "gpu.memory.temperature":
                col[old_driver[nn]] = np.nan
            if not name.startswith(("gpu.ecc", "gpu.rows", "gpu.pcie", "gpu.nvlink")):
                col[rng.random(len(col)) < 0.0005] = np.nan  # a field read that timed out
            gpu_cols[name] = col
        gpu = pd.DataFrame(gpu_cols)

        train = self.node_metrics()
        nkeep = self.running & self.up & hook & (self.job_of >= 0)
        nk, nn2 = np.nonzero(nkeep)
        node = pd.DataFrame({"ts": ts_grid[nk, nn2] + 0.01 * self.dt, "node": self.names[nn2],
                             **{m: v[nk, nn2] for m, v in train.items()}})
        node = node.sort_values("ts", kind="stable").reset_index(drop=True)
        links = self.links(self.up & collector[:, None]).sort_values("ts", kind="stable")
        ev = sorted(e for e in self.events if self._reported(e))
        events = pd.DataFrame({"ts": [e[0] for e in ev], "node": self.names[[e[1] for e in ev]]
                               if ev else np.array([], dtype=object),
                               "gpu": np.array([e[2] for e in ev], dtype=np.int64),
                               "kind": ["xid"] * len(ev),
                               "code": np.array([e[3] for e in ev], dtype=np.int64)})
        fl = sorted((f for f in self.failures if self.start < f.t < self.end), key=lambda f: f.t)
        failures = pd.DataFrame({
            "ts": [f.t for f in fl], "node": [str(self.names[f.node]) for f in fl],
            "gpu": np.array([f.gpu for f in fl], dtype=np.int64),
            # fleet-trace.md's kinds: what failed (a GPU, the node's network, the node).
            "kind": [_LEVEL.get(f.kind, "gpu") if f.gpu >= 0 else _LEVEL.get(f.kind, "node")
                     for f in fl],
            "precursor_s": [round(f.precursor_s, 1) for f in fl]})
        meta = TraceMeta(start=self.start, end=self.end, interval_s=self.dt,
                         nodes=tuple(str(x) for x in self.names), gpus_per_node=G,
                         extra={"generator": "benchmarks/third_generator.py",
                                "seed": self.cfg.seed})
        return FleetTrace(meta=meta, gpu=gpu, node=node, links=links.reset_index(drop=True),
                          events=events, failures=failures)


_LEVEL = {"network": "link", "node": "node"}
"""Failure cause -> fleet-trace.md kind, where it is not ``gpu`` (node-wide causes: ``node``)."""


def generate(*, seed: int, nodes: int = 32, gpus: int = 8, days: float = 2.0,
             interval_s: float = 30.0, link_interval_s: float | None = None,
             failure_rate: float | None = None) -> FleetTrace:
    """A synthetic fleet trace with ground-truth failures; the same seed gives the same trace."""
    cfg = GeneratorConfig(seed=seed, nodes=nodes, gpus=gpus, days=days, interval_s=interval_s,
                          link_interval_s=60.0 if link_interval_s is None else link_interval_s,
                          failure_rate=failure_rate)
    return _Fleet(cfg).build()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description="Write a synthetic fleet trace (fleet-trace/1) from an independent "
                    "generator, with ground-truth failures in failures.csv.")
    p.add_argument("out_dir", type=Path, help="trace directory to write (created if needed)")
    p.add_argument("--seed", type=int, default=0, help="random seed; same seed, same trace")
    p.add_argument("--nodes", type=int, default=32, help="nodes in the fleet, four per rack")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--days", type=float, default=2.0, help="length of the trace in days")
    p.add_argument("--interval", type=float, default=30.0,
                   help="GPU and node sampling interval in seconds")
    p.add_argument("--link-interval", type=float, default=None,
                   help="seconds between rounds of link probes (default 60)")
    p.add_argument("--failure-rate", type=float, default=None,
                   help="failures per 1,000 node-days (default: drawn from 45-75 per seed)")
    a = p.parse_args(argv)
    trace = generate(seed=a.seed, nodes=a.nodes, gpus=a.gpus, days=a.days,
                     interval_s=a.interval, link_interval_s=a.link_interval,
                     failure_rate=a.failure_rate)
    write_trace(a.out_dir, trace)
    fl = trace.failures if trace.failures is not None else pd.DataFrame()
    pre = int((fl["precursor_s"] > 0).sum()) if len(fl) else 0
    print(f"wrote {a.out_dir}: {len(trace.gpu)} GPU rows, {len(trace.node)} node rows, "
          f"{len(trace.links)} probes, {len(trace.events)} XIDs, {len(fl)} failures "
          f"({pre} with a precursor)")


if __name__ == "__main__":
    main()
