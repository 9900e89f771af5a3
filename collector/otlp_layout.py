"""Layouts: a protobuf request flattened by reading only its timestamps and values.

A hook sends the same series every interval, so consecutive requests differ only in the 8-byte
payloads of their fixed64 fields (timestamps, values, histogram counts). A :class:`Layout`
remembers where those payloads lie in a request's bytes and where each of them goes in a
:class:`~collector.batch.Batch`. A later request is read through it when its bytes, with those
payloads blanked, equal the learned request's: fixed64 payloads never change how the rest of a
message is framed, so equal bytes decode to the same entities and series. Anything the fast path
would have to reject (a NaN, a timestamp out of range) sends the request down the general path,
which words the rejections.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from collector.batch import GPU_INDEX, N_GPU, Batch, Columns, Entity, SeriesRef
from collector.flatten import (
    FlattenCache,
    Flattener,
    TimeWindow,
    metric_family,
    metric_kind,
    resource_attrs,
)
from collector.metrics import ANY_VALUE, bounds

_DATA = {5: "gauge", 7: "sum", 9: "histogram"}  # Metric fields; others have no layout
_HIST_STATS = {4: "count", 5: "sum", 11: "min", 12: "max"}  # HistogramDataPoint fixed64 fields
_BYTE = np.arange(8, dtype=np.intp)
# Dtypes of the value payloads: as_double (-0.0 read as 0.0, as the general path does),
# as_int, a histogram count, a histogram sum/min/max.
_NUMBER_F8, _NUMBER_I8, _COUNT, _STAT_F8 = range(4)
_DTYPES = {_NUMBER_F8: "<f8", _NUMBER_I8: "<i8", _COUNT: "<u8", _STAT_F8: "<f8"}


class _NoLayout(Exception):
    """The request holds something a layout does not handle; it keeps the general path."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes, i: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """``(field number, wire type, payload start, payload end)`` of a message's fields."""
    while i < end:
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            j = _varint(buf, i)[1]
        elif wire == 1:
            j = i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            j = i + n
        elif wire == 5:
            j = i + 4
        else:
            raise _NoLayout
        if j > end:
            raise _NoLayout
        yield key >> 3, wire, i, j
        i = j


@dataclass(slots=True)
class _Point:
    ts: int = -1
    """Offset of the time_unix_nano payload."""
    values: dict[int, int] | None = None
    """Field number -> offset of its fixed64 payload (value or histogram stats)."""


def _walk(body: bytes) -> tuple[list[tuple[str, list[_Point]]], list[int]]:
    """Each metric's data kind and points, in decoding order, and every fixed64 payload offset."""
    metrics: list[tuple[str, list[_Point]]] = []
    blanks: list[int] = []
    for f1, w1, s1, e1 in _fields(body, 0, len(body)):
        if f1 != 1 or w1 != 2:
            continue
        for f2, w2, s2, e2 in _fields(body, s1, e1):
            if f2 != 2 or w2 != 2:
                continue
            for f3, w3, s3, e3 in _fields(body, s2, e2):
                if f3 != 2 or w3 != 2:
                    continue
                data = [(f, s, e) for f, w, s, e in _fields(body, s3, e3) if w == 2 and f in
                        (5, 7, 9, 10, 11)]
                if len(data) != 1 or data[0][0] not in _DATA:
                    raise _NoLayout  # no data, several, or a summary / exponential histogram
                kind, s4, e4 = _DATA[data[0][0]], data[0][1], data[0][2]
                points = [_point(body, s, e, kind == "histogram", blanks)
                          for f, w, s, e in _fields(body, s4, e4) if f == 1 and w == 2]
                metrics.append((kind, points))
    return metrics, blanks


def _point(body: bytes, start: int, end: int, histogram: bool, blanks: list[int]) -> _Point:
    point = _Point(values={})
    assert point.values is not None
    for f, w, s, e in _fields(body, start, end):
        if w == 1 and f == 2:  # start_time_unix_nano: blanked, not read
            blanks.append(s)
        elif w == 1 and f == 3:
            if point.ts >= 0:
                raise _NoLayout
            point.ts = s
            blanks.append(s)
        elif w == 1 and (f in _HIST_STATS if histogram else f in (4, 6)):
            if f in point.values or (not histogram and point.values):
                raise _NoLayout  # a repeated field or both oneof values: last one wins
            point.values[f] = s
            blanks.append(s)
        elif histogram and f == 6:  # bucket_counts, packed or not: not stored
            if (e - s) % 8:
                raise _NoLayout
            blanks.extend(range(s, e, 8))
        elif f == (8 if histogram else 5):
            raise _NoLayout  # exemplars carry their own timestamps and values
    return point


def _gather(offsets: list[int]) -> NDArray[np.intp]:
    """Byte indices ``(len(offsets), 8)`` of fixed64 payloads at ``offsets``."""
    return np.asarray(offsets, dtype=np.intp).reshape(-1, 1) + _BYTE


class Cell(NamedTuple):
    """One value of a layout: its point, where its payload lies, how it is encoded, and the
    bounds it must lie within (its metric's)."""

    point: int
    offset: int
    dtype: int
    lo: float
    hi: float


class Layout:
    """Where one request layout's timestamps and values lie, and where each goes in a batch."""

    def __init__(self, *, body: bytes, blanks: list[int], ts: list[int],
                 cells: list[Cell], gpu: list[tuple[int, int]], row_point: list[int],
                 row_entity: list[int], point_series: list[int], entities: list[Entity],
                 series: list[SeriesRef]) -> None:
        """``cells``: each value, GPU cells first, one ``gpu`` (row, column) each; the rest are
        narrow points, one ``point_series`` each."""
        self.size = len(body)
        self.blanks = _gather(blanks).ravel()
        self.head = body[:min(blanks)]
        skeleton = np.frombuffer(body, np.uint8).copy()
        skeleton[self.blanks] = 0
        self.skeleton = skeleton.tobytes()
        self.ts = _gather(ts)
        self.n_points = len(ts)
        self.cell_point = np.asarray([c.point for c in cells], dtype=np.intp)
        self.lo = np.asarray([c.lo for c in cells], dtype=np.float64)
        self.hi = np.asarray([c.hi for c in cells], dtype=np.float64)
        self.groups = []
        for dtype in _DTYPES:
            which = [i for i, c in enumerate(cells) if c.dtype == dtype]
            if which:
                self.groups.append((dtype, np.asarray(which, dtype=np.intp),
                                    _gather([cells[i].offset for i in which])))
        self.n_gpu = len(gpu)
        self.gpu_row = np.asarray([g[0] for g in gpu], dtype=np.intp)
        self.gpu_col = np.asarray([g[1] for g in gpu], dtype=np.intp)
        self.row_point = np.asarray(row_point, dtype=np.intp)
        self.row_entity = row_entity
        sent = {(r, c) for r, c in gpu}
        self.absent_cols = [c for c in range(N_GPU)
                            if not any((r, c) in sent for r in range(len(row_point)))]
        self.holes = [(r, c) for r in range(len(row_point)) for c in range(N_GPU)
                      if (r, c) not in sent and c not in self.absent_cols]
        self.point_series = point_series
        self.entities = entities
        self.series = series
        self.nbytes = (self.size + self.blanks.nbytes + self.ts.nbytes
                       + sum(g[1].nbytes + g[2].nbytes for g in self.groups))

    def read(self, body: bytes, *, window: TimeWindow) -> Batch | None:
        """``body`` flattened through this layout, or None if it does not fit or needs the
        general path (some point would be rejected)."""
        buf = np.frombuffer(body, np.uint8)
        if len(buf) != self.size:
            return None
        masked = buf.copy()
        masked[self.blanks] = 0
        if masked.tobytes() != self.skeleton:
            return None
        ts_ns = buf[self.ts].view("<u8")[:, 0]
        if int(ts_ns.min()) < window.earliest_ns or int(ts_ns.max()) > window.latest_ns:
            return None
        values = np.empty(len(self.cell_point))
        for dtype, cells, payload in self.groups:
            raw = buf[payload].view(_DTYPES[dtype])[:, 0]
            values[cells] = raw + 0.0 if dtype == _NUMBER_F8 else raw
        if not ((values >= self.lo) & (values <= self.hi)).all():  # NaN, inf or out of range
            return None
        row_ts_ns = ts_ns[self.row_point]
        n = self.n_gpu
        if n and not (ts_ns[self.cell_point[:n]] == row_ts_ns[self.gpu_row]).all():
            return None  # one GPU's metrics now carry different timestamps: several rows
        wide = np.full((len(self.row_point), N_GPU), np.nan)
        wide[self.gpu_row, self.gpu_col] = values[:n]
        gpu_values: list[list[float | None]] = wide.T.tolist()
        for c in self.absent_cols:
            gpu_values[c] = [None] * len(self.row_point)
        for r, c in self.holes:
            gpu_values[c][r] = None
        columns = Columns(
            gpu_entity=self.row_entity, gpu_ts=(row_ts_ns / 1e9).tolist(),
            gpu_values=gpu_values, point_series=self.point_series,
            point_ts=(ts_ns[self.cell_point[n:]] / 1e9).tolist(),
            point_values=values[n:].tolist())
        return Batch(entities=self.entities, series=self.series, columns=columns,
                     accepted=self.n_points)


def learn(body: bytes, request: ExportMetricsServiceRequest, batch: Batch, *,
          window: TimeWindow) -> Layout | None:
    """The layout of ``body``, whose general-path result is ``batch``, or None if it has none.

    Only a request whose every point was accepted has one; the layout is checked to read
    ``body`` into the same rows as ``batch`` before it is used.
    """
    if batch.rejected or batch.events or batch.columns is not None:
        return None
    try:
        metrics, blanks = _walk(body)
        layout = _build(body, request, metrics, blanks, window=window)
    except (_NoLayout, IndexError):
        return None
    if layout is None or layout.n_points != batch.accepted:
        return None
    read = layout.read(body, window=window)
    if read is None or read.rows_by_key() != batch.rows_by_key():
        return None
    return layout


def _build(body: bytes, request: ExportMetricsServiceRequest,
           metrics: list[tuple[str, list[_Point]]], blanks: list[int], *,
           window: TimeWindow) -> Layout | None:
    f = Flattener(window=window, cache=FlattenCache())
    ts: list[int] = []
    gpu_cells: list[Cell] = []
    gpu: list[tuple[int, int]] = []
    rows: dict[int, int] = {}  # entity position -> row
    row_point: list[int] = []
    narrow_cells: list[Cell] = []
    point_series: list[int] = []
    walked = iter(metrics)
    for rm in request.resource_metrics:
        resource, bad = resource_attrs(rm)
        if bad is not None:
            return None
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                which = metric.WhichOneof("data")
                data_kind, points = next(walked)
                dps = getattr(metric, which).data_points if which else ()
                if which != data_kind or len(dps) != len(points) or not metric.name:
                    return None
                name, unit, kind = metric.name, metric.unit, metric_kind(metric, which)
                col = GPU_INDEX.get(name)
                family = metric_family(name, col)
                for dp, p in zip(dps, points, strict=True):
                    assert p.values is not None
                    if p.ts < 0 or dp.flags:
                        return None
                    point = len(ts)
                    ts.append(p.ts)
                    if which == "histogram":
                        stats = tuple(_HIST_STATS[k] for k in sorted(p.values))
                        if "count" not in stats:
                            return None
                        # As the general path: a histogram is never a GPU column or an event.
                        family = metric_family(name, None)
                        family = "other" if family == "xid" else family
                        positions = f.stat_positions(resource, dp, b"", stats, {}, name=name,
                                                     family=family, kind=kind, unit=unit)
                        if isinstance(positions, str):
                            return None
                        for k, pos in zip(sorted(p.values), positions, strict=True):
                            narrow_cells.append(Cell(point, p.values[k],
                                                     _COUNT if k == 4 else _STAT_F8, *ANY_VALUE))
                            point_series.append(pos)
                        continue
                    if family == "xid" or len(p.values) != 1:
                        return None
                    [(field_no, offset)] = p.values.items()
                    cell = Cell(point, offset, _NUMBER_F8 if field_no == 4 else _NUMBER_I8,
                                *bounds(name))
                    at = f.position(f.resolve(resource, dp, name, family, kind, unit))
                    if isinstance(at, str):
                        return None
                    if col is None:
                        narrow_cells.append(cell)
                        point_series.append(at)
                        continue
                    row = rows.get(at)
                    if row is None:
                        row = rows[at] = len(row_point)
                        row_point.append(point)
                    gpu_cells.append(cell)
                    gpu.append((row, col))
    if next(walked, None) is not None or not ts:
        return None
    if len(set(gpu)) < len(gpu) or len(set(point_series)) < len(point_series):
        return None  # a series sent twice in one request: the general path keeps the last
    return Layout(body=body, blanks=blanks, ts=ts, cells=gpu_cells + narrow_cells, gpu=gpu,
                  row_point=row_point, row_entity=list(rows), point_series=point_series,
                  entities=f.batch.entities, series=f.batch.series)


class LayoutCache:
    """Learned layouts by request size and leading bytes; bounded by their bytes in all."""

    def __init__(self, max_bytes: int = 64 << 20) -> None:
        self.max_bytes = max_bytes
        self._layouts: dict[int, dict[bytes, Layout]] = {}  # size -> head -> layout
        self._heads: dict[int, set[int]] = {}  # size -> lengths of the heads of that size
        self._sightings: dict[tuple[int, bytes], int] = {}
        self._bytes = 0

    def read(self, body: bytes, *, window: TimeWindow) -> Batch | None:
        """``body`` flattened through a learned layout, or None."""
        by_head = self._layouts.get(len(body))
        if by_head is None:
            return None
        for n in self._heads.get(len(body), ()):
            layout = by_head.get(body[:n])
            if layout is not None:
                return layout.read(body, window=window)
        return None

    def should_learn(self, body: bytes) -> bool:
        """Whether to learn the layout of ``body`` (read the general way).

        At the 2nd, 4th, 8th... sighting of its size and first bytes: a layout seen once may
        never come back, and one that cannot be learned costs a logarithmic number of tries.
        """
        key = (len(body), body[:64])
        if len(self._sightings) > 100_000:
            self._sightings.clear()
        seen = self._sightings[key] = self._sightings.get(key, 0) + 1
        return seen >= 2 and seen & (seen - 1) == 0

    def add(self, layout: Layout) -> None:
        """Remember ``layout``; past ``max_bytes``, forget the others."""
        self._bytes += layout.nbytes
        if self._bytes > self.max_bytes:
            self._layouts.clear()
            self._heads.clear()
            self._bytes = layout.nbytes
        self._layouts.setdefault(layout.size, {})[layout.head] = layout
        self._heads.setdefault(layout.size, set()).add(len(layout.head))
