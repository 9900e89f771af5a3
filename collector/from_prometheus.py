"""A fleet trace from the dcgm-exporter history a Prometheus keeps (``foreshock from-prometheus``).

fleet-trace.md has users make a trace from their own history to see what Foreshock would have
predicted on their fleet; most keep that history as dcgm-exporter series in Prometheus. Each
field of metrics.md's DCGM column is read as the samples Prometheus stored, at the times they
were scraped (instant queries of a range selector, ``FIELD[...]``, in chunks of at most
``MAX_POINTS`` scrapes a series), and converted to its canonical metric: percent to a ratio, MiB
to bytes, the clock-event bit mask to the two throttle flags (``collector.metrics.DCGM_FIELDS``
says the same to a user who renames columns by hand). A range query would put the samples on a
grid and fill a gap shorter than Prometheus's lookback (5 minutes) with the last value, hiding
the silence of a GPU that stopped reporting; the samples themselves keep the gap a gap.

XIDs: dcgm-exporter exports the last XID a GPU raised as a gauge, so an event is read where that
gauge changes to a code. Two XIDs of one code in a row read as one, and a code already standing
at the window's start (an XID from before it) is not an event. A Prometheus with no XID series
gives a trace without ``events.csv``: XID counts unknown, not zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

import httpx
import numpy as np
import pandas as pd

from collector.fleet_trace import FleetTrace, TraceMeta, empty_frame
from collector.metrics import DCGM_FIELDS

MAX_POINTS = 10_000
"""Scrapes a series per query (at ``Source.scrape_s``): what one answer holds stays bounded."""

SCALE: dict[str, float] = {"DCGM_FI_DEV_GPU_UTIL": 0.01, "DCGM_FI_DEV_FB_USED": 1048576.0}
"""Fields whose unit is not the canonical metric's: percent, MiB."""

CLOCK_EVENTS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
"""The clock-event bit mask, by its name since DCGM 3.3 and before."""
THROTTLE_BITS = {"gpu.throttle.thermal": 0x20 | 0x40,  # SW and HW thermal slowdown
                 "gpu.throttle.power": 0x04 | 0x80}  # SW power cap, HW power brake
XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"


class PrometheusError(RuntimeError):
    """Prometheus could not be read, or holds no dcgm-exporter series; the message says what to
    do."""


@dataclass(frozen=True, kw_only=True)
class Source:
    """Which Prometheus, which series, and how often dcgm-exporter was scraped."""

    url: str
    start: float
    end: float
    scrape_s: float = 30.0
    """The scrape interval: it sizes the queries, and is the trace's interval where no GPU has
    two samples to tell it."""
    selector: str = ""
    """PromQL label matchers added to every field, e.g. ``job="dcgm"``."""
    node_label: str = "Hostname"
    """The label that names the node (dcgm-exporter's; ``instance`` is read where it is
    absent, without its port)."""
    timeout_s: float = 60.0


def fields() -> list[str]:
    """The dcgm-exporter fields read, in metrics.md's order (the bit mask under both names)."""
    return [*(f for f in DCGM_FIELDS if f != CLOCK_EVENTS[0]), *CLOCK_EVENTS]


def _chunks(source: Source) -> list[tuple[float, float]]:
    """Windows that tile [start, end]; each meets the next at one instant."""
    span = source.scrape_s * MAX_POINTS
    edges = [*np.arange(source.start, source.end, span), source.end]
    return [(float(a), float(b)) for a, b in pairwise(edges)]


def _query(client: httpx.Client, source: Source, field: str, lo: float,
           hi: float) -> list[dict[str, object]]:
    # The samples in [lo, hi]: Prometheus 3 leaves a range's first instant out, 2 keeps it, so
    # the range reaches a millisecond further back (the sample at a chunk's edge is read twice
    # and kept once).
    selected = f"{field}{{{source.selector}}}" if source.selector else field
    query = f"{selected}[{round((hi - lo) * 1000) + 1}ms]"
    try:
        r = client.get("/api/v1/query", params={"query": query, "time": f"{hi:.3f}"})
    except httpx.HTTPError as exc:
        raise PrometheusError(f"cannot reach Prometheus at {source.url} ({exc!r}): give its "
                              "address with --url") from exc
    try:
        body = r.json()
    except ValueError:
        body = {}
    if r.status_code != 200 or body.get("status") != "success":
        said = body.get("error") or r.text[:200]
        raise PrometheusError(f"Prometheus at {source.url} answered {r.status_code} to "
                              f"{query!r}: {said}" + (" (check --selector)"
                                                      if r.status_code == 400 else ""))
    result = body["data"]["result"]
    assert isinstance(result, list)
    return result


def _node(labels: dict[str, str], node_label: str) -> str | None:
    node = labels.get(node_label)
    if node:
        return node
    instance = labels.get("instance")
    return instance.rsplit(":", 1)[0] if instance else None


def _long(series: list[dict[str, object]], source: Source,
          skipped: Callable[[int], None]) -> pd.DataFrame:
    """``ts,node,gpu,value,since`` of every series of one field, ``since`` the series' first
    time (series without a node or GPU label are skipped)."""
    columns: dict[str, list[np.ndarray]] = {"ts": [], "node": [], "gpu": [], "value": [],
                                            "since": []}
    for s in series:
        labels = s["metric"]
        assert isinstance(labels, dict)
        node, gpu = _node(labels, source.node_label), labels.get("gpu")
        if node is None or gpu is None or not str(gpu).isdigit():
            skipped(1)
            continue
        pairs = np.array(s["values"], dtype=float)  # [time, value as text]: "NaN", "+Inf" parse
        columns["since"].append(np.full(len(pairs), pairs[0, 0]))
        columns["ts"].append(pairs[:, 0])
        columns["value"].append(pairs[:, 1])
        columns["node"].append(np.full(len(pairs), node, dtype=object))
        columns["gpu"].append(np.full(len(pairs), int(gpu), dtype=np.int64))
    if not columns["ts"]:
        return pd.DataFrame({k: [] for k in columns})
    return pd.DataFrame({k: np.concatenate(v) for k, v in columns.items()})


def _xid_events(long: pd.DataFrame) -> pd.DataFrame:
    """Where a GPU's last-XID gauge changes to a code: one event each."""
    long = long.dropna(subset=["value"]).sort_values(["node", "gpu", "ts"], kind="stable")
    before = long.groupby(["node", "gpu"])["value"].shift()
    new = long[before.notna() & (long["value"] != before) & (long["value"] > 0)]
    return pd.DataFrame({"ts": new["ts"].to_numpy(), "node": new["node"].to_numpy(),
                         "gpu": new["gpu"].to_numpy(dtype=np.int64), "kind": "xid",
                         "code": new["value"].to_numpy(dtype=np.int64)}).sort_values(
                             "ts", kind="stable", ignore_index=True)


def read(source: Source, *, progress: Callable[[int], None] | None = None,
         skipped: Callable[[int], None] | None = None) -> FleetTrace:
    """The fleet trace of ``source``'s window. ``progress`` is told of each query done (there
    are ``len(fields()) * len(_chunks(source))``); ``skipped`` of series without a node or GPU
    label. Raises :class:`PrometheusError`."""
    if not (math.isfinite(source.start) and math.isfinite(source.end)
            and source.end > source.start):
        raise PrometheusError(f"the window {source.start:g}..{source.end:g} is empty: give "
                              "--from before --to")
    chunks = _chunks(source)
    columns: dict[str, pd.Series] = {}
    xid: pd.DataFrame | None = None
    with httpx.Client(base_url=source.url, timeout=source.timeout_s) as client:
        for field in fields():
            series: dict[tuple[tuple[str, str], ...], dict[str, object]] = {}
            for lo, hi in chunks:  # one series across the chunks, its values in time order
                for s in _query(client, source, field, lo, hi):
                    labels = s["metric"]
                    assert isinstance(labels, dict)
                    one = series.setdefault(tuple(sorted(labels.items())),
                                            {"metric": labels, "values": []})
                    one["values"] += s["values"]  # type: ignore[operator]
                if progress is not None:
                    progress(1)
            long = _long(list(series.values()), source, skipped or (lambda n: None))
            if long.empty:
                continue
            # A sample read twice at a chunk's edge is kept once; one GPU in two series at one
            # instant (two exporters, a pod that changed within a scrape) reads as the newer.
            long = long.sort_values("since", ascending=False, kind="stable").drop_duplicates(
                ["ts", "node", "gpu"])
            if field == XID_FIELD:
                xid = _xid_events(long)
                continue
            value = long.set_index(["ts", "node", "gpu"])["value"]
            if field in CLOCK_EVENTS:
                mask = value.dropna().astype(np.int64)
                for name, bits in THROTTLE_BITS.items():
                    columns.setdefault(name, ((mask & bits) != 0).astype(float))
                continue
            metric = DCGM_FIELDS[field][0]
            columns[metric] = value * SCALE.get(field, 1.0)
    if not columns:
        raise PrometheusError(
            f"Prometheus at {source.url} holds no dcgm-exporter series with node and GPU labels "
            f"between {source.start:.0f} and {source.end:.0f}"
            + (f" matching {{{source.selector}}}" if source.selector else "")
            + f" ({', '.join(fields()[:2])}, ...): is dcgm-exporter scraped, and is the window "
            "right?")
    gpu = pd.concat(columns, axis=1).reset_index().sort_values(["ts", "node", "gpu"],
                                                               ignore_index=True)
    nodes = tuple(sorted(gpu["node"].unique()))
    meta = TraceMeta(start=float(gpu["ts"].min()), end=float(gpu["ts"].max()),
                     interval_s=_interval(gpu, source.scrape_s), nodes=nodes,
                     gpus_per_node=int(gpu["gpu"].max()) + 1,
                     extra={"source": f"{source.url} (dcgm-exporter via Prometheus)"})
    return FleetTrace(meta=meta, gpu=gpu, node=empty_frame("node.csv.gz"),
                      links=empty_frame("links.csv.gz"),
                      events=xid if xid is not None else empty_frame("events.csv"),
                      events_exported=xid is not None)


def _interval(gpu: pd.DataFrame, default: float) -> float:
    """The median time between a GPU's samples, to the millisecond; ``default`` where no GPU
    has two."""
    gaps = gpu.groupby(["node", "gpu"], sort=False)["ts"].diff().dropna()
    return round(float(gaps.median()), 3) if len(gaps) else default


def unread(trace: FleetTrace) -> dict[str, str]:
    """The dcgm-exporter fields of which ``trace`` holds no sample: field -> its canonical
    metric (XIDs aside: without their series the trace has no ``events.csv``)."""
    return {field: metric for field, (metric, _) in DCGM_FIELDS.items()
            if field != XID_FIELD and metric not in trace.gpu.columns}


def query_count(source: Source) -> int:
    """How many queries :func:`read` makes."""
    return len(fields()) * len(_chunks(source))

