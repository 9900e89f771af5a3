"""Failure signatures: what each failure mode shows in telemetry before and at the failure.

Precursors grow from nothing at ``ts - precursor_s`` to full strength at ``ts`` along
``s = u**p`` (``u`` the elapsed fraction, ``p`` in 1..3, so some ramps are late and steep).
XID meanings follow NVIDIA's XID catalogue: 48 double-bit ECC, 63 row-remap recorded, 74
NVLink error, 79 GPU fell off the bus, 92 high single-bit ECC rate, 94/95 contained/uncontained
ECC error, 119/120 GSP timeout/error.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from collector.metrics import SBE_RATE_WINDOW_S, SBE_RATE_XID_PER_MIN
from predictor.confounders import restart
from predictor.failure_mix import Mode
from predictor.failure_plan import PlannedFailure
from predictor.fleet_sim import FleetState


def precursor_strength(shape: str, u: np.ndarray, p: float, precursor_s: float,
                       rng: np.random.Generator) -> np.ndarray:
    """Strength in [0, 1] at elapsed fractions ``u`` of a precursor ``precursor_s`` long.

    ``ramp`` is ``u**p``. Degradation in the field is rarely that smooth: an HBM stack or a
    cable often misbehaves in spells that come closer together (memory errors come clustered in
    time: in Google's DRAM field study, Schroeder et al. 2009, a month with correctable errors
    makes them 13-228 times likelier the next month), a thermal interface can degrade in a few
    steps, and a fault can trickle for hours and surge at the end. The other shapes draw their
    own parameters from ``rng``."""
    if shape == "ramp":
        return u ** p
    if shape == "sigmoid":  # develops around a midpoint, then holds at full strength
        mid, width = rng.uniform(0.2, 0.7), rng.uniform(0.04, 0.12)
        lo, hi = (1 / (1 + np.exp(-(x - mid) / width)) for x in (0.0, 1.0))
        return np.clip((1 / (1 + np.exp(-(u - mid) / width)) - lo) / (hi - lo), 0, 1)
    if shape == "steps":  # a few jumps of random size, flat between
        jumps = np.sort(rng.uniform(0, 0.95, int(rng.integers(2, 6))))
        levels = np.minimum(np.cumsum(rng.dirichlet(np.ones(len(jumps)))), 1.0)
        return np.concatenate([[0.0], levels])[np.searchsorted(jumps, u, side="right")]
    if shape == "episodic":  # 2-6 spells averaging 1-10 min, closer together towards the
        # failure, which comes in a last spell
        spell = rng.uniform(60, 600) / precursor_s  # mean length, a fraction of the precursor
        n = int(rng.integers(2, 7))
        last = max(rng.exponential(spell), 120.0 / precursor_s)  # the last 2 minutes at least
        starts = np.concatenate([rng.uniform(0, 1, n) ** 0.6, [1.0 - last]])
        ends = starts + np.concatenate([rng.exponential(spell, n), [last]])
        on = ((u[:, None] >= starts) & (u[:, None] <= ends)).any(axis=1)
        return on * (0.3 + 0.7 * u ** p)
    if shape == "surge":  # a trickle, then a steep rise over the last 5-25%
        knee = rng.uniform(0.75, 0.95)
        return 0.1 * u + 0.9 * np.clip((u - knee) / (1 - knee), 0, 1) ** 1.5
    raise ValueError(f"unknown precursor shape {shape!r}")


def _strength(state: FleetState, f: PlannedFailure,
              rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """(first index, s over [first, failure index)) for the precursor of ``f``, in its shape."""
    kf = state.index(f.ts)
    k0 = state.index(f.ts - f.precursor_s)
    length = max(f.precursor_s, 1.0)
    u = np.clip((state.t[k0:kf] - (f.ts - f.precursor_s)) / length, 0, 1)
    p = rng.uniform(1.0, 3.0)  # drawn for every shape: the trace's other draws stay the same
    shape_rng = np.random.default_rng([round(f.ts), f.node, f.gpu + 1])
    return k0, precursor_strength(f.shape, u, p, length, shape_rng)


def _counts(rng: np.random.Generator, per_min: np.ndarray, interval_s: float) -> np.ndarray:
    """Error counts per sample: bursty (gamma-mixed Poisson), as real error counters are."""
    burst = rng.gamma(0.7, 1 / 0.7, np.shape(per_min))
    return rng.poisson(per_min * burst * interval_s / 60.0).astype(float)


def _ecc(state: FleetState, f: PlannedFailure, rng: np.random.Generator) -> None:
    k0, s = _strength(state, f, rng)
    kf = k0 + len(s)
    n, g = f.node, f.gpu
    rate = 0.1 + 40.0 * f.intensity * s  # corrected errors per minute
    state.inc["gpu.ecc.sbe"][k0:kf, n, g] += _counts(rng, rate, state.interval_s)
    if len(s):
        weights = (s + 1e-9) / (s + 1e-9).sum()
        for k in sorted(k0 + rng.choice(len(s), size=rng.poisson(1 + 2 * f.intensity), p=weights)):
            state.inc["gpu.rows.remapped.correctable"][k, n, g] += 1
            state.pending[k:, n, g] = True
            state.events.append((state.t[k] - rng.uniform(0, state.interval_s), n, g, 63))


SBE_RATE_REPEAT_S = 3600.0
"""The driver logs XID 92 again for the same GPU only after this long."""


def sbe_rate_xids(state: FleetState) -> None:
    """XID 92 wherever a GPU's corrected errors run high, whatever their cause.

    The driver reports a high single-bit rate (NVIDIA XID catalogue: "High single bit ECC error
    rate") from the counter alone: it cannot tell a failing HBM stack from a burst that passes or
    a weak row that never fails, so neither can a model that reads XID 92. Emitted here, after
    every precursor and confounder, from the same increments the trace's counter shows.
    """
    inc = state.inc["gpu.ecc.sbe"]
    width = max(1, round(SBE_RATE_WINDOW_S / state.interval_s))
    recent = np.cumsum(inc, axis=0)  # errors in the window that ends at each sample
    recent[width:] -= recent[:-width].copy()
    high = recent >= SBE_RATE_XID_PER_MIN * width * state.interval_s / 60.0
    for n, g in zip(*np.nonzero(high.any(axis=0)), strict=True):
        last = -np.inf
        for k in np.flatnonzero(high[:, n, g]):
            if state.t[k] - last >= SBE_RATE_REPEAT_S:
                last = float(state.t[k])
                state.events.append((last, int(n), int(g), 92))


def _ecc_failure(state: FleetState, f: PlannedFailure, rng: np.random.Generator) -> None:
    k = min(state.index(f.ts), len(state.t) - 1)
    state.inc["gpu.ecc.dbe"][k, f.node, f.gpu] += rng.integers(1, 4)
    state.inc["gpu.rows.remapped.uncorrectable"][k, f.node, f.gpu] += 1
    state.pending[k:, f.node, f.gpu] = True
    state.events.append((f.ts, f.node, f.gpu, 48))
    state.events.append((f.ts + 0.5, f.node, f.gpu, int(rng.choice([94, 95], p=[0.6, 0.4]))))


def _thermal(state: FleetState, f: PlannedFailure, rng: np.random.Generator) -> None:
    k0, s = _strength(state, f, rng)
    # Thermal interface failing: +23..+66 °C on one GPU, so it throttles and slows its node.
    state.temp_extra_c[k0:k0 + len(s), f.node, f.gpu] += (18.0 + 16.0 * f.intensity) * s


def _nvlink(state: FleetState, f: PlannedFailure, rng: np.random.Generator) -> None:
    k0, s = _strength(state, f, rng)
    kf = k0 + len(s)
    rate = 100.0 * f.intensity * s
    crc = state.inc["gpu.nvlink.crc_errors"]
    crc[k0:kf, f.node, f.gpu] += _counts(rng, rate, state.interval_s)
    partner = (f.gpu + 1) % crc.shape[2]  # the other end of the bad link sees some too
    if partner != f.gpu:
        crc[k0:kf, f.node, partner] += _counts(rng, 0.15 * rate, state.interval_s)


def _pcie(state: FleetState, f: PlannedFailure, rng: np.random.Generator) -> None:
    k0, s = _strength(state, f, rng)
    rate = 30.0 * f.intensity * s
    state.inc["gpu.pcie.replay"][k0:k0 + len(s), f.node, f.gpu] += _counts(
        rng, rate, state.interval_s)


def _power(state: FleetState, f: PlannedFailure, rng: np.random.Generator) -> None:
    k0, s = _strength(state, f, rng)
    kf = k0 + len(s)
    gpus = state.power_extra_w.shape[2]
    swing = rng.normal(0, 1, (len(s), gpus)) * (60.0 * f.intensity * s)[:, None]
    dips = (rng.random(len(s)) < 0.2 * s)[:, None] * -250.0  # the PSU sags under the whole node
    state.power_extra_w[k0:kf, f.node] += swing + dips
    flap = rng.random(len(s)) < 0.4 * min(f.intensity, 1.5) * s
    state.power_flap[k0:kf, f.node] |= flap[:, None]


def _fan(state: FleetState, f: PlannedFailure, rng: np.random.Generator) -> None:
    k0, s = _strength(state, f, rng)
    gpus = state.temp_extra_c.shape[2]
    amp = (6.0 + 8.0 * f.intensity) * np.asarray(rng.uniform(0.7, 1.3, gpus))
    state.temp_extra_c[k0:k0 + len(s), f.node] += s[:, None] * amp[None, :]


def _nic(state: FleetState, f: PlannedFailure, rng: np.random.Generator) -> None:
    k0, s = _strength(state, f, rng)
    depth = min(0.9, 0.25 + 0.25 * f.intensity)
    # Flapping: each probe sees a different share of the damage (CRC retries come in bursts).
    jitter = rng.uniform(0.4, 1.4, len(s))
    state.link_factor[k0:k0 + len(s), f.node] *= np.clip(1 - depth * s * jitter, 0.05, 1)


Effect = Callable[[FleetState, PlannedFailure, np.random.Generator], None]
_PRECURSOR: dict[Mode, Effect] = {
    "ecc": _ecc, "thermal": _thermal, "nvlink": _nvlink, "pcie": _pcie, "power": _power,
    "fan": _fan, "nic": _nic,
}
# XID at the failure itself, by mode (ECC has its own counter effects too).
_FAILURE_XIDS: dict[Mode, tuple[tuple[int, ...], tuple[float, ...]]] = {
    "thermal": ((79,), (1.0,)), "nvlink": ((74,), (1.0,)), "pcie": ((79,), (1.0,)),
    "gpu_sudden": ((79, 119, 120), (0.5, 0.35, 0.15)),
}
_OFF_THE_BUS = 79


def apply_failure(state: FleetState, f: PlannedFailure, rng: np.random.Generator) -> None:
    """Precursor (if any), the failure's own events, the node's repair and the job's restarts."""
    if f.precursor_s > 0 and f.mode in _PRECURSOR:
        _PRECURSOR[f.mode](state, f, rng)
    kf = state.index(f.ts)
    drain = 0.0 if f.kind == "node" else rng.uniform(60, 600)
    kd = state.index(f.ts + drain)
    kb = state.index(f.ts + drain + f.repair_s)
    if f.mode == "ecc":
        _ecc_failure(state, f, rng)
    elif f.mode in _FAILURE_XIDS:
        codes, weights = _FAILURE_XIDS[f.mode]
        code = int(rng.choice(codes, p=weights))
        state.events.append((f.ts, f.node, f.gpu, code))
        if code == _OFF_THE_BUS:  # the GPU vanishes at once; the rest of the node drains later
            state.gpu_present[kf:kb, f.node, f.gpu] = False
    state.activity[kf:kb, f.node] = 0.0
    state.training[kf:kb, f.node] = False
    state.node_present[kd:kb, f.node] = False
    restart(state, rng, f.ts)
    if kb < len(state.t):  # back from repair: a replaced GPU or a reloaded driver counts from 0
        state.resets.append((kb, f.node, f.gpu if f.gpu >= 0 and rng.random() < 0.5 else -1))
        if rng.random() < 0.5:  # the job rescales to take the node back
            restart(state, rng, float(state.t[kb]))
