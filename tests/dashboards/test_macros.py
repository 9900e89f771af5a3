"""Grafana's expansion of SQL macros and template variables, as its documentation gives it."""

from __future__ import annotations

import pytest

from dashboards.macros import MacroError, QueryContext, expand, format_interval

# 2017-04-21T05:01:17Z .. 2017-04-21T05:06:17Z: the range of Grafana's PostgreSQL docs.
CTX = QueryContext(start=1492750877.0, end=1492751177.0, max_data_points=300, min_interval_s=1,
                   variables={"job": "llm", "node": ["n0", "n'1"], "gpu": "3"},
                   multi=frozenset({"node"}))


@pytest.mark.parametrize(("sql", "expanded"), [
    ("$__time(dateColumn)", 'dateColumn AS "time"'),
    ("$__timeEpoch(dateColumn)", 'extract(epoch from dateColumn) as "time"'),
    ("$__timeFilter(dateColumn)",
     "dateColumn BETWEEN '2017-04-21T05:01:17Z' AND '2017-04-21T05:06:17Z'"),
    ("$__timeFrom()", "'2017-04-21T05:01:17Z'"),
    ("$__timeGroup(dateColumn,'5m')", "floor(extract(epoch from dateColumn)/300)*300"),
    ("$__timeGroup(dateColumn,'5m'), v",
     'floor(extract(epoch from dateColumn)/300)*300 AS "time", v'),
    ("$__timeGroupAlias(dateColumn,'5m')",
     'floor(extract(epoch from dateColumn)/300)*300 AS "time"'),
    ("$__unixEpochFilter(ts)", "ts >= 1492750877 AND ts <= 1492751177"),
    ("$__unixEpochFrom() - 600", "1492750877 - 600"),
    ("$__unixEpochGroupAlias(ts, '1h')", 'floor((ts)/3600)*3600 AS "time"'),
    ("$__unixEpochGroup(ts, $__interval)", "floor((ts)/1)*1"),
    ("$__interval_ms / $__interval", "1000 / 1s"),
    ("e.job = '$job' AND e.node IN ($node) AND gpu = ${gpu}",
     "e.job = 'llm' AND e.node IN ('n0','n''1') AND gpu = 3"),
])
def test_expansion_matches_grafana(sql: str, expanded: str) -> None:
    assert expand(sql, CTX) == expanded


def test_a_quote_in_a_single_valued_job_cannot_end_the_literal_it_sits_in() -> None:
    # Grafana's SqlDatasource.interpolateVariable doubles quotes in a single string value and
    # quotes each value of a multi-value one, so "'$job'" holds any job name.
    ctx = QueryContext(start=0, end=60, variables={"job": "o'brien", "node": ["a'b"]},
                       multi=frozenset({"node"}))
    assert (expand("e.job = '$job' AND e.node IN ($node)", ctx)
            == "e.job = 'o''brien' AND e.node IN ('a''b')")


def test_interval_follows_the_range_and_the_minimum() -> None:
    week = QueryContext(start=0, end=7 * 86400, max_data_points=1000)
    assert week.interval_ms == 600_000 and format_interval(week.interval_ms) == "10m"
    hour = QueryContext(start=0, end=3600, max_data_points=1000, min_interval_s=10)
    assert hour.interval_ms == 10_000


def test_unknown_macro_is_an_error() -> None:
    with pytest.raises(MacroError, match="unknown macro"):
        expand("$__nope(ts)", CTX)
