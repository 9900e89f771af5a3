"""Scoring a backtest's alerts against a trace's ground truth as ../shared/fleet-trace.md defines.

* A failure is *caught* when an alert naming its node was raised between 6 h and 60 s before it
  (both bounds inclusive); its lead time is measured from the earliest such alert.
* Where alerts carry ``lead_s`` (the time to failure the model estimated when the row was raised;
  Foreshock's backtests write it, fleet-trace.md does not require it), each caught failure's
  estimate at its earliest qualifying alert is held against the lead it really had.
* Alert rows on one node less than 30 min apart form one *episode*. An episode is *true* when a
  failure on its node follows its start by at least 60 s and at most 6 h, *false* when no failure
  on its node follows its start within 6 h, and *late* otherwise (the only failures that follow
  came less than 60 s after the start: too late to drain, but not a false alarm either).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from collector.fleet_trace import (
    FleetTrace,
    TraceFormatError,
    read_csv_file,
    read_trace,
    trace_file,
)
from predictor.features import FATAL_XIDS

HORIZON_S = 6 * 3600.0
MIN_LEAD_S = 60.0
EPISODE_GAP_S = 30 * 60.0
ALERT_COLUMNS = ("ts", "node", "gpu", "kind", "score", "reason")
LEAD_COLUMN = "lead_s"
"""Optional alerts column: the estimated time to failure (seconds) when the row was raised."""
ALERT_KINDS = ("gpu", "link", "node")
PRECURSOR_BANDS: tuple[tuple[float, str], ...] = (
    (1800.0, "< 30 min"), (7200.0, "30 min-2 h"), (float("inf"), ">= 2 h"))
"""(upper bound in seconds, label) of the precursor lengths that recall is broken down by. A
precursor shorter than 30 minutes cannot give a 30-minute lead however early it is seen; one of
hours can, so a predictor that misses it has no such excuse."""


class AlertsFormatError(ValueError):
    """An alerts file or frame is malformed; the message names the file and column."""

    def __init__(self, source: str, message: str) -> None:
        super().__init__(f"{source}: {message}")
        self.source = source


@dataclass(frozen=True, kw_only=True)
class EvaluationReport:
    """The figures of fleet-trace.md for one trace and one set of alerts (None: undefined)."""

    failures: int
    """Failures in the trace."""
    failures_with_precursor: int
    """Failures with ``precursor_s > 0``."""
    caught: int
    """Failures with an alert on their node 6 h to 60 s before them."""
    caught_with_precursor: int
    """Caught failures that had a precursor."""
    recall: float | None
    """caught / failures."""
    recall_precursor: float | None
    """caught_with_precursor / failures_with_precursor."""
    recall_by_kind: dict[str, float | None] = field(default_factory=dict)
    """Recall per failure kind (gpu, link, node) present in the trace."""
    caught_by_precursor: dict[str, tuple[int, int]] = field(default_factory=dict)
    """(caught, failures) per precursor length (``PRECURSOR_BANDS``, those present) among the
    failures that had one."""
    alerts: int
    """Alert rows scored."""
    episodes: int
    """Alert episodes (rows on one node < 30 min apart)."""
    true_episodes: int
    """Episodes followed by a failure on their node 60 s to 6 h after their start."""
    false_episodes: int
    """Episodes not followed by any failure on their node within 6 h."""
    late_episodes: int
    """Episodes whose node failed less than 60 s after their start (neither true nor false)."""
    precision: float | None
    """true_episodes / (true_episodes + false_episodes)."""
    node_days: float
    """Nodes x trace days (from meta.json)."""
    false_per_1000_node_days: float | None
    """False episodes per 1,000 node-days."""
    median_lead_s: float | None
    """Median lead time of caught failures (failure ts - earliest qualifying alert)."""
    gpu_failures_caught: int
    """Caught failures of kind gpu with a known GPU index."""
    gpu_named_right: int
    """Of those, failures where an alert in the catch window named the failing GPU."""
    gpu_accuracy: float | None
    """gpu_named_right / gpu_failures_caught."""
    lead_estimates: int = 0
    """Caught failures whose earliest qualifying alert carried a lead estimate (``lead_s``)."""
    lead_estimate_factor: float | None = None
    """Median of max(estimate / lead, lead / estimate) over those: how many times off an
    estimate typically is (1: exact)."""
    lead_estimate_within_2x: float | None = None
    """Share of those estimated to within a factor of two of the lead they had."""
    lead_estimate_too_long: float | None = None
    """Share of those that failed sooner than estimated: the error that costs a drain, since
    a checkpoint put off to fit the estimate comes too late."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=False)


def _ratio(num: int, den: int | float) -> float | None:
    return num / den if den else None


def validate_alerts(alerts: pd.DataFrame, *, source: str = "alerts") -> pd.DataFrame:
    """A clean copy of ``alerts`` (ts float, node str, gpu int or -1, kind, score, reason, and
    ``lead_s`` float where the alerts carry it)."""
    missing = [c for c in ALERT_COLUMNS if c not in alerts.columns]
    if missing:
        raise AlertsFormatError(source, f"missing column(s) {', '.join(missing)} "
                                        f"(expected {','.join(ALERT_COLUMNS)})")
    lead = [LEAD_COLUMN] if LEAD_COLUMN in alerts.columns else []
    out = alerts.loc[:, [*ALERT_COLUMNS, *lead]].copy()
    for col in ("ts", "gpu", "score", *lead):
        converted = pd.to_numeric(out[col], errors="coerce")
        bad = converted.isna() & out[col].notna() & (out[col].astype(str).str.strip() != "")
        values = converted.fillna(np.nan).to_numpy(dtype=float)
        if col == "ts":
            bad |= ~np.isfinite(values)
        hint = ""
        if col == LEAD_COLUMN:  # empty: no estimate; never negative or infinite
            bad |= np.isinf(values) | (values < 0)
            hint = " (seconds >= 0, or empty for no estimate)"
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise AlertsFormatError(source, f"column {col!r} has a bad value "
                                            f"{alerts[col].iloc[row]!r} in row {row + 1}{hint}")
        out[col] = converted
    gpu = out["gpu"]
    # -1 is how frames (read_trace, read_alerts) spell "no GPU", like an empty cell.
    if ((gpu.notna()) & ((gpu < -1) | (gpu != gpu.round()) | np.isinf(gpu))).any():
        raise AlertsFormatError(source, "column 'gpu' must hold GPU indices (>= 0) or be empty")
    out["gpu"] = gpu.fillna(-1).astype("int64")
    out["node"] = out["node"].fillna("").astype(str)
    if (out["node"].str.strip() == "").any():
        raise AlertsFormatError(source, "column 'node' has an empty value")
    out["kind"] = out["kind"].fillna("").astype(str)
    bad_kind = sorted(set(out["kind"]) - set(ALERT_KINDS))
    if bad_kind:
        raise AlertsFormatError(source, f"column 'kind' has {bad_kind[0]!r}; expected one of "
                                        f"{', '.join(ALERT_KINDS)}")
    out["reason"] = out["reason"].fillna("").astype(str)
    return out.sort_values(["node", "ts"], kind="stable").reset_index(drop=True)


def read_alerts(path: Path | str) -> pd.DataFrame:
    """Read and validate an ``alerts.csv``; errors name the file and the column."""
    path = Path(path)
    if not path.is_file():
        raise AlertsFormatError(str(path), "missing")
    try:
        frame = read_csv_file(path, dtype={"node": str, "kind": str, "reason": str,
                                           LEAD_COLUMN: str})
    except pd.errors.EmptyDataError as exc:
        raise AlertsFormatError(str(path), f"is empty (needs a header {','.join(ALERT_COLUMNS)})"
                                ) from exc
    except (OSError, ValueError) as exc:
        raise AlertsFormatError(str(path), f"cannot be read as CSV: {exc}") from exc
    return validate_alerts(frame, source=str(path))


def _checked_failures(trace: FleetTrace, path: str) -> pd.DataFrame:
    """The ground truth in time order, refusing kinds and nodes the format does not allow."""
    assert trace.failures is not None
    failures = trace.failures
    bad_kind = sorted(set(failures["kind"].astype(str)) - set(ALERT_KINDS))
    if bad_kind:
        raise TraceFormatError(path, f"column 'kind' has {bad_kind[0]!r}; expected one of "
                                     f"{', '.join(ALERT_KINDS)}")
    unknown = sorted(set(failures["node"].astype(str)) - set(trace.meta.nodes))
    if unknown:
        raise TraceFormatError(path, f"column 'node' names {unknown[0]!r}, which is not in "
                                     "meta.json's nodes")
    return failures.sort_values("ts", kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class Outcomes:
    """What became of each failure and each alert episode: the rows behind the figures."""

    failures: pd.DataFrame
    """One row per failure, in time order: ``ts``, ``node``, ``gpu`` (-1: none), ``kind``,
    ``precursor_s``, ``caught``, ``lead_s`` (failure ts - the earliest alert 6 h to 60 s
    before it; NaN if missed), ``alert_kind`` and ``alert_score`` of that alert ("" and NaN if
    missed), ``lead_estimate_s`` (its ``lead_s`` column, NaN without one) and ``gpu_named`` (a
    GPU failure whose catch window holds an alert naming its GPU; NA unless a caught GPU
    failure with a known index)."""
    episodes: pd.DataFrame
    """One row per episode (alert rows on one node < 30 min apart), in order of start: ``node``,
    ``start``, ``end`` (its last row), ``rows``, ``kinds`` (of its rows, comma-joined),
    ``max_score``, ``verdict`` (``true``, ``false`` or ``late``) and ``failure_ts`` (the first
    failure on its node at or after its start within 6 h; NaN if none)."""
    node_days: float
    """Nodes x trace days (from meta.json)."""


def failure_times(failures: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each node's failure times (``failures.csv``'s ``ts``), sorted, by node name."""
    return {str(node): np.sort(at.to_numpy(dtype=float))
            for node, at in failures.groupby(failures["node"].astype(str), sort=False)["ts"]}


def failures_from_xids(events: pd.DataFrame) -> pd.DataFrame:
    """A fleet's fatal XIDs (``FATAL_XIDS``: 48, 79, 94, 95, 119, 120) as its failures, for a
    history kept without a failure log: ``ts,node,gpu,kind,precursor_s``, the precursor unknown
    (NaN). A fatal XID within ``HORIZON_S`` of its node's previous one is the same failure still
    (a GPU off the bus raises XID 79 again and again while it waits for repair)."""
    ev = events[(events["kind"].astype(str) == "xid")
                & events["code"].isin(list(FATAL_XIDS))].sort_values("ts", kind="stable")
    rows = []
    last: dict[str, float] = {}
    for ts, node, gpu in zip(ev["ts"].astype(float), ev["node"].astype(str),
                             ev["gpu"].astype(int), strict=True):
        if ts - last.get(node, -math.inf) > HORIZON_S:
            rows.append((ts, node, gpu, "gpu" if gpu >= 0 else "node", math.nan))
        last[node] = ts
    return pd.DataFrame(rows, columns=["ts", "node", "gpu", "kind", "precursor_s"]).astype(
        {"ts": float, "gpu": np.int64, "precursor_s": float})


def outcomes(trace: FleetTrace | Path | str, alerts: pd.DataFrame, *,
             source: str = "alerts", from_xids: bool = False) -> Outcomes:
    """Each failure caught or missed and each episode true, false or late, as ``evaluate``
    counts them (``foreshock evaluate --details`` prints them). ``from_xids``: the failures are
    the trace's fatal XIDs (:func:`failures_from_xids`), not its ``failures.csv``."""
    failures_path = "events.csv" if from_xids else "failures.csv"  # where the failures are
    if not isinstance(trace, FleetTrace):
        failures_path = str(trace_file(Path(trace), failures_path) or Path(trace) / failures_path)
        trace = read_trace(trace, with_failures=not from_xids)
    if from_xids:
        if not trace.events_exported:
            raise TraceFormatError(failures_path, "missing: the trace kept no XID log, so there "
                                   "are no fatal XIDs to take its failures from")
        trace = replace(trace, failures=failures_from_xids(trace.events))
    if trace.failures is None:
        raise ValueError("the trace has no failures (read it with with_failures=True)")
    alerts = validate_alerts(alerts, source=source)
    known = set(trace.meta.nodes)
    unknown = sorted(set(alerts["node"]) - known)
    if unknown:
        raise AlertsFormatError(source, f"column 'node' names {unknown[0]!r}, which is not a node "
                                        "of the trace")
    failures = _checked_failures(trace, failures_path)
    per_node = dict(list(alerts.groupby("node", sort=False)))  # each in time order
    by_node = {n: g["ts"].to_numpy(dtype=float) for n, g in per_node.items()}
    fail_by_node = failure_times(failures)

    n_f = len(failures)
    lead = np.full(n_f, np.nan)
    alert_kind = np.full(n_f, "", dtype=object)
    alert_score = np.full(n_f, np.nan)
    estimate = np.full(n_f, np.nan)
    gpu_named = pd.array([pd.NA] * n_f, dtype="boolean")
    f_ts = failures["ts"].to_numpy(dtype=float)
    f_node = failures["node"].astype(str).to_numpy()
    f_gpu = failures["gpu"].to_numpy(dtype=np.int64)
    f_kind = failures["kind"].astype(str).to_numpy()
    for i in range(n_f):
        ts_arr = by_node.get(f_node[i])
        if ts_arr is None:
            continue
        lo = int(np.searchsorted(ts_arr, f_ts[i] - HORIZON_S, side="left"))
        hi = int(np.searchsorted(ts_arr, f_ts[i] - MIN_LEAD_S, side="right"))
        if hi <= lo:
            continue
        first = per_node[f_node[i]].iloc[lo]
        lead[i] = f_ts[i] - ts_arr[lo]
        alert_kind[i] = first["kind"]
        alert_score[i] = first["score"]
        if LEAD_COLUMN in first.index:
            estimate[i] = first[LEAD_COLUMN]
        if f_kind[i] == "gpu" and f_gpu[i] >= 0:
            window = per_node[f_node[i]]["gpu"].to_numpy()[lo:hi]
            gpu_named[i] = bool(np.any(window == f_gpu[i]))

    episodes = []
    for node, ts_arr in by_node.items():
        group = per_node[node]
        begins = np.flatnonzero(np.r_[True, np.diff(ts_arr) >= EPISODE_GAP_S])
        fails = fail_by_node.get(str(node), np.empty(0))
        for b, e in zip(begins, [*begins[1:], len(ts_arr)], strict=True):
            start = ts_arr[b]
            after = fails[(fails >= start) & (fails <= start + HORIZON_S)]
            verdict = ("false" if not len(after) else
                       "true" if (after >= start + MIN_LEAD_S).any() else "late")
            rows = group.iloc[b:e]
            episodes.append((node, start, ts_arr[e - 1], e - b,
                             ",".join(sorted(set(rows["kind"]))), float(rows["score"].max()),
                             verdict, float(after[0]) if len(after) else np.nan))
    return Outcomes(
        failures=failures[["ts", "node", "gpu", "kind", "precursor_s"]].assign(
            gpu=f_gpu, caught=np.isfinite(lead), lead_s=lead, alert_kind=alert_kind,
            alert_score=alert_score, lead_estimate_s=estimate, gpu_named=gpu_named),
        episodes=pd.DataFrame(episodes, columns=["node", "start", "end", "rows", "kinds",
                                                 "max_score", "verdict", "failure_ts"]
                              ).sort_values(["start", "node"], ignore_index=True),
        node_days=len(trace.meta.nodes) * (trace.meta.end - trace.meta.start) / 86400.0)


def evaluate(trace: FleetTrace | Path | str, alerts: pd.DataFrame, *,
             source: str = "alerts") -> EvaluationReport:
    """Score ``alerts`` against the trace's ``failures.csv`` (fleet-trace.md's figures)."""
    return summarize(outcomes(trace, alerts, source=source), alerts=len(alerts))


def summarize(out: Outcomes, *, alerts: int) -> EvaluationReport:
    """fleet-trace.md's figures, counted from ``outcomes`` of ``alerts`` alert rows."""
    failures, eps = out.failures, out.episodes
    caught = failures["caught"].to_numpy(dtype=bool)
    leads = failures["lead_s"].to_numpy()[caught]
    est = failures["lead_estimate_s"].to_numpy()[caught]
    estimated = [(float(e), float(x)) for e, x in zip(est, leads, strict=True) if np.isfinite(e)]
    named = failures["gpu_named"]
    verdicts = eps["verdict"].value_counts()
    true_ep, false_ep, late_ep = (int(verdicts.get(v, 0)) for v in ("true", "false", "late"))

    pre_s = failures["precursor_s"].to_numpy(dtype=float)
    precursor = pre_s > 0
    has_precursor_info = bool(failures["precursor_s"].notna().any()) if len(failures) else True
    node_days = out.node_days
    by_kind: dict[str, float | None] = {}
    for kind in ALERT_KINDS:
        mask = (failures["kind"] == kind).to_numpy()
        if mask.any():
            by_kind[kind] = _ratio(int(caught[mask].sum()), int(mask.sum()))
    by_length: dict[str, tuple[int, int]] = {}
    low = 0.0
    for high, label in PRECURSOR_BANDS:
        mask = precursor & (pre_s >= low) & (pre_s < high)
        low = high
        if mask.any():
            by_length[label] = (int(caught[mask].sum()), int(mask.sum()))
    gpu_caught = int(named.notna().sum())
    gpu_right = int(named.fillna(False).sum())
    return EvaluationReport(
        failures=len(failures),
        failures_with_precursor=int(precursor.sum()),
        caught=int(caught.sum()),
        caught_with_precursor=int((caught & precursor).sum()),
        recall=_ratio(int(caught.sum()), len(failures)),
        recall_precursor=_ratio(int((caught & precursor).sum()), int(precursor.sum()))
        if has_precursor_info else None,
        recall_by_kind=by_kind,
        caught_by_precursor=by_length,
        alerts=alerts,
        episodes=len(eps),
        true_episodes=true_ep,
        false_episodes=false_ep,
        late_episodes=late_ep,
        precision=_ratio(true_ep, true_ep + false_ep),
        node_days=round(node_days, 6),
        false_per_1000_node_days=(1000.0 * false_ep / node_days) if node_days > 0 else None,
        median_lead_s=float(np.median(leads)) if len(leads) else None,
        gpu_failures_caught=gpu_caught,
        gpu_named_right=gpu_right,
        gpu_accuracy=_ratio(gpu_right, gpu_caught),
        lead_estimates=len(estimated),
        **_lead_estimate_figures(estimated),
    )


def _lead_estimate_figures(pairs: list[tuple[float, float]]) -> dict[str, float | None]:
    """``lead_estimate_factor``, ``_within_2x`` and ``_too_long`` of (estimate, lead) pairs."""
    if not pairs:
        return {}
    est, lead = np.array(pairs).T
    with np.errstate(divide="ignore"):
        factor = np.maximum(est / lead, lead / est)  # leads are >= 60 s; 0 estimates give inf
    return {"lead_estimate_factor": float(np.median(factor)),
            "lead_estimate_within_2x": float(np.mean(factor <= 2.0)),
            "lead_estimate_too_long": float(np.mean(est > lead))}


def format_value(value: float | None, *, percent: bool = False, seconds: bool = False) -> str:
    """Human rendering of a figure; undefined figures (no denominator) show as an em dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if percent:
        return f"{value:.3f}"
    if seconds:
        return f"{value:,.0f} s ({value / 60:.1f} min)"
    return f"{value:,.2f}"
