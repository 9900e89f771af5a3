"""The synthetic fleet generator: labelled fleet traces for training and backtesting the predictor.

Evidence behind the defaults is cited where it is used: failure mix and repair times in
``predictor/failure_mix.py``, signatures in ``predictor/signatures.py``, confounders in
``predictor/confounders.py``, healthy H100 telemetry in ``predictor/fleet_sim.py``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace, TraceMeta, write_trace
from collector.metrics import GPU_COLUMNS
from predictor import confounders
from predictor.failure_plan import PlannedFailure, failures_frame, plan_failures
from predictor.fleet_sim import build_fleet, render_counters, render_gauges, render_node
from predictor.generator_config import GeneratorConfig
from predictor.link_probes import build_links
from predictor.signatures import apply_failure, sbe_rate_xids

__all__ = ["GeneratedTrace", "GeneratorConfig", "generate", "generate_trace", "write_generated"]

TRACE_FILES = ("meta.json", "gpu.csv.gz", "node.csv.gz", "links.csv.gz", "events.csv",
               "failures.csv", "failures_detail.csv")
DETAIL_FILE = "failures_detail.csv"
"""Ground truth with the generator's failure mode, intensity and repair time (analysis only)."""


@dataclass(frozen=True, kw_only=True)
class GeneratedTrace:
    """A generated trace and what the generator knows about its failures."""

    trace: FleetTrace
    """The fleet trace, ``failures`` included."""
    plan: tuple[PlannedFailure, ...]
    """The simulated failures (mode, intensity, repair time) in time order."""

    def detail(self) -> pd.DataFrame:
        """failures.csv columns plus mode, intensity and repair_s."""
        return failures_frame(list(self.plan), list(self.trace.meta.nodes), detail=True)


def node_names(count: int) -> list[str]:
    return [f"node{i:03d}" for i in range(count)]


def generate(config: GeneratorConfig) -> GeneratedTrace:
    """Simulate one trace; the same config (seed included) always gives the same trace."""
    rng = np.random.default_rng(config.seed)
    n_t = int(config.days * 86400.0 / config.interval_s)
    t = config.start_ts + np.arange(n_t) * config.interval_s
    names = np.array(node_names(config.nodes))
    plan = plan_failures(config, rng)
    state = build_fleet(rng, t=t, interval_s=config.interval_s, nodes=config.nodes,
                        gpus=config.gpus_per_node, rack_size=config.rack_size)
    confounders.add_all(state, rng, config)
    for failure in plan:
        apply_failure(state, failure, rng)
    sbe_rate_xids(state)
    gauges = render_gauges(state, rng, noise=config.noise)
    counters = render_counters(state)
    node_cols = render_node(state, gauges["gpu.clock.sm"], rng, noise=config.noise)
    drop = config.drop_rate * config.confounders
    jitter = rng.uniform(0.0, config.ts_jitter_s, (n_t, config.nodes))
    stamp = t[:, None] + jitter

    gpu_mask = state.gpu_present & state.node_present[:, :, None]
    gpu_mask &= rng.random(gpu_mask.shape) >= drop
    k, n, g = np.nonzero(gpu_mask)
    gpu = pd.DataFrame({"ts": np.round(stamp[k, n], 3), "node": names[n], "gpu": g})
    columns = {**gauges, **counters}
    for name in GPU_COLUMNS:  # catalogue order
        gpu[name] = columns[name][gpu_mask]
    node_mask = state.training & state.node_present & (rng.random(state.training.shape) >= drop)
    k, n = np.nonzero(node_mask)
    node = pd.DataFrame({"ts": np.round(stamp[k, n], 3), "node": names[n]})
    for name, values in node_cols.items():
        node[name] = values[node_mask]
    events = _events(state, names)
    links = build_links(state, rng, config, names).sort_values("ts", kind="stable")
    end = max(float(t[-1]), *(float(f["ts"].max()) for f in (gpu, node, links) if len(f)))
    trace = FleetTrace(
        meta=TraceMeta(
            start=float(t[0]), end=end, interval_s=config.interval_s,
            nodes=tuple(names), gpus_per_node=config.gpus_per_node,
            extra={"generator": _config_json(config), **_unlabelled(state, names)},
        ),
        gpu=gpu.sort_values("ts", kind="stable").reset_index(drop=True),
        node=node.sort_values("ts", kind="stable").reset_index(drop=True),
        links=links.reset_index(drop=True),
        events=events,
        failures=failures_frame(plan, list(names)),
    )
    return GeneratedTrace(trace=trace, plan=tuple(plan))


def _events(state: confounders.FleetState, names: np.ndarray) -> pd.DataFrame:
    """XID events of nodes that were up to report them, in time order."""
    rows = []
    for ts, n, g, code in state.events:
        k = state.index(ts)
        up = k >= len(state.t) or state.node_present[k, n]
        if up and state.t[0] <= ts <= state.t[-1]:
            rows.append((round(float(ts), 3), str(names[n]), int(g), "xid", int(code)))
    frame = pd.DataFrame(rows, columns=["ts", "node", "gpu", "kind", "code"])
    frame = frame.astype({"ts": "float64", "gpu": "int64", "code": "int64"})
    return frame.sort_values("ts", kind="stable").reset_index(drop=True)


def _unlabelled(state: confounders.FleetState, names: np.ndarray) -> dict[str, object]:
    """``{"unlabelled": [[t0, t1, node, gpu], ...]}`` when the fleet has such windows (see
    ``FleetState.unlabelled``), else nothing, so other traces' meta stays as it was."""
    if not state.unlabelled:
        return {}
    return {"unlabelled": [[round(t0, 3), round(t1, 3), str(names[n]), int(g)]
                           for t0, t1, n, g in state.unlabelled]}


def _config_json(config: GeneratorConfig) -> dict[str, object]:
    out = dataclasses.asdict(config)
    out["mix"] = {k: round(float(v), 6) for k, v in config.mix.items()}
    out["precursor_share"] = {k: float(v) for k, v in config.precursor_share.items()}
    return out


def generate_trace(config: GeneratorConfig) -> FleetTrace:
    """The generated fleet trace, ``failures`` included."""
    return generate(config).trace


def write_generated(out_dir: Path | str, generated: GeneratedTrace) -> Path:
    """Write the trace (fleet-trace/1 with failures.csv) plus ``failures_detail.csv``."""
    out = Path(out_dir)
    trace = generated.trace
    for name in TRACE_FILES:  # an empty frame writes no file: do not leave an older one behind
        (out / name).unlink(missing_ok=True)
    # Whole-number columns (counters, clocks, flags, °C) written as integers: CSV formatting
    # dominates the write time and integers format about a third faster than floats.
    gpu = trace.gpu.copy()
    for column in gpu.columns[3:]:
        values = gpu[column].to_numpy()
        if np.isfinite(values).all() and (values == np.round(values)).all():
            gpu[column] = values.astype(np.int64)
    write_trace(out, dataclasses.replace(trace, gpu=gpu))
    generated.detail().to_csv(out / DETAIL_FILE, index=False)
    return out
