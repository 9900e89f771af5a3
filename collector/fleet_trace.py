"""Reading and writing fleet traces (``fleet-trace/1``, see ../shared/fleet-trace.md)."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from collector.metrics import (
    GPU_COLUMNS,
    LINK_TRACE_METRICS,
    MAX_INT,
    NODE_TRACE_METRICS,
    bounds,
    range_text,
    suggest,
)

FORMAT = "fleet-trace/1"

log = logging.getLogger("foreshock.trace")


class TraceFormatError(ValueError):
    """A trace file is missing or malformed; the message names the file and column."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)


@dataclass(frozen=True, kw_only=True)
class TraceMeta:
    """The contents of ``meta.json``."""

    start: float
    """First timestamp covered (Unix seconds)."""
    end: float
    """Last timestamp covered (Unix seconds)."""
    interval_s: float
    """Nominal sampling interval."""
    nodes: tuple[str, ...]
    """Node names."""
    gpus_per_node: int
    """GPUs on each node."""
    extra: dict[str, object] = field(default_factory=dict)
    """Any other keys found in meta.json, kept for round trips."""

    def to_json(self) -> dict[str, object]:
        return {
            **self.extra,
            "format": FORMAT,
            "start": self.start,
            "end": self.end,
            "interval_s": self.interval_s,
            "nodes": list(self.nodes),
            "gpus_per_node": self.gpus_per_node,
        }


@dataclass(frozen=True, kw_only=True)
class FleetTrace:
    """A window of fleet telemetry as data frames, sorted by ``ts``.

    Frames always have their key columns; metric columns absent from the source are absent here.
    """

    meta: TraceMeta
    gpu: pd.DataFrame
    """``ts,node,gpu`` then ``gpu.*`` columns (floats, NaN where missing)."""
    node: pd.DataFrame
    """``ts,node`` then ``train.*`` columns; empty when the trace has none."""
    links: pd.DataFrame
    """``ts,src,dst,net.link.bandwidth,net.link.latency``; empty when none."""
    events: pd.DataFrame
    """``ts,node,gpu,kind,code``; ``gpu`` is -1 for node events."""
    failures: pd.DataFrame | None = None
    """Ground truth ``ts,node,gpu,kind,precursor_s``; only loaded when asked for."""
    events_exported: bool = True
    """False when the source kept no event log (a trace without ``events.csv``): its XID counts
    are unknown, not zero, and the features read them as missing."""

    def until(self, t: float) -> FleetTrace:
        """The rows with ``ts <= t``: what an online scorer could have seen at ``t``."""
        return replace(
            self,
            gpu=self.gpu[self.gpu["ts"] <= t],
            node=self.node[self.node["ts"] <= t],
            links=self.links[self.links["ts"] <= t],
            events=self.events[self.events["ts"] <= t],
            failures=None,
        )


_KEYS = {
    "gpu.csv.gz": ("ts", "node", "gpu"),
    "node.csv.gz": ("ts", "node"),
    "links.csv.gz": ("ts", "src", "dst"),
    "events.csv": ("ts", "node", "gpu", "kind", "code"),
    "failures.csv": ("ts", "node", "gpu", "kind"),
}
_METRICS = {
    "gpu.csv.gz": tuple(GPU_COLUMNS),
    "node.csv.gz": NODE_TRACE_METRICS,
    "links.csv.gz": LINK_TRACE_METRICS,
    "events.csv": (),
    "failures.csv": ("precursor_s",),
}


def empty_frame(file: str) -> pd.DataFrame:
    """An empty frame with the key and metric columns of ``file``."""
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in (*_KEYS[file], *_METRICS[file])})


def read_csv_file(path: Path, *, dtype: dict[str, type]) -> pd.DataFrame:
    """``pd.read_csv`` that also reads a header written ``ts, node, gpu``, as a hand-made file
    has it. The names must match while parsing, or ``dtype`` misses them and a node named
    ``001`` after such a comma reads as the number 1; skipping spaces costs a third more time,
    so only where the header has them."""
    spaced = any(str(c) != str(c).lstrip() for c in pd.read_csv(path, nrows=0).columns)
    df = pd.read_csv(path, dtype=dtype, skipinitialspace=spaced)
    df.columns = df.columns.str.strip()
    return df


def _read_csv(path: Path, file: str, meta: TraceMeta | None = None) -> pd.DataFrame:
    try:
        df = read_csv_file(path, dtype={"node": str, "src": str, "dst": str, "kind": str})
    except pd.errors.EmptyDataError as exc:
        # Not even a header: a writer that had no rows for an optional file. Refusing the trace
        # for it would leave a whole fleet unscored; gpu.csv.gz has to hold something.
        if file == "gpu.csv.gz":
            raise TraceFormatError(path, "is empty: it needs a header (ts,node,gpu, then gpu.* "
                                   "metrics of metrics.md) and rows") from exc
        header = ",".join((*_KEYS[file], *_METRICS[file]))
        log.warning("%s: empty, not even a header: read as no rows (write the header %s to "
                    "say so)", path, header)
        return empty_frame(file)
    except (OSError, ValueError, EOFError) as exc:  # pandas raises ParserError (a ValueError)
        raise TraceFormatError(path, f"cannot be read as CSV: {exc}") from exc
    missing = [c for c in _KEYS[file] if c not in df.columns]
    if missing:
        raise TraceFormatError(path, f"missing required column(s) {', '.join(missing)}")
    known = set(_KEYS[file]) | set(_METRICS[file])
    # gpu.csv.gz may carry extra gpu.* metrics NVML exposes (metrics.md allows them). Any other
    # column no reader uses (a job id, a free-text message, a metric of a newer exporter) is
    # left out with a warning rather than refusing a trace whose every used column is sound.
    # A metric misspelled, or named as DCGM names it, leaves its signal out of every feature:
    # the warning says what the column most likely meant.
    lacking = [m for m in _METRICS[file] if m not in df.columns]
    advice = {c: suggest(str(c), lacking) for c in df.columns if c not in known}
    unknown = [c for c in advice if not (file == "gpu.csv.gz" and str(c).startswith("gpu."))]
    if unknown:
        log.warning("%s: ignoring column(s) %s (fleet-trace/1 defines no such column there)",
                    path, ", ".join(f"{c} ({advice[c]})" if advice[c] else str(c)
                                    for c in unknown))
        df = df.drop(columns=unknown)
    for col, text in advice.items():
        if text and col not in unknown:
            log.warning("%s: column %r is kept as an extra metric that no feature reads; %s",
                        path, col, text)
    for col in df.columns:
        if col in ("node", "src", "dst", "kind"):
            df[col] = df[col].fillna("").astype(str)
            if col == "kind":  # an enumeration ("xid"; "gpu", "node", "link"): "XID" is one
                df[col] = df[col].str.strip().str.lower()
            continue
        converted = pd.to_numeric(df[col], errors="coerce")
        bad_rows = converted.isna() & df[col].notna()
        if col == "code" and "kind" in df.columns:
            # Only an XID's code must be a number; other event kinds may say what they like.
            bad_rows &= df["kind"].fillna("").astype(str) == "xid"
        if bad_rows.any():
            row = int(bad_rows.to_numpy().argmax()) + 2  # 1-based, after the header line
            first = df[col][bad_rows].iloc[0]
            if col in _KEYS[file]:
                raise TraceFormatError(
                    path, f"column {col!r} has a non-numeric value {first!r} on line {row}")
            # A reading written as text (nvidia-smi's "[N/A]" or "[Not Supported]") is a value
            # no sensor read, like inf: missing, and the rest of the file stands.
            log.warning("%s: column %r has %d value(s) that are not numbers (the first %r on "
                        "line %d); read as missing", path, col, int(bad_rows.sum()), first, row)
        df[col] = converted if col in _KEYS[file] else _within_bounds(path, col, converted)
    if df["ts"].isna().any():
        raise TraceFormatError(path, "column 'ts' has empty values")
    _refuse(path, df, "ts", ~np.isfinite(df["ts"]), "is not a finite time (Unix seconds)")
    if "gpu" in df.columns:
        g = df["gpu"].to_numpy(dtype=np.float64)
        # -1 (or any negative) means "no GPU" where the format lets a row name none.
        none_ok = file != "gpu.csv.gz"
        whole = np.isnan(g) | (np.isfinite(g) & (g <= MAX_INT) & (g == np.round(g))
                               & ((g >= 0) | none_ok))
        _refuse(path, df, "gpu", ~whole, f"is not a GPU index (a whole number from 0 to {MAX_INT}"
                + ("; empty for none)" if none_ok else ")"))
        df["gpu"] = df["gpu"].fillna(-1).astype("int64")
    if "code" in df.columns:
        code = df["code"].to_numpy(dtype=np.float64)
        xid = (df["kind"] == "xid").to_numpy()
        whole = np.isnan(code) | (np.isfinite(code) & (code == np.round(code)))
        _refuse(path, df, "code", xid & ~whole, "is not an XID code (a whole number)")
    if meta is not None:
        df = _near(path, df, meta)
        _unlisted_nodes(path, df, meta)
    # Out-of-order rows are legal input; every consumer wants them in time order.
    return df.sort_values("ts", kind="stable").reset_index(drop=True)


def _within_bounds(path: Path, col: str, values: pd.Series) -> pd.Series:
    """A metric column's ``values`` with those no sensor reads (inf, a sentinel, beyond the
    metric's bounds) read as missing, as OTLP ingest rejects them: as a gap would, and the rest
    of the file stands."""
    v = values.to_numpy(dtype=np.float64)
    lo, hi = bounds(col)
    bad = ~(np.isnan(v) | ((v >= lo) & (v <= hi)))
    if not bad.any():
        return values
    first = int(bad.argmax())
    log.warning("%s: column %r has %d value(s) that are not finite or outside %s (the first "
                "%.15g on line %d); read as missing", path, col, int(bad.sum()), range_text(col),
                v[first], int(values.index[first]) + 2)
    return values.mask(bad)


def _near(path: Path, df: pd.DataFrame, meta: TraceMeta) -> pd.DataFrame:
    """``df`` without rows whose time lies further outside meta.json's window than the window is
    long (a day at least): a clock years off or times in milliseconds, which would have the
    replay step through years. None left of gpu.csv.gz's rows is an error."""
    slack = max(86_400.0, meta.end - meta.start)
    far = ~df["ts"].between(meta.start - slack, meta.end + slack).to_numpy()
    if not far.any():
        return df
    first = int(far.argmax())
    ts, line = float(df["ts"].iloc[first]), int(df.index[first]) + 2
    said = (f"the first {ts:.15g} on line {line}{_utc(ts)}, against meta.json's start "
            f"{meta.start:.15g}{_utc(meta.start)}; fleet-trace times are Unix seconds, and "
            "milliseconds read 1,000 times larger")
    if far.all() and path.name.startswith("gpu.csv"):
        raise TraceFormatError(path, f"no row's ts lies within a day or the trace's length of "
                                     f"meta.json's start..end ({said})")
    log.warning("%s: %d row(s) with ts far outside meta.json's start..end left out (%s)", path,
                int(far.sum()), said)
    return df[~far]


def _unlisted_nodes(path: Path, df: pd.DataFrame, meta: TraceMeta) -> None:
    """Warn of nodes the rows name and meta.json's ``nodes`` does not: they are scored like the
    others, but evaluation counts node-days and accepts alerts on meta.json's nodes only."""
    listed = set(meta.nodes) | {""}
    for col in ("node", "src", "dst"):
        if col not in df.columns:
            continue
        unlisted = sorted(set(df[col].unique()) - listed)
        if unlisted:
            named = ", ".join(repr(n) for n in unlisted[:3]) + (", ..." if len(unlisted) > 3
                                                               else "")
            log.warning("%s: column %r names %d node(s) that meta.json's 'nodes' does not list "
                        "(%s): they are scored, but evaluating alerts on them is refused; list "
                        "them in meta.json", path, col, len(unlisted), named)


def _utc(ts: float) -> str:
    """`` (2026-01-01T00:00:00Z)`` for a time a calendar can show, else nothing."""
    try:
        return f" ({datetime.fromtimestamp(ts, UTC):%Y-%m-%dT%H:%M:%SZ})"
    except (OverflowError, OSError, ValueError):
        return ""


def _refuse(path: Path, df: pd.DataFrame, col: str, bad: pd.Series | np.ndarray,
            what: str) -> None:
    """Raise for the first row of ``bad``, naming ``col``, the value and its line in the file."""
    bad = np.asarray(bad, dtype=bool)
    if bad.any():
        first = int(bad.argmax())
        raise TraceFormatError(path, f"column {col!r} has {df[col].iloc[first]:.15g} on line "
                                     f"{int(df.index[first]) + 2}, which {what}")


def trace_file(root: Path, file: str) -> Path | None:
    """Where ``file`` of fleet-trace/1 lies in ``root``: under its own name or, from a writer that
    compressed it otherwise (``node.csv`` plain, ``events.csv.gz`` gzipped), under the other;
    None when neither is there. A file under its own name wins over the other, with a warning."""
    own = root / file
    other = root / (file.removesuffix(".gz") if file.endswith(".gz") else f"{file}.gz")
    if own.is_file():
        if other.is_file():
            log.warning("%s: ignored, %s is read (fleet-trace/1 names that one)", other, own.name)
        return own
    if other.is_file():
        log.warning("%s: read as %s (fleet-trace/1 names it %s)", other, file, file)
        return other
    return None


def read_meta(root: Path) -> TraceMeta:
    path = root / "meta.json"
    if not path.is_file():
        raise TraceFormatError(path, "missing (every fleet trace needs meta.json)")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise TraceFormatError(path, f"is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise TraceFormatError(path, "must hold a JSON object")
    fmt = raw.get("format")
    if fmt is None:
        # The rest of the file says which fields it has; a writer that left out only the
        # format's name should not lose its whole trace for it.
        log.warning("%s: no field 'format': read as %s", path, FORMAT)
    elif fmt != FORMAT and not str(fmt).startswith(FORMAT + "."):  # a minor version reads too
        raise TraceFormatError(path, f"field 'format' is {fmt!r}, expected {FORMAT!r}")
    for key in ("start", "end", "interval_s", "nodes", "gpus_per_node"):
        if key not in raw:
            raise TraceFormatError(path, f"missing field {key!r}")
    if not isinstance(raw["nodes"], list):
        raise TraceFormatError(path, f"field 'nodes' must be a list of node names, not "
                                     f"{type(raw['nodes']).__name__} {raw['nodes']!r}")
    try:
        meta = TraceMeta(
            start=float(raw["start"]),
            end=float(raw["end"]),
            interval_s=float(raw["interval_s"]),
            nodes=tuple(str(n) for n in raw["nodes"]),
            gpus_per_node=int(raw["gpus_per_node"]),
            extra={k: v for k, v in raw.items() if k not in {
                "format", "start", "end", "interval_s", "nodes", "gpus_per_node"}},
        )
    except (TypeError, ValueError) as exc:
        raise TraceFormatError(path, f"has a field of the wrong type: {exc}") from exc
    if not (math.isfinite(meta.interval_s) and meta.interval_s > 0):
        raise TraceFormatError(path, f"field 'interval_s'={meta.interval_s} must be > 0")
    if meta.end < meta.start:
        raise TraceFormatError(path, f"field 'end'={meta.end} is before 'start'={meta.start}")
    return meta


def read_trace(root: Path | str, *, with_failures: bool = False) -> FleetTrace:
    """Read a fleet-trace directory; ``failures.csv`` only when ``with_failures`` (evaluation)."""
    root = Path(root)
    if not root.is_dir():
        raise TraceFormatError(root, "is not a directory")
    meta = read_meta(root)
    paths = {file: trace_file(root, file)
             for file in ("gpu.csv.gz", "node.csv.gz", "links.csv.gz", "events.csv")}
    if paths["gpu.csv.gz"] is None:
        raise TraceFormatError(root / "gpu.csv.gz", "missing (required by fleet-trace/1)")
    frames = {file: empty_frame(file) if path is None else _read_csv(path, file, meta)
              for file, path in paths.items()}
    return FleetTrace(
        meta=meta,
        gpu=frames["gpu.csv.gz"],
        node=frames["node.csv.gz"],
        links=frames["links.csv.gz"],
        events=frames["events.csv"],
        failures=read_failures(root) if with_failures else None,
        events_exported=paths["events.csv"] is not None,
    )


def read_failures(root: Path | str) -> pd.DataFrame:
    """``failures.csv`` alone (``ts,node,gpu,kind,precursor_s``; ``precursor_s`` NaN where the
    file has no such column), without reading the telemetry."""
    path = trace_file(Path(root), "failures.csv")
    if path is None:
        raise TraceFormatError(Path(root) / "failures.csv",
                               "missing: evaluation needs the ground-truth failures")
    failures = _read_csv(path, "failures.csv")
    if "precursor_s" not in failures.columns:
        failures["precursor_s"] = float("nan")
    return failures


def write_trace(root: Path | str, trace: FleetTrace) -> None:
    """Write ``trace`` as a fleet-trace directory (created if needed)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "meta.json").write_text(json.dumps(trace.meta.to_json(), indent=2) + "\n")
    # pandas' default gzip level 9 takes ~5x longer than level 1 for ~10% smaller files.
    gz = {"method": "gzip", "compresslevel": 1}
    trace.gpu.to_csv(root / "gpu.csv.gz", index=False, compression=gz)
    if len(trace.node):
        trace.node.to_csv(root / "node.csv.gz", index=False, compression=gz)
    if len(trace.links):
        trace.links.to_csv(root / "links.csv.gz", index=False, compression=gz)
    # An empty events.csv says "no events"; none at all says the source kept no event log.
    if trace.events_exported:
        ev = trace.events.copy()
        ev["gpu"] = ev["gpu"].map(lambda g: "" if g < 0 else str(int(g)))
        ev["code"] = ev["code"].map(lambda c: "" if pd.isna(c) else str(int(c)))
        ev.to_csv(root / "events.csv", index=False)
    if trace.failures is not None:
        fl = trace.failures.copy()
        fl["gpu"] = fl["gpu"].map(lambda g: "" if g < 0 else str(int(g)))
        fl.to_csv(root / "failures.csv", index=False)
