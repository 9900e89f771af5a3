"""The committed dashboard JSON: current, valid for the pinned Grafana 11.6 schema, and wired
to the data source by variable."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard
from typer.testing import CliRunner

from dashboards.cli import register
from dashboards.export import DASHBOARDS, SCHEMA_VERSION, build_all, load_all, render, stale
from dashboards.sql import DATASOURCE_TYPE

COMMITTED = load_all()
BY_VARIABLE = {"type": DATASOURCE_TYPE, "uid": "${datasource}"}


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def test_committed_json_is_what_the_code_builds() -> None:
    assert stale() == [], "run `foreshock dashboards build` and commit dashboards/*.json"


def _cli() -> typer.Typer:
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """foreshock"""

    register(root)
    return root


def test_build_command_writes_every_dashboard(tmp_path: Path) -> None:
    result = CliRunner().invoke(_cli(), ["dashboards", "build", "--out", str(tmp_path / "new")])
    assert result.exit_code == 0, result.output
    assert sorted(p.stem for p in (tmp_path / "new").glob("*.json")) == sorted(DASHBOARDS)
    assert stale(tmp_path / "new") == []


def test_build_command_names_an_out_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("kept")
    result = CliRunner().invoke(_cli(), ["dashboards", "build", "--out", str(tmp_path / "a-file")],
                                terminal_width=400, env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "'--out'" in result.output and "is a file: give a folder" in result.output
    assert (tmp_path / "a-file").read_text() == "kept"


@pytest.mark.parametrize("name", list(DASHBOARDS))
def test_dashboard_round_trips_through_the_pinned_schema(name: str) -> None:
    data = copy.deepcopy(COMMITTED[name])
    assert data["schemaVersion"] == SCHEMA_VERSION
    back = json.loads(json.dumps(Dashboard.from_json(data), cls=JSONEncoder))
    # The 11.6 schema types annotation targets as the built-in Grafana data source's query;
    # Grafana stores the SQL data source's query there, so compare those apart.
    for board in (data, back):
        for annotation in board["annotations"].get("list", []):
            annotation.pop("target")
    assert back == data


@pytest.mark.parametrize("name", list(DASHBOARDS))
def test_panels_have_unique_ids_and_read_the_datasource_variable(name: str) -> None:
    data = COMMITTED[name]
    panels = _panels(data)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {name}: {ids}"
    for panel in panels:
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel.get("description"), panel
        assert panel["datasource"] == BY_VARIABLE
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == BY_VARIABLE and target["rawQuery"] is True
            assert target["format"] in ("time_series", "table")
    for annotation in data["annotations"].get("list", []):
        assert annotation["datasource"] == BY_VARIABLE
        assert annotation["target"]["datasource"] == BY_VARIABLE
    variables = data["templating"]["list"]
    assert variables[0]["type"] == "datasource" and variables[0]["query"] == DATASOURCE_TYPE
    for variable in variables[1:]:
        assert variable["datasource"] == BY_VARIABLE


def test_dashboards_have_distinct_uids_and_titles() -> None:
    built = build_all()
    assert len({d["uid"] for d in built.values()}) == len(built)
    assert len({d["title"] for d in built.values()}) == len(built)
    assert all(render(d).endswith("}\n") for d in built.values())
