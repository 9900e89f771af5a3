"""What a backtest's alerts are worth in training time: goodput with and without them.

Recall and precision say how often a predictor is right; a training team pays in GPU-hours. This
module prices each outcome that ``evaluate.outcomes`` finds, for one synchronous job that spans
every node of the trace (data parallel: a failure anywhere stops every GPU), so that alerts from
several sources (the model, the rules, none at all) can be compared on one trace.

* Without a warning, a failure rolls the job back to its last periodic checkpoint (on average
  half the checkpoint period of work lost on every GPU) and costs a restart (detect the hang,
  reschedule, reload) on every GPU.
* A failure caught 60 s to 6 h ahead (fleet-trace.md) costs an on-demand checkpoint and an
  elastic re-rendezvous on every GPU, and the failing node's GPUs from its drain to the failure:
  it would have trained until it broke.
* A false episode drains a healthy node: the same checkpoint and re-rendezvous, and the node's
  GPUs while it is out (until someone looks at it and returns it).
* A late episode (the node failed within 60 s) costs what the failure costs unwarned.

Alerts drain as the service's decisions do (``api/decision_state.derive``): a node drains at its
first alert whose risk reaches ``drain_at`` (``FORESHOCK_DRAIN_RISK_THRESHOLD``), and no more than
``drains_per_hour`` nodes of the job drain in any hour (``FORESHOCK_DRAIN_MAX_PER_HOUR``); a held
alert drains later once the hour allows. A node drained 60 s to 6 h before its failure stays out
until it fails, and a failed node is out for repair (``false_drain_out_s`` at least). Any other is
back after ``false_drain_out_s``, and if its alert still stands it drains again once
``drain_again_after_s`` has passed since its last drain (``FORESHOCK_DRAIN_AGAIN_AFTER_S``): the
service saw the node go silent and resolved its alert, and decides anew when the node reports
again. So a standing false alarm drains a healthy node every six hours, not every time it comes
back, and a failure alerted on more than 6 h ahead is caught by the drain that falls within 6 h of
it.
An episode that never reaches ``drain_at`` only alerts: it costs nothing, and a failure it
foresaw costs what an unwarned one does.

What it leaves out, the same in every scenario: periodic checkpoints' own time, repair of the
failed node, and spare capacity.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas stays unloaded for the CLI's defaults (predictor/cli_data.py)
    import pandas as pd

    from collector.fleet_trace import FleetTrace

CAUSES: tuple[str, ...] = ("rollback", "restart", "drain", "early drain", "false drain")
"""What GPU time is lost to: work since the last checkpoint, restarts after a failure, the
on-demand checkpoint and re-rendezvous of a drain ahead of a failure, a doomed node drained before
it failed, and healthy nodes drained for nothing (the drain itself and the time they are out).
All but the last come with failures; the last with false alarms alone."""
FAILURE_CAUSES: tuple[str, ...] = CAUSES[:-1]
REACTIVE = "no prediction"
ORACLE = "every precursor foreseen"


@dataclass(frozen=True, kw_only=True)
class GoodputConfig:
    """The costs that turn outcomes into GPU time (seconds)."""

    checkpoint_every_s: float = 1800.0
    """Period of the job's own checkpoints; an unwarned failure loses half of it on average."""
    restart_s: float = 600.0
    """From an unwarned failure to training again: the hang noticed (NCCL timeout), the job
    rescheduled, the checkpoint loaded."""
    checkpoint_s: float = 60.0
    """An on-demand checkpoint (torch.distributed.checkpoint) before a drain stalls the job
    this long."""
    drain_s: float = 60.0
    """After a drain, until the job trains again on the other nodes (elastic re-rendezvous and
    the first step; ``foreshock demo`` measures 6-10 s on three nodes)."""
    false_drain_out_s: float = 3600.0
    """A drained node that is not about to fail is out this long before it is returned: a
    healthy one costs its GPUs for that long, and one whose alert still stands drains again. A
    failed node is out for repair at least this long."""
    drain_at: float = 0.5
    """An alert drains its node once its risk reaches this (the service's
    ``FORESHOCK_DRAIN_RISK_THRESHOLD``); 0 drains at every alert."""
    drains_per_hour: int = 2
    """At most this many drains of the job in any hour (``FORESHOCK_DRAIN_MAX_PER_HOUR``)."""
    drain_again_after_s: float = 21600.0
    """A drained node back in the job drains again no sooner than this after its last drain
    (``FORESHOCK_DRAIN_AGAIN_AFTER_S``)."""

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if name.endswith("_s") and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}={value} must be a finite number of seconds >= 0")
        if self.checkpoint_every_s <= 0:
            raise ValueError(f"checkpoint_every_s={self.checkpoint_every_s} must be > 0")
        if not 0 <= self.drain_at <= 1:
            raise ValueError(f"drain_at={self.drain_at} must be a risk from 0 to 1")
        if self.drains_per_hour < 0:
            raise ValueError(f"drains_per_hour={self.drains_per_hour} must be >= 0")


@dataclass(frozen=True, kw_only=True)
class Goodput:
    """GPU time lost by cause under one scenario, and the goodput it leaves."""

    label: str
    total_gpu_h: float
    """GPUs x trace hours."""
    lost_gpu_h: dict[str, float] = field(default_factory=dict)
    """GPU-hours lost per cause (``CAUSES``)."""
    failures: int = 0
    caught: int = 0
    """Failures drained ahead (60 s to 6 h before)."""
    false_drains: int = 0

    @property
    def lost(self) -> float:
        return sum(self.lost_gpu_h.values())

    @property
    def goodput(self) -> float:
        """Share of the GPU time that trained: 1 - lost / total."""
        return 1.0 - self.lost / self.total_gpu_h if self.total_gpu_h > 0 else math.nan

    def to_dict(self) -> dict[str, object]:
        return {"label": self.label, "goodput": self.goodput, "total_gpu_h": self.total_gpu_h,
                "lost_gpu_h": self.lost, "lost_by_cause_gpu_h": self.lost_gpu_h,
                "failures": self.failures, "caught": self.caught,
                "false_drains": self.false_drains}


def _job(trace: FleetTrace) -> tuple[int, int, float]:
    """(GPUs in the job, GPUs per node, trace seconds)."""
    per_node = max(int(trace.meta.gpus_per_node), 1)
    return len(trace.meta.nodes) * per_node, per_node, trace.meta.end - trace.meta.start


def _price(label: str, trace: FleetTrace, caught: np.ndarray, leads: np.ndarray,
           false_drains: int, config: GoodputConfig) -> Goodput:
    gpus, per_node, seconds = _job(trace)
    missed = int((~caught).sum())
    lost_s = {
        "rollback": missed * gpus * config.checkpoint_every_s / 2,
        "restart": missed * gpus * config.restart_s,
        "drain": int(caught.sum()) * gpus * (config.checkpoint_s + config.drain_s),
        "early drain": float(leads[caught].sum()) * per_node,
        "false drain": false_drains * (gpus * (config.checkpoint_s + config.drain_s)
                                       + per_node * config.false_drain_out_s),
    }
    return Goodput(label=label, total_gpu_h=gpus * seconds / 3600.0,
                   lost_gpu_h={k: v / 3600.0 for k, v in lost_s.items()},
                   failures=len(caught), caught=int(caught.sum()), false_drains=false_drains)


def reactive(trace: FleetTrace, config: GoodputConfig) -> Goodput:
    """No warning: every failure rolls back and restarts."""
    n = 0 if trace.failures is None else len(trace.failures)
    return _price(REACTIVE, trace, np.zeros(n, dtype=bool), np.zeros(n), 0, config)


def oracle(trace: FleetTrace, config: GoodputConfig) -> Goodput:
    """The bound: every failure with a precursor drained just in time (60 s ahead), no false
    alarm; failures without one still come unwarned."""
    from predictor.evaluate import MIN_LEAD_S

    assert trace.failures is not None
    pre = trace.failures["precursor_s"].to_numpy(dtype=float)
    caught = np.nan_to_num(pre, nan=0.0) > 0
    return _price(ORACLE, trace, caught, np.where(caught, MIN_LEAD_S, 0.0), 0, config)


def drains(alerts: pd.DataFrame, config: GoodputConfig,
           failures: pd.DataFrame | None = None) -> pd.DataFrame:
    """The alert rows at which the service would drain a node: each alert whose risk reaches
    ``drain_at`` while its node is in the job and the job has drained fewer than
    ``drains_per_hour`` nodes in the hour before it.

    A drained node is out ``false_drain_out_s``, then back in the job, where an alert that still
    stands drains it again once ``drain_again_after_s`` has passed since its last drain (the
    service resolves a silent node's alert and decides anew when it reports again). A node
    drained 60 s to 6 h before one of its ``failures`` (the catch window of ``evaluate``) stays
    out until it fails: the drain caught it. A node that has failed is out for at least
    ``false_drain_out_s`` too (alerts on its links can outlast it)."""
    from predictor.evaluate import HORIZON_S, MIN_LEAD_S, failure_times

    rows = alerts.sort_values("ts", kind="stable")
    ts = rows["ts"].to_numpy(dtype=float)
    node = rows["node"].astype(str).to_numpy()
    fails = failure_times(failures) if failures is not None else {}
    free: dict[str, float] = {}  # when each drained node is back in the job and may drain again
    taken: list[int] = []
    recent: deque[float] = deque()  # the job's drains in the last hour, oldest first
    for i in np.flatnonzero(rows["score"].to_numpy(dtype=float) >= config.drain_at):
        at = fails.get(node[i], np.empty(0))
        if ts[i] < free.get(node[i], -math.inf) or np.any(
                (at <= ts[i]) & (at > ts[i] - config.false_drain_out_s)):
            continue  # out (drained, or failed and not back from repair), or drained lately
        while recent and recent[0] <= ts[i] - 3600.0:
            recent.popleft()
        if len(recent) >= config.drains_per_hour:
            continue  # held; a later alert of the node may drain once the hour allows
        recent.append(ts[i])
        taken.append(int(i))
        ahead = at[(at >= ts[i] + MIN_LEAD_S) & (at <= ts[i] + HORIZON_S)]
        back = float(ahead[0]) if len(ahead) else ts[i] + config.false_drain_out_s
        free[node[i]] = max(back, ts[i] + config.drain_again_after_s)
    return rows.iloc[taken]


def with_alerts(label: str, trace: FleetTrace, alerts: pd.DataFrame, config: GoodputConfig, *,
                source: str = "alerts") -> Goodput:
    """Each failure drained ahead or not, and each healthy node drained, by ``drains``."""
    from predictor.evaluate import outcomes

    out = outcomes(trace, drains(alerts, config, trace.failures), source=source)
    caught = out.failures["caught"].to_numpy(dtype=bool)
    leads = np.nan_to_num(out.failures["lead_s"].to_numpy(dtype=float), nan=0.0)
    false_drains = int((out.episodes["verdict"] == "false").sum())
    return _price(label, trace, caught, leads, false_drains, config)


def compare(trace: FleetTrace, alerts: Mapping[str, pd.DataFrame], config: GoodputConfig, *,
            sources: Mapping[str, str] | None = None) -> list[Goodput]:
    """No prediction, each labelled set of alerts, and the bound, in that order; ``sources``
    names each set's file in errors."""
    return [reactive(trace, config),
            *(with_alerts(label, trace, frame, config, source=(sources or {}).get(label, label))
              for label, frame in alerts.items()),
            oracle(trace, config)]


def failure_scale(traces: list[FleetTrace], per_1000_node_days: float) -> float:
    """What to multiply the failures' costs by to bring ``traces`` (say, synthetic ones whose
    rate is raised so that two days hold failures to score) to ``per_1000_node_days``."""
    failures = sum(0 if t.failures is None else len(t.failures) for t in traces)
    node_days = sum(len(t.meta.nodes) * (t.meta.end - t.meta.start) / 86400.0 for t in traces)
    return per_1000_node_days * node_days / 1000.0 / failures if failures else 0.0


def rescaled(result: Goodput, scale: float) -> Goodput:
    """``result`` with what failures cost multiplied by ``scale`` (``failure_scale``), at the
    same recall and leads; false drains stay as they were, since healthy nodes do not get
    rarer when failures do."""
    return dataclasses.replace(result, lost_gpu_h={
        c: v * scale if c in FAILURE_CAUSES else v for c, v in result.lost_gpu_h.items()})


def pooled(results: list[Goodput]) -> float:
    """Goodput over several traces (one job each): 1 - their GPU-hours lost / their total."""
    total = sum(r.total_gpu_h for r in results)
    return 1.0 - sum(r.lost for r in results) / total if total > 0 else math.nan


def to_json(results: list[Goodput], config: GoodputConfig, *,
            failure_rate: float | None = None) -> str:
    return json.dumps({"config": asdict(config), "failures_per_1000_node_days": failure_rate,
                       "scenarios": [r.to_dict() for r in results]}, indent=2)


CAUSE_COLOURS = {"rollback": "#d73027", "restart": "#fc8d59", "drain": "#91bfdb",
                 "early drain": "#4575b4", "false drain": "#fee090"}


def plot(results: list[Goodput], path: Path | str, *, title: str) -> Path:
    """GPU-hours lost per scenario as stacked bars by cause, each labelled with its goodput."""
    from matplotlib.figure import Figure

    path = Path(path)
    fig = Figure(figsize=(9, 1.2 + 0.6 * len(results)), layout="constrained")
    ax = fig.subplots()
    labels = [r.label for r in results][::-1]
    left = np.zeros(len(results))
    for cause in CAUSES:
        widths = np.array([r.lost_gpu_h.get(cause, 0.0) for r in results][::-1])
        ax.barh(labels, widths, left=left, color=CAUSE_COLOURS[cause], label=cause,
                edgecolor="white", linewidth=0.5)
        left += widths
    top = max(left.max(), 1e-9)
    for y, r in enumerate(results[::-1]):
        ax.text(left[y] + 0.01 * top, y, f"goodput {r.goodput:.2%}  ({r.lost:,.0f} GPU-h lost)",
                va="center", fontsize=9)
    ax.set_xlim(0, top * 1.45)
    ax.set_xlabel("GPU-hours lost")
    ax.set_title(title, fontsize=10, loc="left")
    fig.legend(ncols=len(CAUSES), fontsize=8, loc="outside lower center", frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


__all__ = ["CAUSES", "FAILURE_CAUSES", "ORACLE", "REACTIVE", "Goodput", "GoodputConfig",
           "compare", "failure_scale", "oracle", "plot", "pooled", "reactive", "rescaled",
           "to_json", "with_alerts"]
