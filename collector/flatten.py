"""Flattening: a decoded OTLP request's points sorted into a :class:`~collector.batch.Batch`.

The flattening decides where each point lives (metrics.md): canonical ``gpu.*`` samples become
columns of a wide per-GPU row, ``gpu.xid`` points become events, everything else becomes a point
of a narrow series. Bad points are rejected one by one (and counted) while the rest is kept.
"""

from __future__ import annotations

import json
import math
import time

from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from collector.batch import GPU_INDEX, N_GPU, Batch, Entity, SeriesRef, series_key
from collector.metrics import MAX_INT, XID, bounds, range_text
from collector.schema import METRIC_NAME_LEN, NAME_LEN, SERIES_KEY_LEN, UNIT_LEN

_NO_RECORDED_VALUE = 1  # DataPointFlags.FLAG_NO_RECORDED_VALUE
_STALE = b"no recorded value"  # memo marker of a point flagged FLAG_NO_RECORDED_VALUE


class RejectedPoint(ValueError):
    """One data point cannot be stored; the message names the metric and what was wrong."""


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


class TimeWindow:
    """The times a point may carry: no older than ``max_age_s`` before ``now`` (a point the
    store would drop at its next pass) and no further than ``max_future_s`` after it.

    ``earliest_ns`` and ``latest_ns`` bound ``time_unix_nano``, both included; 0 ("no time") is
    always outside.
    """

    __slots__ = ("earliest_ns", "latest_ns", "max_age_s", "max_future_s", "now")

    def __init__(self, now: float, *, max_future_s: float, max_age_s: float = math.inf) -> None:
        self.now = now
        self.max_future_s = max_future_s
        self.max_age_s = max_age_s
        self.latest_ns = int((now + max_future_s) * 1e9)
        self.earliest_ns = max(1, int((now - max_age_s) * 1e9)) if math.isfinite(max_age_s) else 1

    def reject(self, ts_ns: int, metric: str) -> str:
        """Why ``ts_ns``, outside the window, is refused."""
        if ts_ns <= 0:
            return f"{metric}: data point has no time_unix_nano"
        ts = ts_ns / 1e9
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
        if ts_ns > self.latest_ns:
            return (f"{metric}: timestamp {ts:.3f} ({when}) is {ts - self.now:.0f} s in the "
                    f"future, more than max_future_s={self.max_future_s:g}: check the sender's "
                    "clock")
        return (f"{metric}: timestamp {ts:.3f} ({when}) is {_age(self.now - ts)} old; the store "
                f"keeps {_age(self.max_age_s)} (rollup_retention_s) and would drop it: check the "
                "sender's clock")


def _attr(kv: object) -> tuple[str, object]:
    v = kv.value  # type: ignore[attr-defined]
    which = v.WhichOneof("value")
    if which is None:
        return kv.key, None  # type: ignore[attr-defined]
    if which in ("array_value", "kvlist_value", "bytes_value"):
        return kv.key, json_format.MessageToDict(v).get(  # type: ignore[attr-defined]
            {"array_value": "arrayValue", "kvlist_value": "kvlistValue",
             "bytes_value": "bytesValue"}[which])
    return kv.key, getattr(v, which)  # type: ignore[attr-defined]


def _str_attr(attrs: dict[str, object], key: str, metric: str) -> str | None:
    v = attrs.get(key)
    if v is None or (isinstance(v, str) and len(v) <= NAME_LEN):
        return v
    if isinstance(v, str):
        raise RejectedPoint(f"{metric}: attribute {key!r} is {len(v)} characters long; the "
                            f"store keeps at most {NAME_LEN} ({v[:40]!r}...)")
    raise RejectedPoint(f"{metric}: attribute {key!r} must be a string, got {v!r}")


def _int_attr(attrs: dict[str, object], key: str, metric: str) -> int | None:
    v = attrs.get(key)
    if v is None:
        return None
    if isinstance(v, str) and v.isdigit():
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_INT:
        return v
    raise RejectedPoint(f"{metric}: attribute {key!r} must be a non-negative integer up to "
                        f"{MAX_INT}, got {v!r}")


class Flattener:
    """Sorts the points of one request into a batch; ``cache`` remembers earlier requests."""

    def __init__(self, *, window: TimeWindow, cache: FlattenCache) -> None:
        self.batch = Batch()
        self.window = window
        self.cache = cache
        self.new_entries = 0
        # (resource, metric or family) -> attribute bytes -> position in this batch
        self.memo: dict[tuple[int, str], dict[bytes, int | str | bytes]] = {}

    def entity(self, resource: dict[str, object], dp: object, metric: str,
               family: str) -> tuple[Entity, dict[str, object]]:
        """The point's entity and its non-entity attributes."""
        point_attrs = dict(_attr(kv) for kv in dp.attributes)  # type: ignore[attr-defined]
        attrs = {**resource, **point_attrs}
        job = _str_attr(attrs, "job", metric) or "default"
        node = _str_attr(attrs, "node", metric) or _str_attr(attrs, "host.name", metric)
        rank = _int_attr(attrs, "rank", metric)
        gpu = _int_attr(attrs, "gpu", metric)
        peer = _str_attr(attrs, "peer", metric)
        uuid = _str_attr(attrs, "gpu.uuid", metric)
        if family != "other" and not node:
            raise RejectedPoint(f"{metric}: missing the 'node' attribute")
        if family == "gpu":
            if gpu is None:
                raise RejectedPoint(f"{metric}: missing the 'gpu' attribute (GPU index)")
            ent: Entity = (job, node or "", None, gpu, None, uuid)
        elif family == "xid":
            ent = (job, node or "", None, gpu, None, uuid)
        elif family == "train":
            ent = (job, node or "", rank, None, None, None)
        elif family == "net":
            if not peer:
                raise RejectedPoint(f"{metric}: missing the 'peer' attribute")
            ent = (job, node or "", None, None, peer, None)
        else:
            ent = (job, node or "", rank, gpu, peer, uuid)
        extra = {k: v for k, v in point_attrs.items() if k not in _ENTITY_KEYS}
        return ent, extra

    def resolve(self, resource: dict[str, object], dp: object, name: str, family: str,
                kind: str, unit: str, stat: str = "") -> Entity | SeriesRef | str:
        """The point's entity (gpu/xid) or series (others), or the reason to reject it."""
        try:
            ent, extra = self.entity(resource, dp, name, family)
        except RejectedPoint as exc:
            return str(exc)
        if family in ("gpu", "xid"):
            return ent
        attrs = json.dumps(extra, sort_keys=True, default=str) if extra else "{}"
        ref = (ent, name, stat, kind, unit, attrs)
        if len(name) > METRIC_NAME_LEN or len(unit) > UNIT_LEN:
            return (f"{name[:40]}: a metric name over {METRIC_NAME_LEN} characters or a unit "
                    f"over {UNIT_LEN} ({unit[:40]!r}) is more than the store keeps")
        if len(series_key(ref)) > SERIES_KEY_LEN:
            return (f"{name}: the point's attributes ({attrs[:60]}...) name a series longer than "
                    f"the store keeps ({SERIES_KEY_LEN} characters with its entity)")
        return ref

    def position(self, ref: Entity | SeriesRef | str) -> int | str:
        if isinstance(ref, str):
            return ref
        if isinstance(ref[0], tuple):
            return self.batch.series_ref(ref)
        return self.batch.entity(ref)

    def number(self, rpos: int, resource: dict[str, object], metric: object, kind: str,
               points: object) -> None:
        name: str = metric.name  # type: ignore[attr-defined]
        unit: str = metric.unit  # type: ignore[attr-defined]
        col = GPU_INDEX.get(name)
        family = metric_family(name, col)
        batch = self.batch
        memo_key = (rpos, "gpu" if col is not None else name + "\0" + kind + "\0" + unit)
        memo = self.memo.setdefault(memo_key, {})
        known = self.cache.memo(memo_key)
        earliest_ok, latest_ok = self.window.earliest_ns, self.window.latest_ns
        lo, hi = bounds(name)
        gpu, out, isfinite = batch.gpu, batch.points, math.isfinite
        accepted = 0
        for dp in points:  # type: ignore[attr-defined]
            # Hot loop: the attributes are recognised by their serialized bytes (the point's
            # encoding after its fixed64 time and value fields), parsed only once per request.
            ts_ns = dp.time_unix_nano
            start = dp.start_time_unix_nano
            value = dp.as_double or dp.as_int
            raw = dp.SerializeToString()
            key = raw[9 * (1 + (ts_ns != 0) + (start != 0)):]
            pos = memo.get(key)
            if pos is None:
                if value == 0 and dp.WhichOneof("value") is None:
                    batch.reject(f"{name}: data point has no value")
                    continue
                ref = known.get(key)
                if ref is None:
                    ref = known[key] = self.resolve(resource, dp, name, family, kind, unit)
                    self.new_entries += 1
                # The flags are encoded after the attributes, so they are part of the key.
                pos = memo[key] = (_STALE if dp.flags & _NO_RECORDED_VALUE
                                   else self.position(ref))
            # value - value is 0.0 exactly when the value is finite (NaN and inf give NaN).
            if (pos.__class__ is not int or value - value != 0.0
                    or not earliest_ok <= ts_ns <= latest_ok
                    or not lo <= value <= hi):
                if pos is _STALE:
                    continue  # a staleness marker, not a value
                if pos.__class__ is str:
                    batch.reject(pos)
                elif not isfinite(value):
                    batch.reject(f"{name}: value {value} is not finite")
                elif not lo <= value <= hi:
                    batch.reject(f"{name}: value {value:g} is out of range "
                                 f"({range_text(name)}): no sensor reads it")
                else:
                    batch.reject(self.window.reject(ts_ns, name))
                continue
            ts = ts_ns / 1e9
            if col is not None:
                key2 = (pos, ts)
                row = gpu.get(key2)
                if row is None:
                    row = gpu[key2] = [None] * N_GPU
                row[col] = float(value)
            elif family == "xid":
                if not (0 <= value <= MAX_INT and value == int(value)):
                    batch.reject(f"{name}: value {value:g} is not an XID code (a whole number "
                                 "from 0)")
                    continue
                batch.events.add((pos, ts, "xid", int(value)))
            else:
                out[(pos, ts)] = float(value)
            accepted += 1
        batch.accepted += accepted

    def distribution(self, rpos: int, resource: dict[str, object], metric: object, kind: str,
                     points: object) -> None:
        name: str = metric.name  # type: ignore[attr-defined]
        unit: str = metric.unit  # type: ignore[attr-defined]
        family = metric_family(name, None)
        if family == "xid":
            family = "other"
        known = self.cache.memo((rpos, name + "\0" + kind + "\0" + unit))
        # attribute bytes (+ the stats present when not all are) -> positions of the stats
        memo: dict[bytes, tuple[int, ...] | str] = {}
        full = ("count", "sum") if kind == "summary" else ("count", "sum", "min", "max")
        batch, out = self.batch, self.batch.points
        earliest_ok, latest_ok = self.window.earliest_ns, self.window.latest_ns
        accepted = 0
        for dp in points:  # type: ignore[attr-defined]
            if dp.flags & _NO_RECORDED_VALUE:
                continue
            names: tuple[str, ...] = full
            if kind == "summary":
                values: tuple[float, ...] = (float(dp.count), dp.sum)
            elif dp.HasField("sum") and dp.HasField("min") and dp.HasField("max"):
                values = (float(dp.count), dp.sum, dp.min, dp.max)
            else:
                names = ("count", *(s for s in full[1:] if dp.HasField(s)))
                values = (float(dp.count), *(getattr(dp, s) for s in names[1:]))
            total = sum(values)
            if total - total != 0.0:  # some value is NaN or infinite (or the sum overflowed)
                bad = [s for s, v in zip(names, values, strict=True) if not math.isfinite(v)]
                if bad:
                    batch.reject(f"{name}: {kind} {bad[0]} is not finite")
                    continue
            ts_ns = dp.time_unix_nano
            if not earliest_ok <= ts_ns <= latest_ok:
                batch.reject(self.window.reject(ts_ns, name))
                continue
            attr_key = b"".join([kv.SerializeToString() for kv in dp.attributes])
            mkey = attr_key if names is full else attr_key + b"\0" + "|".join(names).encode()
            positions = memo.get(mkey)
            if positions is None:
                positions = memo[mkey] = self.stat_positions(
                    resource, dp, attr_key, names, known,
                    name=name, family=family, kind=kind, unit=unit)
            if positions.__class__ is str:
                batch.reject(positions)
                continue
            ts = ts_ns / 1e9
            for pos, v in zip(positions, values, strict=True):
                out[(pos, ts)] = v  # type: ignore[index]
            accepted += 1
        batch.accepted += accepted

    def stat_positions(self, resource: dict[str, object], dp: object, attr_key: bytes,
                       names: tuple[str, ...], known: dict[bytes, Entity | SeriesRef | str], *,
                       name: str, family: str, kind: str, unit: str) -> tuple[int, ...] | str:
        """Positions of the series of each stat in ``names``, or why the point is rejected."""
        positions: list[int] = []
        for stat in names:
            key = attr_key + b"\0" + stat.encode()
            ref = known.get(key)
            if ref is None:
                ref = known[key] = self.resolve(resource, dp, name, family, kind, unit, stat)
                self.new_entries += 1
            pos = self.position(ref)
            if isinstance(pos, str):
                return pos
            positions.append(pos)
        return tuple(positions)


_ENTITY_KEYS = frozenset({"job", "node", "rank", "gpu", "peer", "gpu.uuid"})


def metric_family(name: str, col: int | None) -> str:
    """gpu, xid, train, net or other: which entity rules apply (``col``: its GPU column)."""
    if col is not None:
        return "gpu"
    if name == XID.name:
        return "xid"
    if name.startswith("train."):
        return "train"
    if name.startswith("net.link."):
        return "net"
    return "other"


class FlattenCache:
    """What earlier requests taught: attribute bytes -> entity or series, per resource and metric.

    A hook sends the same series every interval, so after the first request the attributes of
    a point are recognised by their bytes alone. Bounded: cleared when it grows past ``limit``.
    """

    def __init__(self, limit: int = 1_000_000) -> None:
        self.limit = limit
        self._resources: dict[bytes, int] = {}
        self._memos: dict[tuple[int, str], dict[bytes, Entity | SeriesRef | str]] = {}
        self._entries = 0

    def resource_id(self, resource: bytes) -> int:
        rid = self._resources.get(resource)
        if rid is None:
            rid = self._resources[resource] = len(self._resources)
            self._entries += 1
        return rid

    def memo(self, key: tuple[int, str]) -> dict[bytes, Entity | SeriesRef | str]:
        found = self._memos.get(key)
        if found is None:
            found = self._memos[key] = {}
        return found

    def grew(self, entries: int) -> None:
        """Count ``entries`` new memo entries; past the limit, start afresh."""
        self._entries += entries
        if self._entries > self.limit:
            self._resources.clear()
            self._memos.clear()
            self._entries = 0


def resource_attrs(rm: object) -> tuple[dict[str, object], str | None]:
    """The attributes of a ResourceMetrics' resource, and why its points are refused (or None)."""
    resource = dict(_attr(kv) for kv in rm.resource.attributes)  # type: ignore[attr-defined]
    bad = None
    for key in ("job", "node", "peer", "gpu.uuid"):
        if resource.get(key) is not None and not isinstance(resource[key], str):
            bad = f"resource attribute {key!r} must be a string, got {resource[key]!r}"
    return resource, bad


def metric_kind(metric: object, which: str) -> str:
    """The series kind of a metric whose data is ``which`` (gauge, sum, histogram, ...)."""
    if which == "gauge" or which == "summary":
        return which
    temporality = getattr(metric, which).aggregation_temporality
    if which == "sum":
        return "delta" if temporality == 1 else "cumulative"
    return "delta_histogram" if temporality == 1 else "histogram"


def flatten(request: ExportMetricsServiceRequest, *, window: TimeWindow,
            cache: FlattenCache | None = None) -> Batch:
    """Every data point of ``request`` sorted into a :class:`Batch` (bad ones rejected, among
    them those whose time lies outside ``window``)."""
    cache = cache or FlattenCache()
    f = Flattener(window=window, cache=cache)
    for rm in request.resource_metrics:
        rpos = cache.resource_id(rm.resource.SerializeToString())
        resource, bad_resource = resource_attrs(rm)
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                which = metric.WhichOneof("data")
                points = getattr(metric, which).data_points if which else ()
                if bad_resource is not None:
                    f.batch.reject(bad_resource, len(points))
                elif not metric.name:
                    f.batch.reject("a metric has an empty name", len(points))
                elif which in ("gauge", "sum"):
                    f.number(rpos, resource, metric, metric_kind(metric, which), points)
                elif which is not None:
                    f.distribution(rpos, resource, metric, metric_kind(metric, which), points)
    cache.grew(f.new_entries)
    return f.batch
