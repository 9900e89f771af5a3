"""``foreshock dashboards provision`` against a local server speaking Grafana's HTTP API."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from dashboards.cli import register
from dashboards.export import DASHBOARDS, build_all
from dashboards.provision import (
    DATASOURCE_NAME,
    DATASOURCE_UID,
    FOLDER_UID,
    datasource_payload,
)
from tests.dashboards.fake_grafana import FakeGrafana

TOKEN = "glsa_test"
DB_URL = "postgresql+psycopg://grafana_reader:s3cret@db.internal:5433/foreshock"


@pytest.fixture
def grafana() -> Iterator[FakeGrafana]:
    with FakeGrafana(TOKEN) as server:
        yield server


def _cli() -> typer.Typer:
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """foreshock"""

    register(root)
    return root


def _provision(grafana: FakeGrafana, *extra: str, token: str = TOKEN) -> tuple[int, str]:
    result = CliRunner().invoke(_cli(), [
        "dashboards", "provision", "--grafana-url", grafana.url, "--token", token,
        "--db-url", DB_URL, *extra,
    ])
    return result.exit_code, result.output


def test_provision_creates_then_updates_without_duplicates(grafana: FakeGrafana) -> None:
    code, output = _provision(grafana, "--folder", "GPU fleet")
    assert code == 0, output
    assert "data source: created; folder: created" in output
    state = grafana.state
    assert list(state.datasources) == [DATASOURCE_UID]
    ds = state.datasources[DATASOURCE_UID]
    assert ds["type"] == "grafana-postgresql-datasource"
    assert (ds["url"], ds["user"], ds["jsonData"]["database"]) == (
        "db.internal:5433", "grafana_reader", "foreshock")
    assert state.folders[FOLDER_UID]["title"] == "GPU fleet"
    uids = {d["uid"] for d in build_all().values()}
    assert set(state.dashboards) == uids
    for stored in state.dashboards.values():
        assert stored["folderUid"] == FOLDER_UID
        assert stored["dashboard"]["version"] == 1
        variable = stored["dashboard"]["templating"]["list"][0]
        assert variable["current"]["value"] == DATASOURCE_UID

    code, output = _provision(grafana, "--folder", "GPU fleet")
    assert code == 0, output
    assert "data source: updated; folder: updated" in output
    assert list(state.datasources) == [DATASOURCE_UID] and list(state.folders) == [FOLDER_UID]
    assert set(state.dashboards) == uids and len(state.dashboards) == len(DASHBOARDS)
    assert all(d["dashboard"]["version"] == 2 for d in state.dashboards.values())
    assert state.datasources[DATASOURCE_UID]["version"] == 2
    assert ("POST", "/api/datasources") in state.requests
    assert state.requests.count(("POST", "/api/datasources")) == 1


def test_provision_reports_a_rejected_token(grafana: FakeGrafana) -> None:
    code, output = _provision(grafana, token="wrong")
    assert code == 1
    assert "refused" in output and "Unauthorized" in output
    assert not grafana.state.dashboards


def test_provision_rejects_a_sqlite_store_with_a_pointer_to_the_readme() -> None:
    with pytest.raises(ValueError, match="README"):
        datasource_payload("sqlite:///foreshock.db")


def test_the_service_never_imports_grafana_client() -> None:
    code = (
        "import sys; import api.app, api.cli; api.cli._register_all(); "
        "from api.app import create_app; from api.settings import Settings; "
        "create_app(Settings()); "
        "bad = [m for m in ('grafana_client', 'niquests', 'grafana_foundation_sdk') "
        "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_file_provisioning_matches_what_provision_creates() -> None:
    root = Path(__file__).resolve().parents[2] / "dashboards" / "provisioning"
    ds = yaml.safe_load((root / "datasources" / "foreshock.yaml").read_text())["datasources"][0]
    payload = datasource_payload(DB_URL)
    assert (ds["uid"], ds["name"], ds["type"]) == (DATASOURCE_UID, DATASOURCE_NAME,
                                                   payload["type"])
    assert set(ds["jsonData"]) == set(payload["jsonData"])
    provider = yaml.safe_load((root / "dashboards" / "foreshock.yaml").read_text())["providers"][0]
    assert (provider["type"], provider["folderUid"]) == ("file", FOLDER_UID)
