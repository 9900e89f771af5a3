"""Every panel, annotation and variable query, expanded as Grafana expands it, runs on a real
PostgreSQL holding data Foreshock wrote, and returns the columns its panel needs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from collector.store import Store
from dashboards.export import build_all
from dashboards.macros import QueryContext, expand
from dashboards.sql import variable_queries
from tests.conftest import PG_ADMIN_DSN, _pg_available
from tests.dashboards import fleet_data

DASHBOARDS = build_all()
SELECTED: dict[str, str | list[str]] = {
    "job": fleet_data.JOB, "node": list(fleet_data.NODES), "gpu": [str(g) for g in fleet_data.GPUS],
}


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    """One database with the fleet's data for every query of this module."""
    if not _pg_available():
        pytest.skip(f"PostgreSQL is not reachable at {PG_ADMIN_DSN}")
    name = f"foreshock_dash_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    opened: Store | None = None
    try:
        opened = Store.open(f"{base}/{name}")
        fleet_data.load(opened)
        yield opened
    finally:
        if opened is not None:
            opened.close()
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _context(dashboard: dict[str, Any], *, points: int) -> QueryContext:
    variables = dashboard["templating"]["list"]
    multi = frozenset(v["name"] for v in variables if v.get("multi") or v.get("includeAll"))
    values = {k: v for k, v in SELECTED.items() if any(x["name"] == k for x in variables)}
    if "job" in multi:
        values["job"] = [fleet_data.JOB]
    return QueryContext(start=fleet_data.START, end=fleet_data.END, variables=values,
                        multi=multi, max_data_points=points)


RAW = 200
"""Panel width giving a 10 s interval, the raw sampling interval."""
ROLLUP = 20
"""Panel width giving a 2 m interval, coarser than the rollups' minute."""


def _run(store: Store, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    with store.engine.connect() as conn:
        result = conn.execute(text(sql.replace(":", r"\:")))
        return list(result.keys()), [tuple(r) for r in result]


def _targets() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [
        (name, panel, target)
        for name, dashboard in DASHBOARDS.items()
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


@pytest.mark.parametrize("points", [RAW, ROLLUP], ids=["10s", "2m"])
@pytest.mark.parametrize(
    ("name", "panel", "target"), _targets(),
    ids=[f"{n}:{p['title']}" for n, p, _ in _targets()],
)
def test_panel_query_returns_what_the_panel_draws(
    store: Store, name: str, panel: dict[str, Any], target: dict[str, Any], points: int
) -> None:
    sql = expand(target["rawSql"], _context(DASHBOARDS[name], points=points))
    assert "$" not in sql, f"unexpanded macro or variable left in:\n{sql}"
    columns, rows = _run(store, sql)
    assert rows, f"{name}: {panel['title']!r} returned no rows:\n{sql}"
    if target["format"] == "time_series":
        assert columns == ["time", "metric", "value"], columns
        times = [r[0] for r in rows]
        assert times == sorted(times), "Grafana needs long time series sorted by time"
        assert all(fleet_data.START - 600 <= t <= fleet_data.END for t in times)
        assert all(isinstance(r[1], str) for r in rows)
        assert all(r[2] is None or isinstance(r[2], int | float) for r in rows)
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        assert override["matcher"]["options"] in columns
    for transformation in panel.get("transformations", []):
        for field in ("columnField", "rowField", "valueField"):
            assert transformation["options"][field] in columns


@pytest.mark.parametrize("name", list(DASHBOARDS))
def test_annotations_and_variables_run(store: Store, name: str) -> None:
    dashboard = DASHBOARDS[name]
    ctx = _context(dashboard, points=RAW)
    for annotation in dashboard["annotations"].get("list", []):
        columns, rows = _run(store, expand(annotation["target"]["rawSql"], ctx))
        assert {"time", "text", "tags"} <= set(columns) and rows, annotation["name"]
    for variable, sql in variable_queries(dashboard).items():
        columns, rows = _run(store, expand(sql, ctx))
        assert len(columns) == 1 and rows, variable
        assert {str(r[0]) for r in rows} >= set(
            [SELECTED[variable]] if isinstance(SELECTED[variable], str) else SELECTED[variable]
        )


def _panel(name: str, title: str) -> tuple[dict[str, Any], str]:
    panel = next(p for p in DASHBOARDS[name]["panels"] if p["title"] == title)
    return DASHBOARDS[name], panel["targets"][0]["rawSql"]


@pytest.mark.parametrize("points", [RAW, ROLLUP], ids=["10s", "2m"])
def test_ecc_rate_counts_a_counter_reset_as_an_increase(store: Store, points: int) -> None:
    dashboard, sql = _panel("gpu", "ECC error rate")
    _, rows = _run(store, expand(sql, _context(dashboard, points=points)))
    sbe = [r for r in rows if r[1].endswith("SBE")]
    assert sbe and all(r[2] >= 0 for r in sbe)
    # 2 errors per 10 s sample: 12 per minute, across the reset too. Where raw data takes over
    # from the rollups (minute values) at most one sample's increase lands in the next bucket.
    for gpu in ("n1 gpu 0 SBE", "n0 gpu 1 SBE"):
        rates = sorted(r[2] for r in sbe if r[1] == gpu)
        assert rates[len(rates) // 2] == pytest.approx(12.0), gpu
        assert rates[-1] <= 24.0 + 1e-9, gpu
        off = [r for r in rates if r != pytest.approx(12.0)]
        assert len(off) <= 2, (gpu, off)


def test_worst_first_tables_put_the_sick_entities_on_top(store: Store) -> None:
    dashboard, sql = _panel("fleet", "Risk by node and GPU, worst first")
    columns, rows = _run(store, expand(sql, _context(dashboard, points=RAW)))
    top = dict(zip(columns, rows[0], strict=True))
    assert (top["node"], top["gpu"], top["risk"]) == ("n0", 1, 0.9)
    assert top["signals"] == "ecc.sbe rate up, xid 48"

    dashboard, sql = _panel("network", "Degraded links")
    columns, rows = _run(store, expand(sql, _context(dashboard, points=RAW)))
    assert [(r[0], r[1]) for r in rows] == [("n1", "n0")]

    dashboard, sql = _panel("training", "Stragglers")
    columns, rows = _run(store, expand(sql, _context(dashboard, points=RAW)))
    assert rows[0][0] == "n1" and rows[0][columns.index("vs median")] > 1.0

    dashboard, sql = _panel("training", "Collective time by op")
    _, rows = _run(store, expand(sql, _context(dashboard, points=RAW)))
    # The hook's delta histogram: sum / count of each interval; the imported trace: 'all'.
    assert {r[1] for r in rows} == {"all", "all_reduce"}
    assert all(r[2] == pytest.approx(0.3) for r in rows if r[1] == "all_reduce")

    dashboard, sql = _panel("fleet", "Firing alerts")
    columns, rows = _run(store, expand(sql, _context(dashboard, points=RAW)))
    assert [(r[columns.index("node")], r[columns.index("gpu")]) for r in rows] == [("n0", 1)]
