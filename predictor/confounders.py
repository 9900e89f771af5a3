"""Things that look like trouble in telemetry but are not failures (never in failures.csv).

Each function adds one confounder to a :class:`FleetState`; rates come from
:class:`GeneratorConfig` scaled by ``config.confounders``.
"""

from __future__ import annotations

import numpy as np

from predictor.fleet_sim import FleetState
from predictor.generator_config import GeneratorConfig

APP_XIDS = (13, 31, 43)
"""Application-caused XIDs (graphics exception, MMU fault, GPU stopped processing)."""
RESTART_XID = 45
"""Preemptive cleanup when a job's processes are killed."""


def _count(rng: np.random.Generator, rate_per_day: float, days: float) -> int:
    return int(rng.poisson(max(rate_per_day, 0.0) * days))


def _span(state: FleetState, rng: np.random.Generator, lo_s: float, hi_s: float) -> tuple[int, int]:
    """A random window of lo_s..hi_s seconds as sample indices [k0, k1)."""
    t0 = rng.uniform(state.t[0], state.t[-1])
    return state.index(t0), state.index(t0 + rng.uniform(lo_s, hi_s))


CLUSTER_S = 300.0
"""How long a weak row's errors keep one rate before the access pattern changes it."""


def _clustered_weak_rows(state: FleetState, config: GeneratorConfig) -> None:
    """GPUs whose weak row errs often and in clusters (``clustered_sbe_fraction``): 1-5 corrected
    errors a minute on average, the rate redrawn every ``CLUSTER_S`` from a gamma of shape 0.5
    (the errors come when the job touches the row), so the driver's rule raises XID 92 on them
    now and then (``signatures.sbe_rate_xids``) while the rate never grows. The steady Poisson
    rates above (up to 2 a minute) never reach it, and a held-out generator's GPUs at 120-260
    errors an hour with XID 92 every few hours raised 20 of its 62 false episodes. Not in the
    shipped model's training: trained with it, a model read a corrected-error ramp two minutes
    into its rise at 0.05 instead of 0.29, since a cluster on a weak row looks the same
    (predictor/ROUNDS.md, round 30). Drawn apart, so the rest of the fleet stays what the seed
    made it."""
    rng = np.random.default_rng([config.seed, 701])
    nodes, gpus = state.temp_extra_c.shape[1:]
    chosen = rng.random((nodes, gpus)) < min(1.0, config.clustered_sbe_fraction
                                             * config.confounders)
    n, g = np.nonzero(chosen)
    if not len(n):
        return
    per_min = np.exp(rng.uniform(np.log(1.0), np.log(5.0), len(n)))
    block = max(1, round(CLUSTER_S / state.interval_s))
    k = len(state.t)
    mix = np.repeat(rng.gamma(0.5, 2.0, (-(-k // block), len(n))), block, axis=0)[:k]
    state.inc["gpu.ecc.sbe"][:, n, g] += rng.poisson(mix * per_min * state.interval_s / 60.0)
    state.initial["gpu.ecc.sbe"][n, g] += np.round(per_min * rng.uniform(600, 6000, len(n)))


def _slow_nics(state: FleetState, config: GeneratorConfig) -> None:
    """Nodes on a slower NIC (``slow_nic_fraction``): every probe to or from them reads one
    factor of 0.45-0.85 of nominal bandwidth from the first round on, and never moves. Fleets mix
    NIC generations, and a port can train down to a lower rate and stay there; a held-out
    generator's fleet of two NIC kinds raised node alerts on its slower half for up to 45 hours
    (predictor/ROUNDS.md, rounds 31 and 33), where a failing NIC drops from where its node stood.
    Not in the shipped model's training: trained with up to half the fleet on them, a model let
    go of the node and link false episodes of two held-out generators (33 -> 3) and of 31 of the
    45 link failures the shipped model caught on the suites (round 33). Drawn apart, so the rest
    of the fleet stays what the seed made it."""
    if config.slow_nic_fraction <= 0:
        return
    rng = np.random.default_rng([config.seed, 702])
    nodes = state.link_factor.shape[1]
    chosen = rng.random(nodes) < config.slow_nic_fraction
    state.link_factor[:, chosen] *= rng.uniform(0.45, 0.85)


BURST_COUNTERS: tuple[str, ...] = ("gpu.ecc.sbe", "gpu.pcie.replay", "gpu.nvlink.crc_errors")
"""The corrected-error counters a burst that passes (flat or fading) may run on."""


def add_all(state: FleetState, rng: np.random.Generator, config: GeneratorConfig) -> None:
    """Every confounder of the config into ``state`` (before failures are simulated)."""
    c = config.confounders
    days = config.days
    nodes, gpus = state.temp_extra_c.shape[1:]
    dt_min = state.interval_s / 60.0
    # Background: healthy GPUs see a rare corrected error, replay or CRC burst.
    for name, per_min in (("gpu.ecc.sbe", 2e-5), ("gpu.pcie.replay", 5e-5),
                          ("gpu.nvlink.crc_errors", 5e-5)):
        hits = rng.random(state.inc[name].shape) < per_min * dt_min
        state.inc[name] += hits * rng.integers(1, 4, hits.shape)
    # Steady, harmless error rates on a few GPUs (a known-weak DIMM row, a marginal connector).
    for name, frac in (("gpu.ecc.sbe", config.benign_sbe_fraction),
                       ("gpu.pcie.replay", config.benign_link_fraction / 2),
                       ("gpu.nvlink.crc_errors", config.benign_link_fraction / 2)):
        chosen = rng.random((nodes, gpus)) < min(1.0, frac * c)
        rate = np.exp(rng.uniform(np.log(0.02), np.log(2.0), (nodes, gpus))) * chosen
        state.inc[name] += rng.poisson(rate[None] * dt_min, state.inc[name].shape)
        state.initial[name] += np.round(rate * rng.uniform(60, 3000, (nodes, gpus)))
    _clustered_weak_rows(state, config)
    _slow_nics(state, config)
    slow = rng.random(nodes) < min(1.0, config.slow_node_fraction * c)
    state.compute_factor = np.where(slow, rng.uniform(1.04, 1.15, nodes), 1.0)
    # Half of them are slow for a lower power limit (`nvidia-smi -pl`, a hot aisle's budget):
    # their GPUs run into it most of the time and how often wobbles with the load, a power
    # supply's sag without the failure (drawn apart, so the rest of the fleet stays the same).
    cap_rng = np.random.default_rng([config.seed, 700])
    capped = slow & (cap_rng.random(nodes) < 0.5)
    state.power_cap_w = np.where(capped, cap_rng.uniform(540.0, 640.0, nodes),
                                 state.power_cap_w)
    if c > 0:
        _phases(state, rng, config)
    # Job-wide stalls (a slow storage read, a straggling data loader, an NCCL hiccup) delay every
    # rank together; ByteDance's Minder separates such fleet-wide slowdowns from a faulty machine.
    for _ in range(_count(rng, config.stalls_per_day * c, days)):
        k0, k1 = _span(state, rng, 60, 600)
        state.activity[k0:k1] = np.minimum(state.activity[k0:k1], 0.2)
        state.wait_s[k0:k1] += rng.uniform(5, 60)
    n_racks = int(state.racks.max()) + 1
    for _ in range(_count(rng, config.cooling_per_rack_day * c * n_racks, days)):
        _cooling_event(state, rng, rack=int(rng.integers(n_racks)))
    for _ in range(_count(rng, config.app_xid_per_gpu_day * c * nodes * gpus, days)):
        ts = rng.uniform(state.t[0], state.t[-1])
        n, code = int(rng.integers(nodes)), int(rng.choice(APP_XIDS))
        # An application bug often hits every rank on the node at once.
        on = range(gpus) if rng.random() < 0.4 else [int(rng.integers(gpus))]
        state.events.extend((ts + 0.1 * g, n, g, code) for g in on)
    # A row is remapped because errors recur on it: a few corrected errors in the minutes before
    # (drawn apart, so the rest of the fleet stays what the seed made it).
    remap_rng = np.random.default_rng([config.seed, 63])
    for _ in range(_count(rng, config.benign_remap_per_gpu_day * c * nodes * gpus, days)):
        k, _ = _span(state, rng, 0, 0)
        n, g = int(rng.integers(nodes)), int(rng.integers(gpus))
        k = min(k, len(state.t) - 1)
        k0 = state.index(state.t[k] - 180.0)
        state.inc["gpu.ecc.sbe"][k0:k + 1, n, g] += remap_rng.multinomial(
            int(remap_rng.integers(2, 11)), np.full(k + 1 - k0, 1 / (k + 1 - k0)))
        state.inc["gpu.rows.remapped.correctable"][k, n, g] += 1
        state.pending[k:, n, g] = True
        state.events.append((state.t[k] - 1.0, n, g, 63))
    for _ in range(_count(rng, config.transient_bursts_per_gpu_day * c * nodes * gpus, days)):
        # A burst of errors that stops by itself (a reseated cable, a scrubbed row): no failure.
        k0, k1 = _span(state, rng, config.burst_min_s, config.burst_max_s)
        name = str(rng.choice(BURST_COUNTERS))
        per_sample = rng.uniform(config.burst_min_per_min, config.burst_max_per_min) * dt_min
        n, g = int(rng.integers(nodes)), int(rng.integers(gpus))
        state.inc[name][k0:k1, n, g] += rng.poisson(per_sample, k1 - k0)
    _fading_bursts(state, config, nodes * gpus)
    for _ in range(_count(rng, config.driver_reload_per_node_day * c * nodes, days)):
        k0, k1 = _span(state, rng, 60, 180)
        n = int(rng.integers(nodes))
        state.gpu_present[k0:k1, n] = False
        state.resets.append((k1, n, -1))
    for _ in range(_count(rng, config.outage_per_node_day * c * nodes, days)):
        k0, k1 = _span(state, rng, 120, 1800)
        n = int(rng.integers(nodes))
        state.gpu_present[k0:k1, n] = False
        if rng.random() < 0.5:  # the trainer's own export path may survive a DCGM outage
            state.training[k0:k1, n] = False


FADING_HIDDEN_AFTER_PEAK_S = 900.0
"""How long past a fading burst's peak its rows stay out of training: until its fall shows
(``err_fall_1h`` reads 0 for ten minutes past a peak, about e^0.25 at fifteen)."""


def _fading_bursts(state: FleetState, config: GeneratorConfig, gpus: int) -> None:
    """Error bursts that rise to a peak within their first 10-40% and fade (exponentially,
    down to 5% of the peak by their end). Their rise is a precursor's for as long as it lasts;
    what sets them apart is the fall that follows, which flat bursts that stop never show (an
    alert opened on the fading tail of a burst is a false one). Drawn apart (their own
    generator), so a fleet without them is the same fleet as before they existed.

    The rise and the first minutes past the peak go to ``state.unlabelled``: read as healthy
    there, they taught the model of round 29 that fresh error growth is no failure yet, and it
    warned late of short precursors; only the fall is taught (predictor/ROUNDS.md)."""
    rate = config.fading_bursts_per_gpu_day * config.confounders * gpus
    if rate <= 0:
        return
    rng = np.random.default_rng([config.seed, 71])
    _, nodes, per_node = state.inc["gpu.ecc.sbe"].shape
    for _ in range(_count(rng, rate, config.days)):
        length = float(np.exp(rng.uniform(np.log(config.fading_min_s),
                                          np.log(config.fading_max_s))))
        k0, k1 = _span(state, rng, length, length)
        rel = (state.t[k0:k1] - state.t[k0]) / length
        peak_at = rng.uniform(0.1, 0.4)
        shape = np.where(rel < peak_at, rel / peak_at,
                         np.exp(np.log(0.05) * (rel - peak_at) / (1.0 - peak_at)))
        per_sample = rng.uniform(config.burst_min_per_min, config.burst_max_per_min) * (
            state.interval_s / 60.0)
        name = str(rng.choice(BURST_COUNTERS))
        n, g = int(rng.integers(nodes)), int(rng.integers(per_node))
        state.inc[name][k0:k1, n, g] += rng.poisson(per_sample * shape)
        if k1 > k0:  # its rise (and the first minutes of its fall) is a precursor's to the eye
            t0 = float(state.t[k0])
            state.unlabelled.append((t0, t0 + peak_at * length + FADING_HIDDEN_AFTER_PEAK_S, n, g))


def _phases(state: FleetState, rng: np.random.Generator, config: GeneratorConfig) -> None:
    """Periodic checkpoint and evaluation phases, fleet-wide.

    Every GPU idles at once while a checkpoint is written (Llama 3 reports data-centre power
    swinging by tens of megawatts at checkpoints), so power, utilization and step time move
    together on all nodes: a healthy, fleet-wide pattern.
    """
    span = state.t[-1] - state.t[0]
    if config.checkpoint_interval_s > 0:
        for t0 in np.arange(rng.uniform(0, config.checkpoint_interval_s), span,
                            config.checkpoint_interval_s):
            k0 = state.index(state.t[0] + t0 + rng.normal(0, 60))
            k1 = state.index(state.t[0] + t0 + rng.uniform(60, 240))
            k1 = max(k1, k0 + 1)
            state.activity[k0:k1] = np.minimum(state.activity[k0:k1], 0.15)
            state.step_extra_s[k0:k1] += rng.uniform(20, 120)
    if config.eval_interval_s > 0:
        for t0 in np.arange(rng.uniform(0, config.eval_interval_s), span, config.eval_interval_s):
            k0 = state.index(state.t[0] + t0)
            k1 = state.index(state.t[0] + t0 + rng.uniform(300, 900))
            state.activity[k0:k1] = np.minimum(state.activity[k0:k1], 0.6)
            state.eval_phase[k0:k1] = True


def _cooling_event(state: FleetState, rng: np.random.Generator, *, rack: int) -> None:
    """A rack's inlet air warms for up to two hours and recovers: several nodes heat together."""
    members = np.flatnonzero(state.racks == rack)
    ramp, hold = rng.uniform(600, 1200), rng.uniform(1200, 7200)
    t0 = rng.uniform(state.t[0], state.t[-1])
    rel = state.t - t0
    shape = np.clip(np.minimum(rel / ramp, (2 * ramp + hold - rel) / ramp), 0, 1)
    amp = rng.uniform(4, 12) * rng.uniform(0.7, 1.2, len(members))
    state.temp_extra_c[:, members, :] += (shape[:, None] * amp[None, :])[:, :, None]


def restart(state: FleetState, rng: np.random.Generator, ts: float) -> None:
    """The job restarts from its last checkpoint at ``ts``: every node idles, then warms up."""
    k0 = state.index(ts)
    k1 = state.index(ts + rng.uniform(300, 1200))
    warm = state.index(ts + rng.uniform(1500, 1800))
    state.activity[k0:k1] = 0.0
    state.training[k0:k1] = False
    state.wait_s[k1:warm] += rng.uniform(0.5, 3.0)
    nodes, gpus = state.temp_extra_c.shape[1:]
    killed = rng.random((nodes, gpus)) < 0.03
    for n, g in zip(*np.nonzero(killed), strict=True):
        state.events.append((ts + rng.uniform(1, 30), int(n), int(g), RESTART_XID))
    for n in np.flatnonzero(rng.random(nodes) < 0.05):  # some clusters reload the driver
        state.resets.append((k1, int(n), -1))
