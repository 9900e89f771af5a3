"""Expand a panel's SQL the way Grafana 11 does before it reaches PostgreSQL.

Three steps, in Grafana's order:
1. the frontend interpolates template variables (``$job``, ``${job}``, ``[[job]]``) with the
   SQL data sources' formatting: a multi-value or include-All variable becomes a list of
   quoted literals, a single value is inserted with its quotes doubled;
2. the backend's global substitutions (``sqleng``): ``$__interval_ms``, ``$__interval``,
   ``$__unixEpochFrom()``, ``$__unixEpochTo()``;
3. the PostgreSQL macro engine (``pkg/tsdb/grafana-postgresql-datasource/macros.go``):
   ``$__time``, ``$__timeEpoch``, ``$__timeFilter``, ``$__timeFrom``, ``$__timeTo``,
   ``$__timeGroup[Alias]``, ``$__unixEpochFilter``, ``$__unixEpochNano*``,
   ``$__unixEpochGroup[Alias]``.
The benchmark and the tests use it to run every panel's query on a real PostgreSQL.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

_VARIABLE = re.compile(
    r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^}]+))?(?::([^}]+))?\}"
)
_MACRO = re.compile(r"\$([_a-zA-Z0-9]+)\(([^)]*)\)")
_UNITS_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_ROUND_MS = (  # Grafana's rangeutil.roundInterval: (upper bound, rounded interval) in ms.
    (15, 10), (35, 20), (75, 50), (150, 100), (350, 200), (750, 500), (1500, 1000),
    (3500, 2000), (7500, 5000), (12500, 10000), (17500, 15000), (25000, 20000),
    (45000, 30000), (90000, 60000), (210000, 120000), (450000, 300000), (750000, 600000),
    (1050000, 900000), (1500000, 1200000), (2700000, 1800000), (5400000, 3600000),
    (9000000, 7200000), (16200000, 10800000), (32400000, 21600000), (86400000, 43200000),
    (604800000, 86400000), (1814400000, 604800000), (3628800000, 2592000000),
)


class MacroError(ValueError):
    """A macro Grafana would reject (unknown name, missing argument, bad interval)."""


@dataclass(frozen=True, kw_only=True)
class QueryContext:
    """What Grafana knows when it runs a panel's query."""

    start: float
    """Start of the dashboard's time range, Unix seconds."""
    end: float
    """End of the time range, Unix seconds."""
    variables: dict[str, str | list[str]] = field(default_factory=dict)
    """Template variable -> selected value(s); "All" is the list of every option."""
    multi: frozenset[str] = frozenset()
    """Variables with multi-value or include-All on: their values are quoted literals."""
    max_data_points: int = 1000
    """Panel width in pixels, which bounds the number of points."""
    min_interval_s: float = 10.0
    """The data source's (or panel's) minimum interval."""

    def __post_init__(self) -> None:
        if not self.end > self.start:
            raise ValueError(f"QueryContext end={self.end} must be after start={self.start}")

    @property
    def interval_ms(self) -> int:
        """``$__interval_ms`` as Grafana's frontend computes it for this range and width."""
        raw = (self.end - self.start) * 1000 / self.max_data_points
        rounded = next((r for bound, r in _ROUND_MS if raw < bound), 31536000000)
        return int(max(rounded, self.min_interval_s * 1000))


def format_interval(ms: int) -> str:
    """Go's ``gtime.FormatInterval``: the largest whole unit, e.g. ``60000`` -> ``1m``."""
    for unit, seconds in (("y", 31536000), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if ms >= seconds * 1000:
            return f"{ms // (seconds * 1000)}{unit}"
    return f"{ms}ms" if ms >= 1 else "1ms"


def _go_float(value: float) -> str:
    """Go's ``%v`` of a float64: shortest digits, exponent form from 1e6 or under 1e-4."""
    if value == 0:
        return "0"
    digits = Decimal(repr(value)).normalize()
    exp = digits.adjusted()
    if exp < -4 or exp >= 6:
        mantissa = format(digits.scaleb(-exp).normalize(), "f")
        return f"{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    return format(digits, "f")


def _rfc3339(ts: float) -> str:
    text = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0")
    return text.rstrip(".") + "Z"


def _parse_interval(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", text.strip("'"))
    if not m:
        raise MacroError(f"error parsing interval {text}")
    return float(m.group(1)) * _UNITS_S[m.group(2)]


def interpolate_variables(sql: str, ctx: QueryContext) -> str:
    """Step 1: template variables, formatted as the SQL data sources format them."""

    def replace(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(4)
        if name not in ctx.variables:
            return m.group(0)
        value = ctx.variables[name]
        if isinstance(value, list):
            return ",".join(_quote(v) for v in value)
        return _quote(value) if name in ctx.multi else value.replace("'", "''")

    return _VARIABLE.sub(replace, sql)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def interpolate_globals(sql: str, ctx: QueryContext) -> str:
    """Step 2: the substitutions every SQL data source makes."""
    ms = ctx.interval_ms
    sql = sql.replace("$__interval_ms", str(ms)).replace("$__interval", format_interval(ms))
    sql = sql.replace("$__unixEpochFrom()", str(math.floor(ctx.start)))
    return sql.replace("$__unixEpochTo()", str(math.floor(ctx.end)))


def expand_macros(sql: str, ctx: QueryContext) -> str:
    """Step 3: the PostgreSQL macro engine."""

    def replace(m: re.Match[str]) -> str:
        name = m.group(1)
        index = sql.find(m.group(0))
        # As Grafana: $__timeGroup directly followed by ',' is the pre-5.3 aliased form.
        if name == "__timeGroup" and sql[index + len(m.group(0)):][:1] == ",":
            name = "__timeGroupAlias"
        args = [a.strip() for a in m.group(2).split(",")]
        return _evaluate(name, [a for a in args if a] if args == [""] else args, ctx)

    return _MACRO.sub(replace, sql)


def _evaluate(name: str, args: list[str], ctx: QueryContext) -> str:
    frm, to = ctx.start, ctx.end
    if name in ("__time", "__timeEpoch", "__timeFilter", "__unixEpochFilter",
                "__unixEpochNanoFilter") and not args:
        raise MacroError(f"missing time column argument for macro {name}")
    if name in ("__timeGroup", "__unixEpochGroup") and len(args) < 2:
        raise MacroError(f"macro {name} needs time column and interval and optional fill value")
    match name:
        case "__time":
            return f'{args[0]} AS "time"'
        case "__timeEpoch":
            return f'extract(epoch from {args[0]}) as "time"'
        case "__timeFilter":
            return f"{args[0]} BETWEEN '{_rfc3339(frm)}' AND '{_rfc3339(to)}'"
        case "__timeFrom":
            return f"'{_rfc3339(frm)}'"
        case "__timeTo":
            return f"'{_rfc3339(to)}'"
        case "__timeGroup":
            s = _go_float(_parse_interval(args[1]))
            return f"floor(extract(epoch from {args[0]})/{s})*{s}"
        case "__timeGroupAlias" | "__unixEpochGroupAlias":
            return _evaluate(name.removesuffix("Alias"), args, ctx) + ' AS "time"'
        case "__unixEpochFilter":
            return f"{args[0]} >= {math.floor(frm)} AND {args[0]} <= {math.floor(to)}"
        case "__unixEpochNanoFilter":
            return f"{args[0]} >= {int(frm * 1e9)} AND {args[0]} <= {int(to * 1e9)}"
        case "__unixEpochNanoFrom":
            return str(int(frm * 1e9))
        case "__unixEpochNanoTo":
            return str(int(to * 1e9))
        case "__unixEpochGroup":
            s = _go_float(_parse_interval(args[1]))
            return f"floor(({args[0]})/{s})*{s}"
    raise MacroError(f"unknown macro {name!r}")


def expand(sql: str, ctx: QueryContext) -> str:
    """A panel's SQL as PostgreSQL receives it from Grafana."""
    return expand_macros(interpolate_globals(interpolate_variables(sql, ctx), ctx), ctx)
