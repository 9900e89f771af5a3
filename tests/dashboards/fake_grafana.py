"""A local HTTP server with the few Grafana 11 HTTP API endpoints ``provision`` calls.

Request and response shapes follow Grafana's HTTP API documentation (data source, folder and
dashboard APIs); state lives in memory so tests can look at what was stored.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class GrafanaState:
    token: str
    datasources: dict[str, dict[str, Any]] = field(default_factory=dict)
    folders: dict[str, dict[str, Any]] = field(default_factory=dict)
    dashboards: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    next_id: int = 1

    def take_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1


Reply = tuple[int, dict[str, Any]]


def _datasource(state: GrafanaState, method: str, path: str, body: dict[str, Any]) -> Reply:
    m = re.fullmatch(r"/api/datasources/uid/([^/]+)", path)
    if m and method == "GET":
        ds = state.datasources.get(m.group(1))
        return (200, ds) if ds else (404, {"message": "Data source not found"})
    if m and method == "PUT":
        old = state.datasources.get(m.group(1))
        if old is None:
            return 404, {"message": "Data source not found"}
        ds = {**body, "id": old["id"], "uid": old["uid"], "version": old["version"] + 1}
        ds.pop("secureJsonData", None)
        state.datasources[old["uid"]] = ds
        return 200, {"datasource": ds, "id": ds["id"], "message": "Datasource updated",
                     "name": ds["name"]}
    if path == "/api/datasources" and method == "POST":
        if any(d["name"] == body.get("name") for d in state.datasources.values()):
            return 409, {"message": "data source with the same name already exists"}
        if not body.get("type") or not body.get("name"):
            return 400, {"message": "Required name and type"}
        ds = {**body, "id": state.take_id(), "version": 1}
        ds.pop("secureJsonData", None)
        state.datasources[ds["uid"]] = ds
        return 200, {"datasource": ds, "id": ds["id"], "message": "Datasource added",
                     "name": ds["name"]}
    return 404, {"message": "Not found"}


def _folder(state: GrafanaState, method: str, path: str, body: dict[str, Any]) -> Reply:
    m = re.fullmatch(r"/api/folders/([^/]+)", path)
    if m and method == "GET":
        folder = state.folders.get(m.group(1))
        return (200, folder) if folder else (404, {"message": "folder not found",
                                                  "status": "not-found"})
    if m and method == "PUT":
        folder = state.folders.get(m.group(1))
        if folder is None:
            return 404, {"message": "folder not found", "status": "not-found"}
        if not body.get("overwrite") and body.get("version") != folder["version"]:
            return 412, {"message": "the folder has been changed by someone else",
                         "status": "version-mismatch"}
        folder.update(title=body.get("title", folder["title"]), version=folder["version"] + 1)
        return 200, folder
    if path == "/api/folders" and method == "POST":
        uid = body.get("uid") or f"f{state.next_id}"
        if uid in state.folders:
            return 409, {"message": "a folder with the same uid already exists"}
        folder = {"id": state.take_id(), "uid": uid, "title": body["title"],
                  "url": f"/dashboards/f/{uid}/", "version": 1}
        state.folders[uid] = folder
        return 200, folder
    return 404, {"message": "Not found"}


def _dashboard(state: GrafanaState, body: dict[str, Any]) -> Reply:
    dashboard = body.get("dashboard")
    if not isinstance(dashboard, dict) or not dashboard.get("title"):
        return 400, {"message": "Dashboard title cannot be empty"}
    folder_uid = body.get("folderUid")
    if folder_uid and folder_uid not in state.folders:
        return 400, {"message": "folder not found"}
    uid = dashboard["uid"]
    old = state.dashboards.get(uid)
    if old is not None and not body.get("overwrite") and dashboard.get("id") is None:
        return 412, {"message": "A dashboard with the same uid already exists",
                     "status": "name-exists"}
    slug = re.sub(r"[^a-z0-9]+", "-", dashboard["title"].lower()).strip("-")
    stored = {**dashboard, "id": old["dashboard"]["id"] if old else state.take_id(),
              "version": old["dashboard"]["version"] + 1 if old else 1}
    state.dashboards[uid] = {"dashboard": stored, "folderUid": folder_uid}
    return 200, {"id": stored["id"], "uid": uid, "url": f"/d/{uid}/{slug}", "status": "success",
                 "version": stored["version"], "slug": slug}


class _Handler(BaseHTTPRequestHandler):
    state: GrafanaState

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``state.requests`` instead."""

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}") if length else {}
        path = self.path.split("?", 1)[0]
        self.state.requests.append((method, path))
        if self.headers.get("Authorization") != f"Bearer {self.state.token}":
            code, reply = 401, {"message": "Unauthorized"}
        elif path == "/api/health":
            code, reply = 200, {"commit": "fake", "database": "ok", "version": "11.6.0"}
        elif path.startswith("/api/datasources"):
            code, reply = _datasource(self.state, method, path, body)
        elif path.startswith("/api/folders"):
            code, reply = _folder(self.state, method, path, body)
        elif path == "/api/dashboards/db" and method == "POST":
            code, reply = _dashboard(self.state, body)
        else:
            code, reply = 404, {"message": "Not found"}
        data = json.dumps(reply).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")


class FakeGrafana:
    """``with FakeGrafana(token) as grafana:`` serves on ``grafana.url`` (port 0)."""

    def __init__(self, token: str) -> None:
        self.state = GrafanaState(token=token)
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGrafana:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
