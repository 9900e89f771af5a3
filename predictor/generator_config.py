"""Configuration of the synthetic fleet generator: fleet, failure mix, precursors, confounders."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from predictor.failure_mix import MODES, Mode, default_mix

PRECURSOR_SHAPES: tuple[str, ...] = ("ramp", "sigmoid", "steps", "episodic", "surge")
"""How a precursor's strength grows (``signatures.precursor_strength``): ``ramp`` along
``u**p``; ``sigmoid`` develops in the middle of the precursor, then holds; ``steps`` jumps a few
times and holds between; ``episodic`` comes and goes, its episodes closer together near the
failure (an intermittent fault: a cracked solder joint, a flapping cable); ``surge`` trickles,
then rises steeply in the last fifth or so."""

DEFAULT_START_TS = 1_767_225_600.0
"""2026-01-01T00:00:00Z."""

# Share of each mode whose failure is preceded by a visible precursor. No public trace gives
# these per mode; they follow the field's experience that memory (ECC/row-remap) and thermal
# trouble usually announce themselves, PCIe/NVLink/NIC often do, and software bugs, GSP
# timeouts and host crashes do not (Llama 3 reports 78% of interruptions as hardware, yet most
# XID 79/119 events arrive without a counter moving first). The rest fail with precursor_s=0.
DEFAULT_PRECURSOR_SHARE: dict[str, float] = {
    "ecc": 0.8, "thermal": 0.9, "nvlink": 0.75, "pcie": 0.7, "gpu_sudden": 0.0,
    "power": 0.6, "fan": 0.85, "nic": 0.65, "node_sudden": 0.0,
}


@dataclass(frozen=True, kw_only=True)
class GeneratorConfig:
    """Everything that shapes one generated fleet trace; vary it to shift the distribution."""

    seed: int = 0
    """Random seed: the same config and seed give the same trace."""
    nodes: int = 32
    """Nodes in the job."""
    gpus_per_node: int = 8
    """GPUs on each node."""
    days: float = 2.0
    """Length of the trace in days."""
    interval_s: float = 30.0
    """GPU and node sampling interval in seconds."""
    link_interval_s: float = 300.0
    """Link probe interval in seconds (each node probes its ring neighbour and a rotating peer)."""
    start_ts: float = DEFAULT_START_TS
    """Unix time of the first sample."""
    failure_rate: float = 4.2
    """Failures per 1,000 node-days (StepFun 4.2, Llama 3 3.8, Meta RSC-1 6.5)."""
    failure_count: int | None = None
    """Number of failures to plan instead of drawing from ``failure_rate`` (fewer are placed
    when every node is already failing or in repair at the drawn times)."""
    mix: Mapping[str, float] = field(default_factory=default_mix)
    """Relative weight of each failure mode (keys from ``failure_mix.MODES``; missing = 0)."""
    precursor_share: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_PRECURSOR_SHARE))
    """Per mode, the probability that a failure has a precursor."""
    precursor_min_s: float = 600.0
    """Shortest precursor (log-uniform between min and max)."""
    precursor_max_s: float = 8 * 3600.0
    """Longest precursor."""
    intensity_min: float = 0.3
    """Weakest precursor intensity (1 = typical; log-uniform between min and max)."""
    intensity_max: float = 3.0
    """Strongest precursor intensity."""
    precursor_shapes: Mapping[str, float] = field(default_factory=lambda: {"ramp": 1.0})
    """Relative weight of each precursor shape (keys from ``PRECURSOR_SHAPES``): how a
    precursor's strength grows from its start to the failure. The default, a ramp alone, is the
    shape every trace had before shapes could be chosen (the same seed gives the same trace)."""
    noise: float = 1.0
    """Multiplier on gauge measurement noise."""
    repair_scale: float = 1.0
    """Multiplier on repair times drawn from StepFun's distribution (median 20 h)."""
    rack_size: int = 4
    """Nodes per rack (shared cooling and leaf switch)."""
    confounders: float = 1.0
    """Multiplier on every confounder rate below (0 turns them all off)."""
    benign_sbe_fraction: float = 0.04
    """Share of GPUs with a steady, harmless single-bit ECC error rate."""
    clustered_sbe_fraction: float = 0.0
    """Share of GPUs with a weak row that errs often and in clusters (60-300 single-bit errors an
    hour, bunched by the access pattern): harmless, yet it raises XID 92 now and then. Off by
    default, so that a seed's trace and the suites stay what they were, and not in the shipped
    model's training (``confounders._clustered_weak_rows`` says why)."""
    benign_link_fraction: float = 0.03
    """Share of GPUs with a steady, harmless PCIe replay or NVLink CRC rate."""
    slow_node_fraction: float = 0.06
    """Share of nodes that are chronically 4-15% slower but healthy."""
    slow_nic_fraction: float = 0.0
    """Share of nodes on a slower NIC, healthy and steady from the first probe (an older NIC
    generation in a mixed fleet, a port that trained down to a lower rate and stays there): their
    links probe at one factor of 0.45-0.85, drawn for the fleet. Not scaled by ``confounders``
    (at 0.5 the fleet is two kinds of node). Off by default, so that a seed's trace and the
    suites stay what they were, and not in the shipped model's training
    (``confounders._slow_nics`` says why)."""
    cooling_per_rack_day: float = 0.25
    """Rack cooling events (several nodes warm up together, then recover) per rack-day."""
    stalls_per_day: float = 2.0
    """Job-wide stalls (every node's step time spikes) per day."""
    checkpoint_interval_s: float = 7200.0
    """Time between checkpoint phases (0 disables)."""
    eval_interval_s: float = 6 * 3600.0
    """Time between evaluation phases (0 disables)."""
    app_xid_per_gpu_day: float = 0.02
    """Application XIDs (13, 31, 43) on healthy GPUs per GPU-day."""
    benign_remap_per_gpu_day: float = 0.003
    """Isolated harmless row remaps (XID 63) per GPU-day."""
    driver_reload_per_node_day: float = 0.03
    """Counter resets without a failure (driver reloads) per node-day."""
    transient_bursts_per_gpu_day: float = 0.0
    """Short error bursts (SBE, PCIe replay or NVLink CRC) that stop by themselves."""
    burst_min_s: float = 300.0
    """Shortest transient burst (lengths are uniform between this and ``burst_max_s``)."""
    burst_max_s: float = 1800.0
    """Longest transient burst."""
    burst_min_per_min: float = 2.0
    """Lowest error rate of a burst, per minute (uniform up to ``burst_max_per_min``)."""
    burst_max_per_min: float = 40.0
    """Highest error rate of a burst, per minute."""
    fading_bursts_per_gpu_day: float = 0.0
    """Error bursts that rise to a peak and fade over ``fading_min_s``-``fading_max_s`` (a
    marginal connector that settles, a row that is scrubbed): no failure follows."""
    fading_min_s: float = 600.0
    """Shortest fading burst, from its onset to when it has faded (log-uniform lengths)."""
    fading_max_s: float = 7200.0
    """Longest fading burst."""
    outage_per_node_day: float = 0.3
    """Telemetry outages (a node's rows missing for minutes) per node-day."""
    drop_rate: float = 0.002
    """Probability that any single row is missing."""
    congestion_per_day: float = 3.0
    """Network congestion episodes (links of a group of nodes slow down, then recover) per day."""
    ts_jitter_s: float = 0.5
    """Exporter timestamp delay after the nominal sample time (uniform 0..jitter, seconds)."""

    def __post_init__(self) -> None:
        positive = {"nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "days": self.days,
                    "interval_s": self.interval_s, "link_interval_s": self.link_interval_s,
                    "precursor_min_s": self.precursor_min_s, "intensity_min": self.intensity_min,
                    "rack_size": self.rack_size, "burst_min_s": self.burst_min_s,
                    "burst_min_per_min": self.burst_min_per_min,
                    "fading_min_s": self.fading_min_s}
        for name, v in positive.items():
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"generator.{name}={v} must be > 0")
        for name in ("failure_rate", "noise", "repair_scale", "confounders", "drop_rate",
                     "cooling_per_rack_day", "stalls_per_day", "checkpoint_interval_s",
                     "eval_interval_s", "app_xid_per_gpu_day", "benign_remap_per_gpu_day",
                     "driver_reload_per_node_day", "outage_per_node_day", "congestion_per_day",
                     "transient_bursts_per_gpu_day", "fading_bursts_per_gpu_day",
                     "benign_sbe_fraction", "benign_link_fraction", "slow_node_fraction",
                     "slow_nic_fraction", "clustered_sbe_fraction", "ts_jitter_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"generator.{name}={v} must be >= 0")
        for name in ("drop_rate", "benign_sbe_fraction", "benign_link_fraction",
                     "slow_node_fraction", "slow_nic_fraction", "clustered_sbe_fraction"):
            if getattr(self, name) > 1:
                raise ValueError(f"generator.{name}={getattr(self, name)} must be <= 1")
        if self.failure_count is not None and self.failure_count < 0:
            raise ValueError(f"generator.failure_count={self.failure_count} must be >= 0")
        if self.precursor_max_s < self.precursor_min_s:
            raise ValueError(f"generator.precursor_max_s={self.precursor_max_s} must be >= "
                             f"precursor_min_s={self.precursor_min_s}")
        if self.intensity_max < self.intensity_min:
            raise ValueError(f"generator.intensity_max={self.intensity_max} must be >= "
                             f"intensity_min={self.intensity_min}")
        for lo, hi in (("burst_min_s", "burst_max_s"), ("burst_min_per_min", "burst_max_per_min"),
                       ("fading_min_s", "fading_max_s")):
            if not getattr(self, hi) >= getattr(self, lo):
                raise ValueError(f"generator.{hi}={getattr(self, hi)} must be >= "
                                 f"{lo}={getattr(self, lo)}")
        if self.ts_jitter_s >= self.interval_s / 2:
            raise ValueError(f"generator.ts_jitter_s={self.ts_jitter_s} must be < interval_s/2")
        if self.days * 86400 < 2 * self.interval_s:
            raise ValueError(f"generator.days={self.days} must cover at least two samples")
        for name, table, known in (("mix", self.mix, MODES),
                                   ("precursor_share", self.precursor_share, MODES),
                                   ("precursor_shapes", self.precursor_shapes, PRECURSOR_SHAPES)):
            unknown = sorted(set(table) - set(known))
            if unknown:
                raise ValueError(f"generator.{name} has unknown key(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(known)}")
            bad = {k: v for k, v in table.items() if not (math.isfinite(v) and v >= 0)}
            if bad:
                raise ValueError(f"generator.{name} weights must be >= 0, got {bad}")
        for name, table in (("mix", self.mix), ("precursor_shapes", self.precursor_shapes)):
            if sum(table.values()) <= 0:
                raise ValueError(f"generator.{name} must give some key a weight > 0")
        if any(v > 1 for v in self.precursor_share.values()):
            raise ValueError("generator.precursor_share values are probabilities (<= 1)")

    @property
    def ramps_only(self) -> bool:
        """Every precursor is a ramp (the default; no shape is drawn)."""
        return all(v == 0 or k == "ramp" for k, v in self.precursor_shapes.items())

    def mode_weights(self) -> dict[Mode, float]:
        """Normalised weights over every mode."""
        total = sum(self.mix.values())
        return {m: float(self.mix.get(m, 0.0)) / total for m in MODES}
