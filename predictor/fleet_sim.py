"""The simulated fleet's state: healthy telemetry of a synchronous training job, and confounders.

Arrays are time-major, ``(T, N, G)`` for GPUs and ``(T, N)`` for nodes, so that every effect is
a vectorized slice; signatures (``predictor/signatures.py``) add to the same arrays. Baseline
figures are an H100 SXM fleet: 1,980 MHz boost clock, 700 W board limit, slowdown near 87 °C,
load temperatures of 60–80 °C, 400 Gb/s NICs between nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_CLOCK_MHZ = 1980.0
IDLE_CLOCK_MHZ = 345.0
POWER_CAP_W = 700.0
IDLE_POWER_W = 90.0
THROTTLE_TEMP_C = 87.0
HBM_BYTES = 80e9
LINK_BYTES_S = 50e9  # 400 Gb/s
COMPUTE_S = 1.6
COMM_S = 0.45

COUNTERS: tuple[str, ...] = (
    "gpu.ecc.sbe", "gpu.ecc.dbe", "gpu.rows.remapped.correctable",
    "gpu.rows.remapped.uncorrectable", "gpu.pcie.replay", "gpu.nvlink.crc_errors",
)


@dataclass
class FleetState:
    """Mutable working arrays of one simulated trace; built by :func:`build_fleet`."""

    t: np.ndarray
    """(T,) nominal sample times."""
    interval_s: float
    racks: np.ndarray
    """(N,) rack index of each node (racks share cooling and a leaf switch)."""
    activity: np.ndarray
    """(T, N) 1 while training, lower in checkpoints/evals/stalls, 0 during restarts."""
    step_extra_s: np.ndarray
    """(T,) job-wide time per step outside compute and collectives (checkpoint writes)."""
    wait_s: np.ndarray
    """(T,) job-wide extra collective wait (stalls, warm-up after restarts)."""
    training: np.ndarray
    """(T, N) bool: the trainer reports step times (node.csv rows exist)."""
    eval_phase: np.ndarray
    """(T,) bool: the job runs evaluation (forward-only steps, less memory)."""
    temp_extra_c: np.ndarray
    """(T, N, G) additive heat from cooling events and precursors."""
    power_extra_w: np.ndarray
    """(T, N, G) additive power swings (power-supply trouble)."""
    power_flap: np.ndarray
    """(T, N, G) bool: a power-brake clock event forced on."""
    compute_factor: np.ndarray
    """(N,) chronic per-node slowness (1 = nominal)."""
    power_cap_w: np.ndarray
    """(N,) each node's GPU power limit (``POWER_CAP_W`` unless an operator lowered it)."""
    inc: dict[str, np.ndarray]
    """Counter increments per sample, (T, N, G) each, keyed by canonical name."""
    initial: dict[str, np.ndarray]
    """Counter values at trace start, (N, G) each."""
    pending: np.ndarray
    """(T, N, G) bool: a row remap waits for a GPU reset."""
    gpu_present: np.ndarray
    """(T, N, G) bool: the GPU's row was exported."""
    node_present: np.ndarray
    """(T, N) bool: the node's exporter and trainer were reachable."""
    link_factor: np.ndarray
    """(T, N) multiplicative bandwidth health of each node's NIC/cable (1 = healthy)."""
    resets: list[tuple[int, int, int]] = field(default_factory=list)
    """Counter resets as (time index, node, gpu), gpu -1 for every GPU of the node."""
    events: list[tuple[float, int, int, int]] = field(default_factory=list)
    """XID events as (ts, node, gpu, code); gpu -1 for node events."""
    unlabelled: list[tuple[float, float, int, int]] = field(default_factory=list)
    """(t0, t1, node, gpu): a GPU's windows that look like a precursor by construction (a burst
    rising to a peak it will fall from): training leaves their rows out (``dataset.collect``)."""

    def index(self, ts: float) -> int:
        """The sample index at or after ``ts`` (clipped to the trace)."""
        return int(np.clip(np.ceil((ts - self.t[0]) / self.interval_s - 1e-9), 0, len(self.t)))


def build_fleet(
    rng: np.random.Generator, *, t: np.ndarray, interval_s: float, nodes: int, gpus: int,
    rack_size: int,
) -> FleetState:
    """A healthy fleet: every node training, no events, counters at small initial values."""
    shape = (len(t), nodes, gpus)
    inc = {name: np.zeros(shape) for name in COUNTERS}
    initial = {name: np.zeros((nodes, gpus)) for name in COUNTERS}
    # Volatile counters since the last driver load: almost all zero, a few GPUs with history.
    initial["gpu.ecc.sbe"] = np.where(rng.random((nodes, gpus)) < 0.1,
                                      rng.integers(1, 40, (nodes, gpus)), 0).astype(float)
    initial["gpu.pcie.replay"] = np.where(rng.random((nodes, gpus)) < 0.1,
                                          rng.integers(1, 20, (nodes, gpus)), 0).astype(float)
    return FleetState(
        t=t, interval_s=interval_s, racks=np.arange(nodes) // rack_size,
        activity=np.ones((len(t), nodes)), step_extra_s=np.zeros(len(t)),
        wait_s=np.zeros(len(t)), training=np.ones((len(t), nodes), dtype=bool),
        eval_phase=np.zeros(len(t), dtype=bool),
        temp_extra_c=np.zeros(shape), power_extra_w=np.zeros(shape),
        power_flap=np.zeros(shape, dtype=bool), compute_factor=np.ones(nodes),
        power_cap_w=np.full(nodes, POWER_CAP_W), inc=inc,
        initial=initial, pending=np.zeros(shape, dtype=bool),
        gpu_present=np.ones(shape, dtype=bool), node_present=np.ones((len(t), nodes), dtype=bool),
        link_factor=np.ones((len(t), nodes)),
    )


def _ema(target: np.ndarray, alpha: float) -> np.ndarray:
    """First-order lag along time (heat capacity): out[k] += alpha (target[k] - out[k-1])."""
    out = np.empty_like(target)
    out[0] = target[0]
    for k in range(1, len(target)):  # T steps of whole-fleet vector ops: fast enough
        out[k] = out[k - 1] + alpha * (target[k] - out[k - 1])
    return out


def render_gauges(state: FleetState, rng: np.random.Generator, *,
                  noise: float) -> dict[str, np.ndarray]:
    """GPU gauges (T, N, G) from the activity and the additive effects in ``state``."""
    shape = state.temp_extra_c.shape
    _, nodes, gpus = shape
    act = state.activity[:, :, None]
    eff = rng.normal(1.0, 0.06, (1, nodes, gpus))  # silicon lottery: a few hit the power cap
    util = np.clip(act * rng.normal(0.95, 0.02 * noise, shape), 0.0, 1.0)
    demand = IDLE_POWER_W + 560.0 * util * eff + rng.normal(0, 12 * noise, shape)
    demand += state.power_extra_w
    cap = state.power_cap_w[None, :, None]
    power = np.clip(np.minimum(demand, cap), 60.0, None)
    throttle_power = (demand > cap - 5) | state.power_flap
    # Ambient: a slow diurnal swing per rack (Llama 3 saw 1-2% throughput swing with mid-day
    # temperatures), plus per-GPU airflow offsets (some slots run hot).
    day = 2 * np.pi * state.t / 86400.0
    phase = rng.uniform(0, 2 * np.pi, state.racks.max() + 1)[state.racks]
    ambient = 24.0 + 1.5 * np.sin(day[:, None] + phase[None, :])
    offset = rng.normal(0, 3.0, (1, nodes, gpus))
    target = ambient[:, :, None] + offset + 0.075 * power + state.temp_extra_c
    alpha = 1.0 - np.exp(-state.interval_s / 120.0)  # ~2 min thermal time constant
    free_running = _ema(target, alpha)
    # Above the slowdown threshold the driver trades clock for heat: the temperature creeps up
    # slowly while the SM clock gives way (about 60 MHz per degree of excess).
    excess = np.clip(free_running - THROTTLE_TEMP_C, 0, None)
    temp = free_running - 0.75 * excess + rng.normal(0, 0.4 * noise, shape)
    mem_temp = temp + 5.0 + rng.normal(0, 0.5 * noise, shape)
    throttle_thermal = (excess > 0) & (temp >= THROTTLE_TEMP_C - 1)
    loaded = MAX_CLOCK_MHZ - excess * 60.0
    loaded = loaded - np.where(throttle_power, rng.uniform(30, 120, shape), 0.0)
    loaded = np.clip(loaded, 900.0, MAX_CLOCK_MHZ)
    clock = np.where(util < 0.05, IDLE_CLOCK_MHZ, np.round(loaded / 15.0) * 15.0)
    mem = np.where(act > 0.05, 0.88 * HBM_BYTES, 0.6e9) + rng.normal(0, 0.2e9, (1, nodes, gpus))
    mem = mem - np.where((act > 0.05) & state.eval_phase[:, None, None], 10e9, 0.0)
    return {
        "gpu.utilization": np.round(util, 3),
        "gpu.memory.used": np.round(np.clip(mem, 0, HBM_BYTES), -6),
        "gpu.temperature": np.round(temp),
        "gpu.memory.temperature": np.round(mem_temp),
        "gpu.power": np.round(power, 1),
        "gpu.clock.sm": clock,
        "gpu.throttle.thermal": throttle_thermal.astype(float),
        "gpu.throttle.power": throttle_power.astype(float),
    }


def render_counters(state: FleetState) -> dict[str, np.ndarray]:
    """Cumulative counters (T, N, G) from increments, with resets to 0 where ``state.resets``."""
    out: dict[str, np.ndarray] = {}
    for name in COUNTERS:
        cum = np.cumsum(state.inc[name], axis=0) + state.initial[name][None]
        base = np.zeros_like(cum)
        for k, n, g in sorted(state.resets):  # later resets overwrite earlier ones
            sel = slice(None) if g < 0 else slice(g, g + 1)
            if 0 < k < len(cum):
                base[k:, n, sel] = cum[k - 1, n, sel]
        out[name] = cum - base
    pending = state.pending.copy()
    for k, n, g in state.resets:  # a GPU reset applies the pending remap
        sel = slice(None) if g < 0 else slice(g, g + 1)
        pending[k:, n, sel] = False
    out["gpu.rows.remap.pending"] = pending.astype(float)
    return out


def render_node(state: FleetState, clock: np.ndarray, rng: np.random.Generator, *,
                noise: float) -> dict[str, np.ndarray]:
    """Per-node step, compute and collective seconds (T, N): the slowest node sets the step."""
    n_t, nodes = state.activity.shape
    loaded = np.where(clock > IDLE_CLOCK_MHZ, clock, MAX_CLOCK_MHZ)
    loaded = np.where(state.gpu_present, loaded, MAX_CLOCK_MHZ)
    slowest = MAX_CLOCK_MHZ / loaded.min(axis=2)  # a node waits for its slowest GPU
    scale = np.where(state.eval_phase, 0.5, 1.0)[:, None]  # eval steps are forward-only
    compute = COMPUTE_S * scale * state.compute_factor[None] * slowest
    compute = compute * (1 + np.abs(rng.normal(0, 0.015 * noise, (n_t, nodes))))
    up = state.training & state.node_present
    job_compute = np.where(up, compute, 0.0).max(axis=1)
    step = job_compute + COMM_S * scale[:, 0] + state.wait_s + state.step_extra_s
    step = step * (1 + np.abs(rng.normal(0, 0.01 * noise, n_t)))
    collective = step[:, None] - compute - state.step_extra_s[:, None]
    return {
        "train.step.duration": np.round(np.broadcast_to(step[:, None], (n_t, nodes)), 4),
        "train.compute.duration": np.round(compute, 4),
        "train.collective.duration": np.round(np.clip(collective, 0.001, None), 4),
    }
