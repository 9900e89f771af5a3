"""Which failures a generated trace holds: when, where, which mode, precursor length, repair."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from predictor.failure_mix import MODE_KIND, MODES, FailureKind, Mode, sample_repair_s
from predictor.generator_config import PRECURSOR_SHAPES, GeneratorConfig

MIN_REPAIR_S = 300.0


@dataclass(frozen=True, kw_only=True)
class PlannedFailure:
    """One failure the generator will simulate."""

    ts: float
    """When the GPU, link or node fails."""
    node: int
    """Index of the failing node."""
    gpu: int
    """Index of the failing GPU, -1 for link and node failures."""
    mode: Mode
    """Which signature precedes it."""
    precursor_s: float
    """How long the precursor runs before ``ts`` (0 for a sudden failure)."""
    intensity: float
    """Strength of the precursor (1 = typical)."""
    repair_s: float
    """How long the node stays out for repair once drained (drain: 0 for node failures, else
    1-10 min after ``ts``)."""
    shape: str = "ramp"
    """How the precursor's strength grows (``generator_config.PRECURSOR_SHAPES``)."""

    @property
    def kind(self) -> FailureKind:
        return MODE_KIND[self.mode]


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi)))) if hi > lo else lo


def plan_failures(config: GeneratorConfig, rng: np.random.Generator) -> list[PlannedFailure]:
    """Failures in time order; a node never has two overlapping precursor-to-repair spans."""
    start = config.start_ts
    end = start + config.days * 86400.0
    if config.failure_count is not None:
        count = config.failure_count
    else:
        count = int(rng.poisson(config.failure_rate * config.nodes * config.days / 1000.0))
    weights = config.mode_weights()
    modes = rng.choice(len(MODES), size=count, p=[weights[m] for m in MODES])
    # Leave 30 min of history at the start so that every failure has some telemetry before it.
    times = np.sort(rng.uniform(start + min(1800.0, 0.1 * (end - start)), end - 120.0, count))
    # A reboot takes minutes even when StepFun logs the fault as cleared at once.
    repairs = np.maximum(sample_repair_s(rng, count) * config.repair_scale, MIN_REPAIR_S)
    busy: dict[int, list[tuple[float, float]]] = {}
    plan: list[PlannedFailure] = []
    for ts, mode_idx, repair_s in zip(times, modes, repairs, strict=True):
        mode = MODES[int(mode_idx)]
        has_precursor = rng.random() < float(config.precursor_share.get(mode, 0.0))
        pre = _log_uniform(rng, config.precursor_min_s, config.precursor_max_s) if has_precursor \
            else 0.0
        span = (ts - max(pre, 3600.0), ts + float(repair_s) + 3600.0)
        free = [n for n in range(config.nodes)
                if all(span[1] <= a or span[0] >= b for a, b in busy.get(n, []))]
        if not free:
            continue  # every node is failing or in repair then: real fleets would idle too
        node = int(rng.choice(free))
        busy.setdefault(node, []).append(span)
        gpu = int(rng.integers(config.gpus_per_node)) if MODE_KIND[mode] == "gpu" else -1
        plan.append(PlannedFailure(
            ts=float(ts), node=node, gpu=gpu, mode=mode, precursor_s=round(pre, 1),
            intensity=_log_uniform(rng, config.intensity_min, config.intensity_max),
            repair_s=float(repair_s),
        ))
    if config.ramps_only:
        return plan
    # Shapes from a stream of their own: the same seed places the same failures whatever shapes
    # it draws.
    shape_rng = np.random.default_rng([config.seed, 29])
    w = np.array([float(config.precursor_shapes.get(s, 0.0)) for s in PRECURSOR_SHAPES])
    shapes = shape_rng.choice(len(PRECURSOR_SHAPES), size=len(plan), p=w / w.sum())
    return [replace(f, shape=PRECURSOR_SHAPES[int(i)]) for f, i in zip(plan, shapes, strict=True)]


def failures_frame(plan: list[PlannedFailure], node_names: list[str], *,
                   detail: bool = False) -> pd.DataFrame:
    """``failures.csv`` rows (ts,node,gpu,kind,precursor_s); ``detail`` adds mode, intensity,
    repair time and precursor shape."""
    rows = [{"ts": round(f.ts, 3), "node": node_names[f.node], "gpu": f.gpu, "kind": f.kind,
             "precursor_s": f.precursor_s, **({"mode": f.mode, "intensity": round(f.intensity, 3),
                                               "repair_s": round(f.repair_s, 1),
                                               "shape": f.shape} if detail else {})}
            for f in plan]
    cols = ["ts", "node", "gpu", "kind", "precursor_s"]
    if detail:
        cols += ["mode", "intensity", "repair_s", "shape"]
    frame = pd.DataFrame(rows, columns=cols)
    frame["gpu"] = frame["gpu"].astype("int64")
    return frame
