"""A dashboard under construction: panels get ids in order, layout flows left to right."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as builders
from grafana_foundation_sdk.builders import stat as stat_panel
from grafana_foundation_sdk.builders import table as table_panel
from grafana_foundation_sdk.builders import timeseries as timeseries_panel
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models

from dashboards.sql import DATASOURCE, Sql, annotation, datasource_variable

REFRESH = "1m"


def _thresholds(*steps: tuple[float | None, str]) -> builders.ThresholdsConfig:
    return (
        builders.ThresholdsConfig()
        .mode(models.ThresholdsMode.ABSOLUTE)
        .steps([models.Threshold(value=v, color=c) for v, c in steps])
    )


RISK_THRESHOLDS = _thresholds((None, "green"), (0.3, "yellow"), (0.6, "orange"), (0.8, "red"))
"""Colours of a failure probability: the alerting threshold sits in the orange band."""


class Board:
    """One dashboard: variables, annotations and panels with unique ids, then ``build()``."""

    def __init__(self, *, uid: str, title: str, description: str, tags: list[str]) -> None:
        self._dashboard = (
            builders.Dashboard(title)
            .uid(uid)
            .description(description)
            .tags(["foreshock", *tags])
            .refresh(REFRESH)
            .time("now-6h", "now")
            .timezone("utc")
            .tooltip(models.DashboardCursorSync.CROSSHAIR)
            .with_variable(datasource_variable())
        )
        self._next_id = 1

    def variable(self, variable: cogbuilder.Builder[models.VariableModel]) -> Board:
        self._dashboard = self._dashboard.with_variable(variable)
        return self

    def annotation(self, name: str, raw_sql: str, *, color: str) -> Board:
        self._dashboard = self._dashboard.annotation(annotation(name, raw_sql, color=color))
        return self

    def row(self, title: str) -> Board:
        self._dashboard = self._dashboard.with_row(builders.Row(title).id(self._take_id()))
        return self

    def timeseries(
        self,
        title: str,
        raw_sql: str,
        *,
        description: str,
        unit: str,
        span: int = 12,
        height: int = 8,
        stacked: bool = False,
        bars: bool = False,
        thresholds: builders.ThresholdsConfig | None = None,
    ) -> Board:
        panel = (
            timeseries_panel.Panel()
            .title(title)
            .description(description)
            .unit(unit)
            .span(span)
            .height(height)
            .fill_opacity(30 if stacked or bars else 10)
            .show_points(common.VisibilityMode.NEVER)
            .legend(
                common_builders.VizLegendOptions()
                .display_mode(common.LegendDisplayMode.TABLE)
                .placement(common.LegendPlacement.RIGHT)
                .show_legend(True)
                .calcs(["mean", "max"])
            )
        )
        if stacked:
            panel = panel.stacking(
                common_builders.StackingConfig().mode(common.StackingMode.NORMAL)
            )
        if bars:
            panel = panel.draw_style(common.GraphDrawStyle.BARS)
        if thresholds is not None:
            panel = panel.thresholds(thresholds).min(0).max(1)
        return self._add(panel, Sql(raw_sql, "time_series"))

    def table(
        self,
        title: str,
        raw_sql: str,
        *,
        description: str,
        span: int = 24,
        height: int = 8,
        gauge_columns: tuple[str, ...] = (),
        transformation: models.DataTransformerConfig | None = None,
    ) -> Board:
        panel = table_panel.Panel().title(title).description(description).span(span).height(height)
        if gauge_columns:
            gauge = common.TableBarGaugeCellOptions(mode=common.BarGaugeDisplayMode.GRADIENT)
            for column in gauge_columns:
                panel = panel.override_by_name(
                    column,
                    [
                        models.DynamicConfigValue(id_val="custom.cellOptions", value=gauge),
                        models.DynamicConfigValue(id_val="min", value=0),
                        models.DynamicConfigValue(id_val="max", value=1),
                        models.DynamicConfigValue(
                            id_val="thresholds", value=RISK_THRESHOLDS.build()
                        ),
                    ],
                )
        if transformation is not None:
            panel = panel.with_transformation(transformation)
        return self._add(panel, Sql(raw_sql, "table"))

    def stat(
        self, title: str, raw_sql: str, *, description: str, unit: str, span: int = 6
    ) -> Board:
        panel = (
            stat_panel.Panel()
            .title(title)
            .description(description)
            .unit(unit)
            .span(span)
            .height(4)
            .graph_mode(common.BigValueGraphMode.NONE)
            .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
        )
        return self._add(panel, Sql(raw_sql, "table"))

    def build(self) -> models.Dashboard:
        return self._dashboard.build()

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _add(
        self,
        panel: timeseries_panel.Panel | table_panel.Panel | stat_panel.Panel,
        target: Sql,
    ) -> Board:
        panel = panel.id(self._take_id()).datasource(DATASOURCE).with_target(target)
        self._dashboard = self._dashboard.with_panel(panel)
        return self
