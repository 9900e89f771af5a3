"""Fitting a ``RiskModel`` from labelled traces (``foreshock model fit``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from collector.fleet_trace import FleetTrace, read_trace
from predictor.dataset import KINDS, LabelConfig, Rows, collect
from predictor.feature_frames import UNHOOKED
from predictor.model import FitConfig, KindModel, RiskModel, fit_kind, version_of


def trace_source(item: Path | FleetTrace) -> str:
    """How a model's version names a training trace: its path, or its generator seed."""
    if isinstance(item, Path):
        return str(item)
    generator = item.meta.extra.get("generator")
    seed = generator.get("seed") if isinstance(generator, dict) else None
    seed = item.meta.extra.get("seed", seed if seed is not None else item.meta.start)
    return f"trace(seed={seed})"


def fit_traces(traces: Iterable[Path | FleetTrace], *, labels: LabelConfig | None = None,
               config: FitConfig | None = None,
               progress: Callable[[str], None] | None = None) -> RiskModel:
    """Replay every trace (each with failures.csv), label its rows and fit one model per kind."""
    labels = labels or LabelConfig()
    config = config or FitConfig()
    rows, sources = collect_rows(traces, labels=labels, config=config, progress=progress)
    return fit_rows(rows, labels=labels, config=config, sources=sources)


def collect_rows(traces: Iterable[Path | FleetTrace], *, labels: LabelConfig, config: FitConfig,
                 progress: Callable[[str], None] | None = None,
                 ) -> tuple[dict[str, Rows], list[str]]:
    """Every trace replayed and its rows labelled (the negatives kept drawn with
    ``config.seed``), with the traces' sources."""
    rng = np.random.default_rng(config.seed)
    rows = {k: Rows() for k in KINDS}
    sources: list[str] = []
    for item in traces:
        trace = read_trace(item, with_failures=True) if isinstance(item, Path) else item
        sources.append(trace_source(item))
        collect(trace, rows, config=labels, rng=rng)
        if progress is not None:
            progress(sources[-1])
    return rows, sources


def fit_unhooked(rows: dict[str, Rows], *, labels: LabelConfig,
                 config: FitConfig) -> KindModel | None:
    """The node model for fleets that export no compute times, fitted on the node rows without
    the hook's features (``feature_frames.UNHOOKED``)."""
    x, y, _, ttf = rows["node"].frames("node")
    return fit_kind(UNHOOKED, x, y, ttf, keep_healthy=labels.keep_healthy, config=config)


def fit_rows(rows: dict[str, Rows], *, labels: LabelConfig, config: FitConfig,
             sources: list[str]) -> RiskModel:
    """One model per kind fitted on labelled ``rows`` (``dataset.collect``), versioned by
    ``sources``, the traces they came from."""
    kinds: dict[str, KindModel] = {}
    for kind in KINDS:
        x, y, _, ttf = rows[kind].frames(kind)
        fitted = fit_kind(kind, x, y, ttf, keep_healthy=labels.keep_healthy, config=config)
        if fitted is not None:
            kinds[kind] = fitted
    unhooked = fit_unhooked(rows, labels=labels, config=config)
    if unhooked is not None:
        kinds[UNHOOKED] = unhooked
    if not kinds:
        raise ValueError("no trace had a failure to learn from: give traces with failures.csv "
                         "rows (e.g. foreshock generate-trace --failures ...)")
    return RiskModel(version=version_of(kinds, horizon_s=labels.horizon_s, sources=sources),
                     kinds=kinds, horizon_s=labels.horizon_s)
