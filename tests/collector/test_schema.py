"""The store's schema: gpu_samples' float4 columns on PostgreSQL (migration 0006), and the
migrations against the tables the code declares."""

import importlib

from alembic import command
from sqlalchemy import text

from collector.metrics import CANONICAL, GPU_COLUMNS
from collector.migrate import alembic_config, upgrade
from collector.otlp import TimeWindow, flatten
from collector.query import EntityFilter, latest, query_range
from collector.rollup import roll_up_and_expire
from collector.schema import FLOAT4_GPU_COLUMNS, FLOAT4_GPU_METRICS
from collector.store import Store, create_store_engine
from tests.collector.otlp_builder import RequestBuilder

T0 = 1_700_000_040.0
_TABLE_MODULES = ("api.alert_state", "api.decision_state", "api.outbox", "api.subscriptions",
                  "predictor.risk_scores")  # the start of a minute

# As NVML reports them: whole degrees, percent and MHz, mW; exact integers past 2**24 in the
# float8 columns.
SENT = {
    "gpu.utilization": 0.97,
    "gpu.memory.used": 85_899_345_921.0,
    "gpu.temperature": 61.3,
    "gpu.memory.temperature": 72.0,
    "gpu.power": 612.345,
    "gpu.clock.sm": 1965.0,
    "gpu.throttle.power": 1.0,
    "gpu.ecc.sbe": 123_456_789.0,
    "gpu.nvlink.crc_errors": 9_007_199_254_740_991.0,
}


def _write(store: Store, samples: list[tuple[float, dict[str, float]]]) -> None:
    b = RequestBuilder(job="j", node="n0")
    for name in samples[0][1]:
        b.gauge(name, [(ts, values[name], {"gpu": 0}) for ts, values in samples])
    store.write(flatten(b.request, window=TimeWindow(T0 + 600, max_future_s=60)))


def test_gpu_values_read_back_as_they_were_sent(store_url: str) -> None:
    store = Store.open(store_url)
    later = {**SENT, "gpu.power": 600.5, "gpu.temperature": 62.0}
    _write(store, [(T0, SENT), (T0 + 10, later)])
    where = EntityFilter(job="j")
    for name, value in SENT.items():
        series = query_range(store, metric=name, where=where, start=T0, end=T0 + 10)
        assert [p[1] for p in series[0]["points"]][:1] == [value], name
        assert latest(store, metric=name, where=where)[0]["value"] == later[name], name
        assert store.read_trace(job="j").gpu[name].tolist() == [value, later[name]], name

    _write(store, [(T0 + 130, later)])  # the first minute is over: it rolls up
    roll_up_and_expire(store, now=T0 + 1e6, raw_retention_s=0, rollup_retention_s=1e7)
    with store.engine.connect() as conn:
        rollup = conn.execute(text(
            "SELECT r.min, r.max, r.mean, r.last FROM rollups r "
            "JOIN series s ON s.id = r.series_id WHERE s.name = 'gpu.power'")).one()
    assert tuple(rollup) == (600.5, 612.345, (612.345 + 600.5) / 2, 600.5)
    store.close()


def test_postgresql_keeps_seven_significant_digits_of_a_bounded_gauge(pg_url: str) -> None:
    store = Store.open(pg_url)
    _write(store, [(T0, {"gpu.power": 612.3456789, "gpu.memory.used": 612.3456789})])
    gpu = store.read_trace(job="j").gpu
    assert gpu["gpu.power"].tolist() == [612.3457]
    assert gpu["gpu.memory.used"].tolist() == [612.3456789]
    store.close()


def test_migration_0006_stores_bounded_gauges_as_float4_and_keeps_values(pg_url: str) -> None:
    engine = create_store_engine(pg_url)
    upgrade(engine, "0005")
    cols = ", ".join(GPU_COLUMNS[n] for n in SENT)
    marks = ", ".join(f":{GPU_COLUMNS[n]}" for n in SENT)
    row = {GPU_COLUMNS[n]: v for n, v in SENT.items()}
    with engine.begin() as conn:
        conn.execute(text(f"INSERT INTO gpu_samples (entity_id, ts, {cols}) "
                          f"VALUES (1, {T0}, {marks})"), row)

    def stored() -> tuple[dict[str, float], set[str]]:
        with engine.connect() as conn:
            values = conn.execute(text(f"SELECT {cols} FROM gpu_samples")).one()._asdict()
            real = conn.execute(text(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'gpu_samples' AND data_type = 'real'")).scalars().all()
        return values, set(real)

    def row_bytes() -> int:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT pg_column_size(g.*) FROM gpu_samples g"))
                       .scalar_one())

    before = row_bytes()
    upgrade(engine)
    values, real = stored()
    assert values == row and real == FLOAT4_GPU_COLUMNS
    assert row_bytes() < before

    command.downgrade(alembic_config(engine), "0005")
    values, real = stored()
    assert values == row and real == set()
    engine.dispose()


def test_float4_columns_are_the_bounded_gauges() -> None:
    kinds = {CANONICAL[n].kind for n in FLOAT4_GPU_METRICS}
    units = {CANONICAL[n].unit for n in FLOAT4_GPU_METRICS}
    assert kinds == {"gauge"} and "bytes" not in units


def test_the_migrations_build_every_table_the_code_declares(store_url: str) -> None:
    # A model changed without its migration works on a test's fresh store only by luck: a
    # real one, upgraded by `foreshock serve` at start, would lack the column or table.
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from collector.schema import Base

    for module in _TABLE_MODULES:  # their tables join Base.metadata on import
        importlib.import_module(module)
    store = Store.open(store_url)
    try:
        with store.engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        store.close()
    if store.is_sqlite:  # what SQLite is meant to lack: compaction, and 4-byte floats
        diff = [d for d in diff if not (
            isinstance(d, tuple) and d[0] == "add_table" and d[1].name == "point_chunks")
            and not (isinstance(d, list) and d[0][0] == "modify_type"
                     and d[0][2] == "gpu_samples" and d[0][3] in FLOAT4_GPU_COLUMNS)]
    assert diff == []
