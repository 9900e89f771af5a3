"""Row tuples of one request, ready for the bulk statements: built from a batch and its ids."""

from __future__ import annotations

from typing import Any

from collector.batch import Batch
from collector.metrics import GPU_METRICS

Row = tuple[Any, ...]
Rows = tuple[list[Row], list[Row], list[Row]]
"""``(gpu_rows, point_rows, event_rows)``: ``(entity_id, ts, *GPU_METRICS columns)``,
``(series_id, ts, value)`` and ``(ts, entity_id, kind, code)``."""


GPU_COLS: list[str] = [m.column for m in GPU_METRICS]
"""The ``gpu_samples`` value columns, in the order of a GPU row after ``entity_id, ts``."""
GPU_MERGE = ", ".join(f"{c} = COALESCE(excluded.{c}, gpu_samples.{c})" for c in GPU_COLS)
"""``ON CONFLICT`` update of a GPU row: a column sent again replaces, one not sent stays."""


def build_rows(batch: Batch, eids: list[int], sids: list[int]) -> tuple[Rows, int]:
    """The rows of ``batch`` given the id of each entity and series position (-1: refused),
    and how many accepted points the refused series held (a histogram counts once)."""
    gpu_rows: list[Row] = [(eids[e], ts, *vals) for (e, ts), vals in batch.gpu.items()]
    point_rows: list[Row] = [(sids[s], ts, v) for (s, ts), v in batch.points.items()]
    positions = list(batch.points)
    c = batch.columns
    if c is not None:
        gpu_rows += zip([eids[e] for e in c.gpu_entity], c.gpu_ts, *c.gpu_values, strict=True)
        point_rows += zip([sids[s] for s in c.point_series], c.point_ts, c.point_values,
                          strict=True)
    dropped = 0
    if -1 in sids:
        series = batch.series
        point_series = [s for s, _ts in positions] + (c.point_series if c is not None else [])
        dropped = sum(1 for s in point_series if sids[s] < 0 and series[s][2] in ("", "count"))
        point_rows = [r for r in point_rows if r[0] >= 0]
    event_rows: list[Row] = [(ts, eids[e], kind, code) for e, ts, kind, code in batch.events]
    # Two spellings of one entity (e.g. a GPU whose uuid changed within the request) share
    # an id; merge their rows, since PostgreSQL refuses to upsert one key twice per statement.
    if len(set(eids)) < len(eids):
        gpu_rows = merge_gpu_rows(gpu_rows)
    if len(set(sids)) < len(sids):
        point_rows = merge_point_rows(point_rows)
    return (gpu_rows, point_rows, event_rows), dropped


def concat_rows(items: list[Rows]) -> Rows:
    """The rows of several requests, in order."""
    if len(items) == 1:
        return items[0]
    return ([r for item in items for r in item[0]], [r for item in items for r in item[1]],
            [r for item in items for r in item[2]])


def merge_gpu_rows(rows: list[Row]) -> list[Row]:
    """One row per ``(entity_id, ts)``: later values win, None keeps the earlier value."""
    merged: dict[tuple[Any, Any], list[Any]] = {}
    for row in rows:
        have = merged.get(row[:2])
        if have is None:
            merged[row[:2]] = list(row)
        else:
            have[2:] = [new if new is not None else old
                        for old, new in zip(have[2:], row[2:], strict=True)]
    return [tuple(r) for r in merged.values()]


def merge_point_rows(rows: list[Row]) -> list[Row]:
    """One row per ``(series_id, ts)``: the last one."""
    return list({(r[0], r[1]): r for r in rows}.values())
