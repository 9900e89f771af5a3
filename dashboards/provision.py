"""Upsert the store's data source, a folder and every dashboard into a running Grafana.

Uses grafana-client (imported only here, and only when called: it brings niquests and
urllib3-future, which the service itself must never load). Written against Grafana 11's HTTP
API: ``/api/datasources[/uid/:uid]``, ``/api/folders[/:uid]``, ``/api/dashboards/db``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy.engine import make_url

from dashboards.export import build_all
from dashboards.sql import DATASOURCE_TYPE, DATASOURCE_VARIABLE

DATASOURCE_UID = "foreshock-store"
DATASOURCE_NAME = "Foreshock store"
FOLDER_UID = "foreshock"

Change = Literal["created", "updated"]


class ProvisionError(RuntimeError):
    """Grafana refused a request; the message says which object and why."""


@dataclass(frozen=True, kw_only=True)
class ProvisionResult:
    """What ``provision`` did to each object."""

    datasource: Change
    folder: Change
    dashboards: dict[str, str] = field(default_factory=dict)
    """Dashboard uid -> its URL path in Grafana."""


def datasource_payload(db_url: str, *, uid: str = DATASOURCE_UID,
                       name: str = DATASOURCE_NAME) -> dict[str, Any]:
    """Grafana's PostgreSQL data source for the store at ``db_url`` (a SQLAlchemy URL)."""
    url = make_url(db_url)
    if url.get_backend_name() != "postgresql":
        raise ValueError(
            f"--db-url={url.render_as_string(hide_password=True)} is not PostgreSQL: Grafana's "
            "built-in data source reads PostgreSQL; for SQLite see dashboards/README.md"
        )
    if not url.database:
        raise ValueError("--db-url names no database (postgresql://user@host:5432/DATABASE)")
    return {
        "uid": uid,
        "name": name,
        "type": DATASOURCE_TYPE,
        "access": "proxy",
        "url": f"{url.host or 'localhost'}:{url.port or 5432}",
        "user": url.username or "",
        "isDefault": False,
        "jsonData": {
            "database": url.database,
            "sslmode": str(url.query.get("sslmode", "disable")),
            "postgresVersion": 1500,
            "timescaledb": False,
            "timeInterval": "10s",
        },
        "secureJsonData": {"password": url.password or ""},
    }


def _with_datasource(dashboard: dict[str, Any], uid: str, name: str) -> dict[str, Any]:
    """A copy whose ``$datasource`` starts on the provisioned data source."""
    data = copy.deepcopy(dashboard)
    for variable in data.get("templating", {}).get("list", []):
        if variable.get("name") == DATASOURCE_VARIABLE:
            variable["current"] = {"selected": True, "text": name, "value": uid}
    return data


def _is_not_found(error: Exception) -> bool:
    return getattr(error, "status_code", None) == 404


def provision(
    grafana_url: str,
    token: str,
    *,
    db_url: str,
    folder: str = "Foreshock",
    timeout_s: float = 10.0,
) -> ProvisionResult:
    """Create or update the data source, the folder and every dashboard (idempotent)."""
    from grafana_client import GrafanaApi
    from grafana_client.client import GrafanaException

    api = GrafanaApi.from_url(grafana_url, credential=token, timeout=timeout_s)
    payload = datasource_payload(db_url)
    try:
        try:
            api.datasource.get_datasource_by_uid(DATASOURCE_UID)
        except GrafanaException as error:
            if not _is_not_found(error):
                raise
            api.datasource.create_datasource(payload)
            ds_change: Change = "created"
        else:
            api.datasource.update_datasource_by_uid(DATASOURCE_UID, payload)
            ds_change = "updated"

        try:
            api.folder.get_folder(FOLDER_UID)
        except GrafanaException as error:
            if not _is_not_found(error):
                raise
            api.folder.create_folder(folder, uid=FOLDER_UID)
            folder_change: Change = "created"
        else:
            api.folder.update_folder(FOLDER_UID, title=folder, overwrite=True)
            folder_change = "updated"

        urls: dict[str, str] = {}
        for dashboard in build_all().values():
            body = {
                "dashboard": {**_with_datasource(dashboard, DATASOURCE_UID, DATASOURCE_NAME),
                              "id": None},
                "folderUid": FOLDER_UID,
                "overwrite": True,
                "message": "foreshock dashboards provision",
            }
            answer = api.dashboard.update_dashboard(body)
            urls[dashboard["uid"]] = str(answer.get("url", ""))
    except GrafanaException as error:
        raise ProvisionError(f"Grafana at {grafana_url} refused: {error.message}") from error
    return ProvisionResult(datasource=ds_change, folder=folder_change, dashboards=urls)
