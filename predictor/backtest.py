"""Backtests: replay a trace in time order through the online scoring path and the alert
policy, and write ``alerts.csv`` as ../shared/fleet-trace.md says.

The backtest never reads ``failures.csv`` and at each scoring instant sees only rows at or
before it (``predictor.replay``); an alert row is written at every tick while a node's alert
is firing, so a long-lived alert still counts for a failure that comes late.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace
from predictor.evaluate import ALERT_COLUMNS as FLEET_TRACE_ALERT_COLUMNS
from predictor.evaluate import LEAD_COLUMN
from predictor.hysteresis import AlertPolicy, PolicyConfig
from predictor.replay import DEFAULT_EVERY_S, replay, ticks
from predictor.scorer import Model, Scorer

ALERT_COLUMNS: tuple[str, ...] = (*FLEET_TRACE_ALERT_COLUMNS, LEAD_COLUMN)
"""fleet-trace.md's columns, then ``lead_s``: the model's estimate of the time to failure when
the row was raised (empty where it gives none, as the rules never do), which ``foreshock
evaluate`` holds against the failures that followed."""
TIMELINE_COLUMNS: tuple[str, ...] = ("ts", "node", "kind", "gpu", "peer", "risk", "lead_s")

@dataclass(frozen=True, kw_only=True)
class BacktestResult:
    """What a backtest produced."""

    alerts: pd.DataFrame
    """``ALERT_COLUMNS``; ``gpu`` is -1 for link and node alerts."""
    timeline: pd.DataFrame
    """``ts,node,kind,gpu,peer,risk``: each node's riskiest entity at every tick, the row the
    alert policy reads (for plots, and for replaying other policies without scoring again)."""
    model_version: str
    ticks: int


def policy_for(model: Model) -> PolicyConfig:
    """The default alert policy of ``model`` (rules get a DCGM deployment's ``for:`` hold)."""
    from predictor.rules import RULES_POLICY, RulesModel

    return RULES_POLICY if isinstance(model, RulesModel) else PolicyConfig()


def run(trace: FleetTrace, model: Model, *, every_s: float = DEFAULT_EVERY_S,
        policy: PolicyConfig | None = None,
        progress: Callable[[int, int], None] | None = None) -> BacktestResult:
    """Replay ``trace`` and return the alerts the service would have raised."""
    trace = replace(trace, failures=None)  # labels never reach the scorer
    scorer = Scorer(model)
    alerts = AlertPolicy(config=policy or policy_for(model))
    rows: list[tuple[float, str, int, str, float, str, float]] = []
    timeline: list[pd.DataFrame] = []
    total = len(ticks(trace, every_s))
    for i, feats in enumerate(replay(trace, every_s=every_s)):
        risks = scorer.score(feats)
        for tr in alerts.step(risks, feats.t):
            if tr.action == "resolve":
                continue
            where = f"link {tr.node}->{tr.peer}: " if tr.kind == "link" else ""
            rows.append((tr.ts, tr.node, -1 if tr.gpu is None else tr.gpu, tr.kind,
                         round(tr.risk, 4), where + "; ".join(tr.signals),
                         np.nan if tr.lead_s is None else round(tr.lead_s, 1)))
        if len(risks):
            order = np.argsort(-risks["risk"].to_numpy(dtype=np.float64), kind="stable")
            top = risks.iloc[order].drop_duplicates("node", keep="first")
            timeline.append(top[list(TIMELINE_COLUMNS[1:])].assign(ts=feats.t)[
                list(TIMELINE_COLUMNS)])
        if progress is not None:
            progress(i + 1, total)
    frame = pd.DataFrame(rows, columns=list(ALERT_COLUMNS))
    frame = frame.sort_values(["ts", "node"], kind="stable").reset_index(drop=True)
    tl = pd.concat(timeline, ignore_index=True) if timeline else pd.DataFrame(
        columns=list(TIMELINE_COLUMNS))
    return BacktestResult(alerts=frame, timeline=tl, model_version=model.version,
                          ticks=total)


def write_alerts(alerts: pd.DataFrame, path: Path | str) -> None:
    """``alerts.csv`` with an empty ``gpu`` cell for link and node alerts (and an empty
    ``lead_s`` where there is no estimate)."""
    out = alerts.copy()
    out["gpu"] = [("" if g < 0 else str(int(g))) for g in out["gpu"].to_numpy()]
    out["ts"] = out["ts"].map(lambda v: f"{v:.3f}")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    out.to_csv(path, index=False, columns=list(ALERT_COLUMNS))


def truncate(trace: FleetTrace, t: float) -> FleetTrace:
    """The trace as it stood at ``t`` (for no-look-ahead checks)."""
    cut = trace.until(t)
    meta = type(trace.meta)(start=trace.meta.start, end=min(trace.meta.end, t),
                            interval_s=trace.meta.interval_s, nodes=trace.meta.nodes,
                            gpus_per_node=trace.meta.gpus_per_node, extra=trace.meta.extra)
    return replace(cut, meta=meta)


__all__ = ["ALERT_COLUMNS", "BacktestResult", "run", "truncate", "write_alerts"]
