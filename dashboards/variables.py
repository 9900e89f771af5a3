"""The template variables the dashboards share: which job, nodes and GPUs to show."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as builders

from dashboards.sql import query_variable


def job(*, multi: bool = False) -> builders.QueryVariable:
    """``$job``: one training job (or several, with All, on the fleet overview)."""
    return query_variable(
        "job", "SELECT DISTINCT job FROM entities ORDER BY 1", label="Job", multi=multi
    )


def node(*, having: str) -> builders.QueryVariable:
    """``$node`` (multi, All): nodes of ``$job`` with an entity ``e`` matching ``having``."""
    return query_variable(
        "node",
        f"SELECT DISTINCT e.node FROM entities e WHERE e.job = '$job' AND {having} ORDER BY 1",
        label="Node",
        multi=True,
    )


def gpu() -> builders.QueryVariable:
    """``$gpu`` (multi, All): GPU indices on the picked nodes."""
    return query_variable(
        "gpu",
        "SELECT DISTINCT e.gpu FROM entities e "
        "WHERE e.job = '$job' AND e.node IN ($node) AND e.gpu IS NOT NULL ORDER BY 1",
        label="GPU",
        multi=True,
        numeric=True,
    )
