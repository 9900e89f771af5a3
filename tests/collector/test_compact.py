"""Compaction of settled narrow points into chunks (PostgreSQL): every reader sees the same
points before and after, exactly once, through late writes, retention and interrupted passes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import text

from collector.compact import WINDOW_S, compact_points
from collector.otlp import TimeWindow, flatten
from collector.query import EntityFilter, latest, query_range
from collector.rollup import roll_up_and_expire
from collector.store import Store
from tests.collector.otlp_builder import RequestBuilder, gpu_sample

T0 = 1_750_000_000.0
STEPS = 720
"""Two hours at 10 s: the end of one window (hour), a whole one and the start of a third."""
NARROW = (("train.step.duration", ""), ("train.compute.duration", ""),
          *(("train.collective.duration", stat) for stat in ("sum", "count", "min", "max")),
          ("net.link.bandwidth", ""), ("net.link.latency", ""))
PER_SAMPLE = 4 * 6 + 2 * 2
"""Narrow points per sample time: 4 ranks x (2 gauges + 4 histogram parts), 2 links x 2."""
EVERYTHING = EntityFilter(job="j")


def _stamps(rng: np.random.Generator) -> np.ndarray:
    # Nanosecond jitter, as a hook's clock gives: no millisecond would hold these.
    return T0 + np.arange(STEPS) * 10.0 + rng.uniform(0.0, 0.01, STEPS)


def _write(store: Store, stamps: np.ndarray, *, seed: int = 0) -> None:
    """What two nodes' hooks send: per rank step/compute gauges and a collective histogram,
    link probes and a GPU sample, one request per node and sample."""
    rng = np.random.default_rng(seed)
    for ts in stamps:
        for n, node in enumerate(("n0", "n1")):
            b = gpu_sample(float(ts), job="j", node=node)
            ranks = (2 * n, 2 * n + 1)
            b.gauge("train.step.duration",
                    [(float(ts), float(rng.normal(1.2, 0.1)), {"rank": r}) for r in ranks], "s")
            b.gauge("train.compute.duration",
                    [(float(ts), float(rng.normal(0.8, 0.1)), {"rank": r}) for r in ranks], "s")
            b.histogram("train.collective.duration",
                        [(float(ts), float(rng.uniform(1, 3)), 10, {"rank": r, "op": "all_reduce"})
                         for r in ranks])
            peer = "n1" if node == "n0" else "n0"
            b.gauge("net.link.bandwidth", [(float(ts), float(rng.uniform(1e10, 2e10)),
                                            {"peer": peer})])
            b.gauge("net.link.latency", [(float(ts), float(rng.uniform(1e-6, 1e-5)),
                                          {"peer": peer})])
            batch = flatten(b.request, window=TimeWindow(T0 + 1e6, max_future_s=0.0))
            assert batch.rejected == 0, batch.error_message()
            store.write(batch)


def _series(store: Store, **kwargs: Any) -> list[tuple[Any, ...]]:
    """Every narrow series' points, order-independent."""
    out = []
    for metric, stat in NARROW:
        for s in query_range(store, metric=metric, stat=stat, where=EVERYTHING, **kwargs):
            out.append((metric, stat, sorted(s["labels"].items()), s["points"]))
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


def _latest(store: Store) -> list[tuple[Any, ...]]:
    rows = [(m, s, sorted(r["labels"].items()), r["ts"], r["value"]) for m, s in NARROW
            for r in latest(store, metric=m, stat=s, where=EVERYTHING)]
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


def _reads(store: Store) -> dict[str, Any]:
    """What a user reads back: raw ranges (whole and inside a window), steps, latest, export."""
    mid = T0 + 2900.5  # to T0 + 3600.5, across the end of the first window
    trace = store.read_trace(job="j")
    part = store.read_trace(job="j", start=mid, end=mid + 700)
    return {
        "raw": _series(store, start=T0 - 10, end=T0 + 1e4),
        "inner": _series(store, start=mid, end=mid + 700),
        "steps": _series(store, start=T0, end=T0 + 7200, step=60.0, agg="max"),
        "latest": _latest(store),
        "node": trace.node, "links": trace.links, "gpu": trace.gpu,
        "part_node": part.node, "part_links": part.links,
    }


def _assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    for key, value in before.items():
        if isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(after[key], value, check_exact=True, obj=key)
        else:
            assert after[key] == value, key


def _count(store: Store, sql: str) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one() or 0)


def test_compaction_keeps_every_point_exactly(pg_url: str) -> None:
    store = Store.open(pg_url)
    _write(store, _stamps(np.random.default_rng(1)))
    raw = _count(store, "SELECT count(*) FROM points")
    before = _reads(store)
    assert len(before["raw"]) == PER_SAMPLE and all(
        len(s[3]) == STEPS for s in before["raw"])

    # An hour after the data, with the default settle age: only the last windows stay raw.
    report = compact_points(store, now=T0 + 7200 + 3600)
    settled = math.floor((T0 + 7200) / WINDOW_S) * WINDOW_S
    assert report.points == _count(store, f"SELECT count(*) FROM (SELECT 1 FROM points_all "
                                          f"WHERE ts < {settled}) x") > 0
    assert _count(store, f"SELECT count(*) FROM points WHERE ts < {settled}") == 0
    _assert_same(before, _reads(store))

    # Then everything; a second pass finds nothing to do.
    compact_points(store, now=T0 + 1e6, settle_s=0.0)
    assert _count(store, "SELECT count(*) FROM points") == 0
    assert _count(store, "SELECT sum(cardinality(vals)) FROM point_chunks") == raw
    assert _count(store, "SELECT count(*) FROM points_all") == raw
    _assert_same(before, _reads(store))
    assert compact_points(store, now=T0 + 1e6, settle_s=0.0).points == 0
    store.close()


def test_a_point_written_again_or_late_is_read_once(pg_url: str) -> None:
    store = Store.open(pg_url)
    stamps = _stamps(np.random.default_rng(2))
    _write(store, stamps)
    compact_points(store, now=T0 + 1e6, settle_s=0.0)
    # A retried request of sample 30 with other values, and a late point between two samples
    # of the next window.
    _write(store, stamps[30:31], seed=99)
    b = RequestBuilder(job="j", node="n0").gauge(
        "train.step.duration", [(float(stamps[400]) + 5.0, 7.5, {"rank": 0})], "s")
    store.write(flatten(b.request, window=TimeWindow(T0 + 1e6, max_future_s=0.0)))
    expected = _reads(store)

    steps = [s for s in expected["raw"] if s[0] == "train.step.duration"]
    rank0 = next(s[3] for s in steps if ("rank", 0) in s[2])
    assert len(rank0) == STEPS + 1 and [float(stamps[400]) + 5.0, 7.5] in rank0
    assert all(len(s[3]) == STEPS for s in steps if ("rank", 0) not in s[2])
    assert len({t for t, _ in rank0}) == len(rank0)  # no timestamp twice
    assert _count(store, "SELECT count(*) FROM points_all") == \
        _count(store, "SELECT sum(cardinality(vals)) FROM point_chunks") + 1

    # The next pass merges them into their chunks, the newer values winning.
    report = compact_points(store, now=T0 + 1e6, settle_s=0.0)
    assert report.windows == 2 and report.points == PER_SAMPLE + 1
    assert _count(store, "SELECT count(*) FROM points") == 0
    _assert_same(expected, _reads(store))
    store.close()


def _rolled_up(store: Store) -> int:
    """Narrow points counted in rollups."""
    return _count(store, "SELECT sum(r.count) FROM rollups r JOIN series s ON s.id = r.series_id "
                         "WHERE s.kind != 'rollup'")


def test_retention_rolls_up_compacted_points_once_and_drops_their_chunks(pg_url: str) -> None:
    store = Store.open(pg_url)
    stamps = _stamps(np.random.default_rng(3))
    _write(store, stamps)
    newest = float(stamps[-1])
    minutes = _series(store, start=T0 - 60, end=newest, step=60.0, agg="mean")
    compact_points(store, now=T0 + 1e6, settle_s=0.0)
    assert _count(store, "SELECT count(*) FROM point_chunks") == 3 * PER_SAMPLE

    # A cutoff inside the first chunk: its points before it are rolled up, and it stays whole.
    cutoff = roll_up_and_expire(store, now=newest, raw_retention_s=5000.0,
                                rollup_retention_s=1e6).deleted_raw_before
    assert T0 < cutoff < T0 + 3200
    assert _rolled_up(store) == PER_SAMPLE * int((stamps < cutoff).sum())
    assert _count(store, "SELECT count(*) FROM point_chunks") == 3 * PER_SAMPLE
    after = _series(store, start=T0 - 60, end=newest, step=60.0, agg="mean")
    for (m, s, labels, points), (m2, s2, labels2, points2) in zip(minutes, after, strict=True):
        assert (m, s, labels) == (m2, s2, labels2)
        np.testing.assert_allclose(points2, points, rtol=1e-12, err_msg=f"{m} {s} {labels}")

    # Passes that follow roll nothing up twice; a late point before the watermark stays raw
    # (compaction leaves it) until retention next moves on and rolls it up.
    again = roll_up_and_expire(store, now=newest, raw_retention_s=5000.0, rollup_retention_s=1e6)
    assert again.rolled_up_rows == 0
    b = RequestBuilder(job="j", node="n0").gauge(
        "train.step.duration", [(float(stamps[5]) + 1.0, 9.0, {"rank": 0})], "s")
    store.write(flatten(b.request, window=TimeWindow(T0 + 1e6, max_future_s=0.0)))
    assert compact_points(store, now=T0 + 1e6, settle_s=0.0).points == 0
    cutoff = roll_up_and_expire(store, now=newest, raw_retention_s=4800.0,
                                rollup_retention_s=1e6).deleted_raw_before
    assert _rolled_up(store) == PER_SAMPLE * int((stamps < cutoff).sum()) + 1
    assert _count(store, "SELECT count(*) FROM points") == 0

    # Once the cutoff passes a chunk's last point, the chunk goes.
    cutoff = roll_up_and_expire(store, now=newest, raw_retention_s=3000.0,
                                rollup_retention_s=1e6).deleted_raw_before
    assert cutoff > T0 + 3200
    assert _count(store, "SELECT count(*) FROM point_chunks") == 2 * PER_SAMPLE
    assert _rolled_up(store) == PER_SAMPLE * int((stamps < cutoff).sum()) + 1
    assert _count(store, f"SELECT count(*) FROM points_all WHERE ts >= {cutoff}") == \
        PER_SAMPLE * int((stamps >= cutoff).sum())
    store.close()


def test_an_interrupted_pass_loses_and_doubles_nothing(pg_url: str) -> None:
    store = Store.open(pg_url)
    _write(store, _stamps(np.random.default_rng(4)))
    before = _reads(store)
    total = _count(store, "SELECT count(*) FROM points")

    class Crash(RuntimeError):
        pass

    def crash_after_first_window(points: int) -> None:
        assert points > 0
        raise Crash

    with pytest.raises(Crash):
        compact_points(store, now=T0 + 1e6, settle_s=0.0, progress=crash_after_first_window)
    left = _count(store, "SELECT count(*) FROM points")
    assert 0 < left < total
    _assert_same(before, _reads(store))

    report = compact_points(store, now=T0 + 1e6, settle_s=0.0)
    assert report.points == left and _count(store, "SELECT count(*) FROM points") == 0
    _assert_same(before, _reads(store))
    store.close()


def test_timestamps_that_ticks_cannot_hold_stay_raw(pg_url: str) -> None:
    store = Store.open(pg_url)
    # Before 2004 a float8 second is finer than a tick: 1000.1 s has no exact tick offset.
    b = RequestBuilder(job="j", node="n0").gauge(
        "train.step.duration", [(1000.0, 1.0, {"rank": 0}), (1000.1, 2.0, {"rank": 0}),
                                (1000.5, 3.0, {"rank": 0})], "s")
    store.write(flatten(b.request, window=TimeWindow(T0, max_future_s=0.0)))
    report = compact_points(store, now=T0, settle_s=0.0)
    assert report.points == 2 and _count(store, "SELECT count(*) FROM points") == 1
    [series] = query_range(store, metric="train.step.duration", where=EVERYTHING, start=0.0,
                           end=2000.0)
    assert series["points"] == [[1000.0, 1.0], [1000.1, 2.0], [1000.5, 3.0]]
    assert compact_points(store, now=T0, settle_s=0.0).points == 0
    store.close()


def test_sqlite_stores_are_left_as_they_are(sqlite_url: str) -> None:
    store = Store.open(sqlite_url)
    _write(store, _stamps(np.random.default_rng(5))[:30])
    before = _reads(store)
    assert compact_points(store, now=T0 + 1e6, settle_s=0.0).points == 0
    assert _count(store, "SELECT count(*) FROM points") == 30 * PER_SAMPLE
    assert _count(store, "SELECT count(*) FROM points_all") == 30 * PER_SAMPLE
    _assert_same(before, _reads(store))
    store.close()


def _rounded(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(float(f"{v:.10g}") if isinstance(v, float) else v for v in r)
                   for r in rows), key=repr)


def test_dashboard_panels_draw_the_same_after_compaction(pg_url: str) -> None:
    from dashboards.export import build_all
    from dashboards.macros import expand
    from tests.dashboards import fleet_data
    from tests.dashboards.test_queries import RAW, ROLLUP, _context, _run, _targets

    store = Store.open(pg_url)
    fleet_data.load(store, compact=False)
    dashboards = build_all()
    queries = [expand(target["rawSql"], _context(dashboards[name], points=points))
               for name, _panel, target in _targets() for points in (RAW, ROLLUP)]
    before = [_run(store, sql) for sql in queries]
    assert compact_points(store, now=fleet_data.END + WINDOW_S, settle_s=0.0).points > 0
    after = [_run(store, sql) for sql in queries]
    for sql, (columns, rows), (columns2, rows2) in zip(queries, before, after, strict=True):
        assert columns2 == columns
        # Sums over the same points in another order may differ in the last bits.
        assert _rounded(rows2) == _rounded(rows), sql
    store.close()
