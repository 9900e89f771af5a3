import pytest
from sqlalchemy import Connection, text

from collector import rollup
from collector.rollup import roll_up_and_expire
from collector.store import Store
from tests.collector.test_store import T0, small_trace


def _count(store: Store, table: str) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def test_raw_points_become_minute_rollups_then_expire(store_url: str) -> None:
    store = Store.open(store_url)
    store.write_trace(small_trace(steps=30), job="j")  # 300 s: minutes T0-20 ... T0+280
    newest = T0 + 290
    report = roll_up_and_expire(store, now=newest + 1e6, raw_retention_s=100,
                                rollup_retention_s=10_000)
    assert report.deleted_raw_before == T0 + 160  # whole minutes older than newest - 100 s
    trace = store.read_trace()
    assert trace.gpu["ts"].min() == T0 + 160 and len(trace.gpu) == 14 * 4
    with store.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT r.ts, r.min, r.max, r.mean, r.last, r.count FROM rollups r "
            "JOIN series s ON s.id = r.series_id JOIN entities e ON e.id = s.entity_id "
            "WHERE s.name = 'gpu.temperature' AND e.node = 'n0' AND e.gpu = 0 ORDER BY r.ts"
        )).all()
    # gpu 0 of n0 reads 60 + i at T0 + 10 i.
    assert [tuple(r) for r in rows] == [
        (T0 - 20, 60.0, 63.0, 61.5, 63.0, 4), (T0 + 40, 64.0, 69.0, 66.5, 69.0, 6),
        (T0 + 100, 70.0, 75.0, 72.5, 75.0, 6)]
    assert _count(store, "rollups") > 0 and _count(store, "events") == 2

    # Running again changes nothing; once the rollup retention passes, they go too.
    again = roll_up_and_expire(store, now=newest, raw_retention_s=100, rollup_retention_s=10_000)
    assert again.rolled_up_rows == 0
    store.write_trace(small_trace(t0=T0 + 20_000, steps=5), job="j")
    roll_up_and_expire(store, now=T0 + 20_000, raw_retention_s=100, rollup_retention_s=10_000)
    assert _count(store, "events") == 2  # the new trace's two XIDs; the old ones expired
    with store.engine.connect() as conn:
        oldest = conn.execute(text("SELECT MIN(ts) FROM rollups")).scalar()
    assert oldest is None or oldest >= T0 + 10_000
    store.close()


def test_a_trace_written_while_a_pass_starts_on_an_empty_store_keeps_its_raw_data(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pass saw no raw point, then a trace from the past landed before it went on: the
    trace is aged against its own newest point on a later pass, not rolled up against ``now``
    (the service's maintenance loop racing the first ingest did exactly this)."""
    store = Store.open(store_url)
    real = rollup._newest_raw_ts

    def newest_then_a_write_lands(conn: Connection) -> float | None:
        seen = real(conn)
        store.write_trace(small_trace(steps=30), job="j")
        return seen

    monkeypatch.setattr(rollup, "_newest_raw_ts", newest_then_a_write_lands)
    report = roll_up_and_expire(store, now=T0 + 1e6, raw_retention_s=100,
                                rollup_retention_s=1e7)
    monkeypatch.undo()
    assert report.rolled_up_rows == 0
    assert len(store.read_trace().gpu) == 30 * 4 and _count(store, "rollups") == 0
    later = roll_up_and_expire(store, now=T0 + 1e6, raw_retention_s=100, rollup_retention_s=1e7)
    assert later.deleted_raw_before == T0 + 160  # aged against the trace's own newest point
    assert store.read_trace().gpu["ts"].min() == T0 + 160
    store.close()


def test_a_gap_in_the_raw_data_is_passed_over_at_once(
        store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sender whose clock ran a month behind left points a month old: a pass rolls them up and
    goes on from the next raw point, not through the empty month ten minutes at a time (4,320
    transactions here; a year off held maintenance for 66 s on SQLite, 1970 for about an hour)."""
    store = Store.open(store_url)
    month = 30 * 86400.0
    store.write_trace(small_trace(t0=T0 - month, steps=5), job="j")
    store.write_trace(small_trace(steps=30), job="j")  # 300 s: minutes T0-20 ... T0+280
    windows = []
    real = rollup._window_rollups

    def counted(*args: object, **kwargs: object) -> object:
        windows.append(args[2])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rollup, "_window_rollups", counted)
    report = roll_up_and_expire(store, now=T0 + 1e6, raw_retention_s=100,
                                rollup_retention_s=2 * month)
    assert len(windows) <= 3, f"{len(windows)} windows from {windows[:3]}"
    assert report.deleted_raw_before == T0 + 160
    assert store.read_trace().gpu["ts"].min() == T0 + 160
    with store.engine.connect() as conn:
        old = conn.execute(text("SELECT sum(r.count) FROM rollups r JOIN series s "
                                "ON s.id = r.series_id WHERE s.name = 'gpu.temperature' "
                                "AND r.ts < :t"), {"t": T0 - month + 3600}).scalar()
    assert old == 5 * 4  # the month-old samples: 5 steps of 4 GPUs, rolled up, none lost
    again = roll_up_and_expire(store, now=T0 + 1e6, raw_retention_s=100,
                               rollup_retention_s=2 * month)
    assert again.rolled_up_rows == 0
    store.close()
