"""SQL queries, annotations and variables for Grafana's PostgreSQL data source.

grafana-foundation-sdk has no builder for the SQL data sources, so these are the small
``Dataquery`` and annotation-target types its encoder needs: each serialises to exactly the
JSON that Grafana 11's PostgreSQL query editor saves in code mode.
"""

from __future__ import annotations

import typing
from typing import Literal

from grafana_foundation_sdk.builders import dashboard as builders
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import dashboard as models

DATASOURCE_TYPE = "grafana-postgresql-datasource"
"""Plugin id of Grafana's built-in PostgreSQL data source (since 10.2.3; alias ``postgres``)."""
DATASOURCE_VARIABLE = "datasource"
DATASOURCE = models.DataSourceRef(type_val=DATASOURCE_TYPE, uid="${" + DATASOURCE_VARIABLE + "}")
"""Every panel, annotation and variable reads the data source picked in ``$datasource``."""

Format = Literal["time_series", "table"]


class SqlQuery(cogvariants.Dataquery):
    """A raw SQL query as Grafana's PostgreSQL query editor stores it in code mode."""

    def __init__(self, *, ref_id: str, raw_sql: str, format_: Format) -> None:
        self.ref_id = ref_id
        self.raw_sql = raw_sql
        self.format = format_

    def to_json(self) -> dict[str, object]:
        return {
            "refId": self.ref_id,
            "datasource": DATASOURCE,
            "editorMode": "code",
            "format": self.format,
            "rawQuery": True,
            "rawSql": self.raw_sql,
        }


class Sql(cogbuilder.Builder[cogvariants.Dataquery]):
    """Builder of one panel target: ``Sql(query, "table")``."""

    def __init__(self, raw_sql: str, format_: Format = "time_series", *, ref_id: str = "A") -> None:
        self._query = SqlQuery(ref_id=ref_id, raw_sql=raw_sql.strip(), format_=format_)

    def build(self) -> cogvariants.Dataquery:
        return self._query


class SqlAnnotationTarget(models.AnnotationTarget):
    """An annotation's query: rows with ``time``, optional ``timeend``, ``text`` and ``tags``."""

    def __init__(self, raw_sql: str) -> None:
        super().__init__()
        self.raw_sql = raw_sql.strip()

    def to_json(self) -> dict[str, object]:
        return SqlQuery(ref_id="Anno", raw_sql=self.raw_sql, format_="table").to_json()


class _AnnotationTargetBuilder(cogbuilder.Builder[models.AnnotationTarget]):
    def __init__(self, raw_sql: str) -> None:
        self._target = SqlAnnotationTarget(raw_sql)

    def build(self) -> models.AnnotationTarget:
        return self._target


def annotation(name: str, raw_sql: str, *, color: str) -> builders.AnnotationQuery:
    """A dashboard annotation read with SQL from the store."""
    return (
        builders.AnnotationQuery()
        .name(name)
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color(color)
        .target(_AnnotationTargetBuilder(raw_sql))
    )


def datasource_variable() -> builders.DatasourceVariable:
    """``$datasource``: which PostgreSQL data source (the Foreshock store) the dashboard reads."""
    return (
        builders.DatasourceVariable(DATASOURCE_VARIABLE)
        .label("Store")
        .type(DATASOURCE_TYPE)
        .regex("")
    )


def query_variable(
    name: str, raw_sql: str, *, label: str, multi: bool = False, numeric: bool = False
) -> builders.QueryVariable:
    """A variable whose options a SQL query lists; ``multi`` adds "All" and multi-select."""
    sort = models.VariableSort.NUMERICAL_ASC if numeric else models.VariableSort.ALPHABETICAL_ASC
    variable = (
        builders.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(raw_sql.strip())
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(sort)
    )
    if multi:
        variable = variable.multi(True).include_all(True)
    return variable


def variable_queries(dashboard: dict[str, typing.Any]) -> dict[str, str]:
    """Name -> SQL of every query variable of an exported dashboard."""
    found: dict[str, str] = {}
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            found[variable["name"]] = query if isinstance(query, str) else query["rawSql"]
    return found
